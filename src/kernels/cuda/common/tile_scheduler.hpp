#pragma once
// Which output tiles a CTA computes (fa2 and fa3). Tiles are numbered
// (batch, head)-major with query blocks in reverse inside each head, so that
// consecutive tiles share one head's K and V in L2 and, under a causal mask,
// the longest rows (the most key tiles) start first and the short ones fill
// the tail.
//  - one tile per CTA: the grid is (query blocks, q heads, batch) (fa2);
//  - persistent: a grid of at most one CTA per SM walks tiles blockIdx.x,
//    blockIdx.x + gridDim.x, ... (fa3), so the producer loads the next tile
//    while the consumers finish the last;
//  - dynamic (fa3, tiles of unequal cost): a persistent grid whose CTAs take
//    the next tile in cost order from an atomic counter as they free up.
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
  static AK_HOST_DEVICE long long num_tiles(const AttnParams& p) {
    return static_cast<long long>(num_m_blocks(p)) * p.heads_q * p.batch;
  }
  // Tile number `linear` in the order above.
  static AK_HOST_DEVICE Tile tile(long long linear, const AttnParams& p) {
    const int m_blocks = num_m_blocks(p);
    const long long slice = linear / m_blocks;  // batch * heads_q + head
    return {m_blocks - 1 - static_cast<int>(linear % m_blocks), static_cast<int>(slice % p.heads_q),
            static_cast<int>(slice / p.heads_q)};
  }
  // Tile number `slot` in cost order: the tiles sorted by cost -- query block
  // descending -- within groups of `group` (batch, head) slices whose K and V
  // fit in L2 together, so that the longest tiles start first and the tiles
  // running at once share a few heads. The dynamic scheduler (fa3's atomic
  // counter) hands out slots in this order as CTAs free up.
  static AK_HOST_DEVICE Tile grouped_tile(long long slot, int group, const AttnParams& p) {
    const int m_blocks = num_m_blocks(p);
    const long long slices = static_cast<long long>(p.heads_q) * p.batch;
    const long long per_group = static_cast<long long>(m_blocks) * group;
    const long long g = slot / per_group, r = slot % per_group;
    const long long size = slices - g * group < group ? slices - g * group : group;  // the last group may be short
    const long long slice = g * group + r % size;
    return {m_blocks - 1 - static_cast<int>(r / size), static_cast<int>(slice % p.heads_q),
            static_cast<int>(slice / p.heads_q)};
  }
  // The same cost order for a static persistent walk of `ctas` CTAs: the walk
  // position is dealt in snake order (round r runs the CTAs forwards when r
  // is even, backwards when odd), so each CTA gets a similar total.
  static AK_HOST_DEVICE Tile cost_ordered_tile(long long walk, long long ctas, int group, const AttnParams& p) {
    const long long tiles = num_tiles(p);
    const long long round = walk / ctas, pos = walk % ctas;
    const bool full_round = (round + 1) * ctas <= tiles;  // a partial last round is dealt forwards
    const long long slot = (round & 1) && full_round ? round * ctas + (ctas - 1 - pos) : walk;
    return grouped_tile(slot, group, p);
  }
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
