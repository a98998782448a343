#pragma once
// Declarations of the kernel launchers that the generated .cu files define
// (one instantiation each), without CUDA types, so host glue stays plain C++.
// Each returns a cudaError_t as int (0 = success).
#include "kernels/cuda/params.hpp"

namespace attnkit::cuda {

using LaunchFn = int (*)(const AttnParams&, void* stream);
using ConfigureFn = int (*)();

#define AK_FA2_INSTANCE(TAG, DIM)                                    \
  int fa2_launch_##TAG##_d##DIM(const AttnParams& p, void* stream); \
  int fa2_configure_##TAG##_d##DIM();
#include "kernels/cuda/fa2_instances.def"
#undef AK_FA2_INSTANCE

#define AK_SDPA_INSTANCE(TAG) int sdpa_launch_##TAG(const AttnParams& p, void* stream);
#include "kernels/cuda/sdpa_instances.def"
#undef AK_SDPA_INSTANCE

}  // namespace attnkit::cuda
