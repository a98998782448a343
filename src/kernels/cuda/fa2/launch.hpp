#pragma once
// Host launchers of fa2, one instantiation per generated .cu file
// (instances.def -> fa2_<dtype>_d<qk>_<v>.cu, see src/backends/cuda/CMakeLists.txt).
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_types.hpp"
#include "kernels/cuda/fa2/kernel.hpp"
#include "kernels/cuda/fa2/sol_pooled.hpp"

namespace attnkit::cuda {

template <class Traits, bool kBlockSparse = false, class Scores = PlainScores>
cudaError_t fa2_configure() {
  return cudaFuncSetAttribute(fa2_forward_kernel<Traits, kBlockSparse, Scores>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(Traits::kSmemBytes));
}

// Enqueues one forward on `stream`; allocates nothing (graph-capturable).
// kBlockSparse: the block-sparse lists' tiles (common/key_tiles.hpp).
template <class Traits, bool kBlockSparse = false, class Scores = PlainScores>
cudaError_t fa2_launch(const AttnParams& p_in, cudaStream_t stream) {
  AttnParams p = p_in;
  if constexpr (kBlockSparse)
    if (!prepare_listed_launch(p, Traits::kBlockM, Traits::kBlockN)) return cudaErrorInvalidValue;
  fa2_forward_kernel<Traits, kBlockSparse, Scores><<<TileScheduler<Traits::kBlockM>::grid(p), Traits::kThreads,
                                                     Traits::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda

// Defines <FAMILY>_launch_<TAG>_<QK>_<V> and <FAMILY>_configure_<TAG>_<QK>_<V>
// (declared in src/backends/cuda/launchers.hpp) for one instances.def entry
// (QK == V) of an fa2 family: the traits CONFIG<T, QK>::Traits, over
// block-sparse lists when SPARSE, with the SCORES policy (fa2/scores.hpp).
#define AK_DEFINE_FA2_FAMILY_LAUNCHER(FAMILY, CONFIG, SPARSE, TAG, QK, V, SCORES)                        \
  namespace attnkit::cuda {                                                                             \
  static_assert(QK == V, "fa2 runs equal qk and v head dims");                                          \
  using FAMILY##Traits_##TAG##_##QK = CONFIG<CudaElement<DType::TAG>::type, QK>::Traits;                \
  int FAMILY##_launch_##TAG##_##QK##_##V(const AttnParams& p, void* stream) {                           \
    return static_cast<int>(fa2_launch<FAMILY##Traits_##TAG##_##QK, SPARSE, SCORES>(p, static_cast<cudaStream_t>(stream))); \
  }                                                                                                     \
  int FAMILY##_configure_##TAG##_##QK##_##V() {                                                         \
    return static_cast<int>(fa2_configure<FAMILY##Traits_##TAG##_##QK, SPARSE, SCORES>());              \
  }                                                                                                     \
  }

#define AK_DEFINE_LAUNCHER_fa2(TAG, QK, V) AK_DEFINE_FA2_FAMILY_LAUNCHER(fa2, Fa2Config, false, TAG, QK, V, PlainScores)
// fa2bs: the same instance over block-sparse lists (instances.def family fa2bs).
#define AK_DEFINE_LAUNCHER_fa2bs(TAG, QK, V) \
  AK_DEFINE_FA2_FAMILY_LAUNCHER(fa2bs, Fa2Config, true, TAG, QK, V, PlainScores)
// fa2bsq64: block-sparse lists on 64-query tiles (Fa2Q64Config; instances.def family fa2bsq64).
#define AK_DEFINE_LAUNCHER_fa2bsq64(TAG, QK, V) \
  AK_DEFINE_FA2_FAMILY_LAUNCHER(fa2bsq64, Fa2Q64Config, true, TAG, QK, V, PlainScores)
// fa2solpool: sol_attn's pooled keys on 64-query tiles (instances.def family fa2solpool).
#define AK_DEFINE_LAUNCHER_fa2solpool(TAG, QK, V) \
  AK_DEFINE_FA2_FAMILY_LAUNCHER(fa2solpool, Fa2Q64Config, false, TAG, QK, V, SolPooledScores)
