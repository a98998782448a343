#pragma once
// Which output tile a CTA computes. The grid is (query blocks, q heads, batch);
// query blocks run in reverse so that, under a causal mask, the longest rows
// (the most key tiles) start first and the short ones fill the tail.
#include "kernels/cuda/params.hpp"

namespace attnkit::cuda {

struct Fa2Tile {
  int m_block;
  int head;
  int batch;
};

template <int BlockM>
struct Fa2TileScheduler {
  static AK_HOST_DEVICE int num_m_blocks(const AttnParams& p) { return (p.seqlen_q + BlockM - 1) / BlockM; }
#if defined(__CUDACC__)
  static dim3 grid(const AttnParams& p) {
    return dim3(static_cast<unsigned>(num_m_blocks(p)), static_cast<unsigned>(p.heads_q),
                static_cast<unsigned>(p.batch));
  }
  static __device__ __forceinline__ Fa2Tile current() {
    return {static_cast<int>(gridDim.x - 1 - blockIdx.x), static_cast<int>(blockIdx.y),
            static_cast<int>(blockIdx.z)};
  }
#endif
};

// The persistent schedule: a grid of (SMs x CTAs per SM) CTAs, each walking
// its share of the tile list, so a CTA can load its next tile's Q and first
// K/V while it finishes the current one (fa2/persistent_kernel.hpp). A CTA's
// k-th tile is list position k * G + c (G CTAs, this is CTA c), or G-1-c on
// odd rounds when the work is uneven:
//  - even work (no window, fixed lengths): head-major order, so the query
//    blocks of one head run at the same time and share its K/V in L2;
//  - uneven work (causal / window / varlen): heaviest first (every head's
//    last query block, then the one before, ...), dealt in a snake so that
//    each CTA's heavy and light tiles pair up.
// Everything is recomputed from `p` on demand: nothing stays live in
// registers across the key loop but the round k.
template <int BlockM>
struct Fa2PersistentScheduler {
  static AK_HOST_DEVICE int num_tiles(const AttnParams& p) {
    return Fa2TileScheduler<BlockM>::num_m_blocks(p) * p.heads_q * p.batch;
  }
#if defined(__CUDACC__)
  static dim3 grid(const AttnParams& p, int sms, int ctas_per_sm) {
    const int tiles = num_tiles(p), slots = sms * ctas_per_sm;
    return dim3(static_cast<unsigned>(tiles < slots ? tiles : slots));
  }
  static __device__ __forceinline__ bool uneven(const AttnParams& p) {
    return p.window_left >= 0 || p.window_right >= 0 || p.layout == Layout::thd;
  }
  // List position of this CTA's k-th tile (>= num_tiles: no such tile).
  static __device__ __forceinline__ int position(const AttnParams& p, int k) {
    const int c = static_cast<int>(blockIdx.x), g = static_cast<int>(gridDim.x);
    return k * g + ((k & 1) && uneven(p) ? g - 1 - c : c);
  }
  static __device__ __forceinline__ Fa2Tile tile(const AttnParams& p, int t) {
    const int num_m = Fa2TileScheduler<BlockM>::num_m_blocks(p);
    const int heads_batch = p.heads_q * p.batch;
    const int level = uneven(p) ? t / heads_batch : t % num_m;  // 0: the last (heaviest) query block
    const int bh = uneven(p) ? t % heads_batch : t / num_m;
    return {num_m - 1 - level, bh % p.heads_q, bh / p.heads_q};
  }
#endif
};

}  // namespace attnkit::cuda
