#pragma once
// Host launchers of fa2, one instantiation per generated .cu file
// (fa2_instances.def -> fa2_<dtype>_d<dim>.cu, see src/backends/cuda/CMakeLists.txt).
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_types.hpp"
#include "kernels/cuda/fa2/kernel.hpp"

namespace attnkit::cuda {

template <class Traits>
cudaError_t fa2_configure() {
  return cudaFuncSetAttribute(fa2_forward_kernel<Traits>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(Traits::kSmemBytes));
}

// Enqueues one forward on `stream`; allocates nothing (graph-capturable).
template <class Traits>
cudaError_t fa2_launch(const AttnParams& p, cudaStream_t stream) {
  fa2_forward_kernel<Traits><<<Fa2TileScheduler<Traits::kBlockM>::grid(p), Traits::kThreads, Traits::kSmemBytes,
                               stream>>>(p);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda

// Defines fa2_launch_<TAG>_d<DIM> and fa2_configure_<TAG>_d<DIM> (declared in
// src/backends/cuda/launchers.hpp) for one table entry.
#define AK_FA2_DEFINE_LAUNCHER(TAG, DIM)                                                                 \
  namespace attnkit::cuda {                                                                              \
  using Fa2Traits_##TAG##_##DIM = Fa2Config<CudaElement<DType::TAG>::type, DIM>::Traits;                 \
  int fa2_launch_##TAG##_d##DIM(const AttnParams& p, void* stream) {                                     \
    return static_cast<int>(fa2_launch<Fa2Traits_##TAG##_##DIM>(p, static_cast<cudaStream_t>(stream))); \
  }                                                                                                      \
  int fa2_configure_##TAG##_d##DIM() { return static_cast<int>(fa2_configure<Fa2Traits_##TAG##_##DIM>()); } \
  }
