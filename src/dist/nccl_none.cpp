// A build without CUDA or NCCL: the NCCL communicators say so (AK5010).
#include "attnkit/dist/communicator.hpp"

namespace attnkit::dist {
namespace {
Diagnostic not_compiled() {
  return diagnose("AK5010", {{"kind", "NCCL"},
                             {"reason", "this binary was built without CUDA and NCCL (nccl.h next to the CUDA toolkit)"}});
}
}  // namespace

bool nccl_compiled() { return false; }
Result<NcclUniqueId> nccl_unique_id() { return not_compiled(); }
Result<std::shared_ptr<Communicator>> make_nccl_communicator(const NcclUniqueId&, int, int, int) { return not_compiled(); }
Result<std::shared_ptr<Communicator>> make_nccl_communicator(Communicator&, int) { return not_compiled(); }

}  // namespace attnkit::dist
