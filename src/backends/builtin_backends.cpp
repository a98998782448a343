// The backends compiled into this binary, registered in selection-preference
// order. CUDA backends join through register_cuda_backends() when built;
// cudnn declares its capabilities in every build and runs where it was compiled.
#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/backends/cuda.hpp"
#include "attnkit/backends/cudnn.hpp"
#include "attnkit/backends/reference.hpp"
#include "attnkit/backends/sparse.hpp"
#include "attnkit/backends/registry.hpp"
#include "backends/modelled/modelled_backends.hpp"

namespace attnkit {

void register_builtin_backends(Registry& registry) {
  registry.add(make_reference_backend());
  registry.add(make_cpu_flash_backend());
  register_cuda_backends(registry);
  registry.add(make_cudnn_backend());
  register_sparse_backends(registry);
  register_modelled_backends(registry);  // last: a real kernel replaces its modelled entry
}

}  // namespace attnkit
