// Built when the cuDNN frontend headers, cudnn.h or CUDA were not found at
// configure time: the backend still declares its capabilities and checks named
// platforms, but nothing can be built or run (AK2111).
#include "backends/cudnn/graph.hpp"

namespace attnkit::cudnn {
namespace {
Diagnostic not_built() {
  return diagnose("AK2111", {{"backend", "cudnn"},
                             {"detail",
                              " (configured without CUDA, cudnn.h or the cuDNN frontend headers: run "
                              "scripts/install_deps.sh and reconfigure)"}});
}
}  // namespace

class Graph {};

bool frontend_compiled() { return false; }
Diagnostics validate_spec(const GraphSpec&) { return not_built(); }
Result<BuiltGraph> find_or_build(const GraphSpec&) { return not_built(); }
Diagnostics execute(Graph&, const VariantPack&, void*, void*) { return not_built(); }
Result<bool> stream_capturing(void*) { return not_built(); }

}  // namespace attnkit::cudnn

namespace attnkit {
CudnnGraphStats cudnn_graph_stats() { return {}; }
}  // namespace attnkit
