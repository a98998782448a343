// A build without MPI: the MPI communicators say so (AK5010).
#include "attnkit/dist/communicator.hpp"

namespace attnkit::dist {
namespace {
Diagnostic not_compiled() {
  return diagnose("AK5010", {{"kind", "MPI"},
                             {"reason", "this binary was built without MPI (install libopenmpi-dev and rebuild)"}});
}
}  // namespace

bool mpi_compiled() { return false; }
Result<std::shared_ptr<Communicator>> mpi_world() { return not_compiled(); }
Result<std::shared_ptr<Communicator>> mpi_from_handle(std::uintptr_t) { return not_compiled(); }

}  // namespace attnkit::dist
