#pragma once
// Which output tile a CTA computes (fa2 and fa3). The grid is (query blocks, q heads, batch);
// query blocks run in reverse so that, under a causal mask, the longest rows
// (the most key tiles) start first and the short ones fill the tail.
#include "kernels/cuda/params.hpp"

namespace attnkit::cuda {

struct Tile {
  int m_block;
  int head;
  int batch;
};

template <int BlockM>
struct TileScheduler {
  static AK_HOST_DEVICE int num_m_blocks(const AttnParams& p) { return (p.seqlen_q + BlockM - 1) / BlockM; }
#if defined(__CUDACC__)
  static dim3 grid(const AttnParams& p) {
    return dim3(static_cast<unsigned>(num_m_blocks(p)), static_cast<unsigned>(p.heads_q),
                static_cast<unsigned>(p.batch));
  }
  static __device__ __forceinline__ Tile current() {
    return {static_cast<int>(gridDim.x - 1 - blockIdx.x), static_cast<int>(blockIdx.y),
            static_cast<int>(blockIdx.z)};
  }
#endif
};

}  // namespace attnkit::cuda
