#pragma once
// Declarations of the kernel launchers that the generated .cu files define
// (one instance each, src/kernels/cuda/instances.def), without CUDA types, so
// host glue stays plain C++. Each returns a cudaError_t as int (0 = success).
#include "kernels/cuda/params.hpp"

namespace attnkit::cuda {

using LaunchFn = int (*)(const AttnParams&, void* stream);
using ConfigureFn = int (*)();  // raises the kernel's shared-memory limit (plan time)

#define AK_INSTANCE(FAMILY, ARCH, TAG, QK, V)                                      \
  int FAMILY##_launch_##TAG##_##QK##_##V(const AttnParams& p, void* stream); \
  int FAMILY##_configure_##TAG##_##QK##_##V();
#include "kernels/cuda/instances.def"
#undef AK_INSTANCE

}  // namespace attnkit::cuda
