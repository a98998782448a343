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
#include <algorithm>

#include "kernels/cuda/common/fast_divmod.hpp"
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

// Heads a group of fa3's persistent walk over unequal tiles (grouped_tile's
// `group`), from the walk, the tile's rows and the bytes of K and V a (batch,
// head) slice holds:
//  - dynamic (tiles from a counter), 128-row tiles (d96-d256): as many heads
//    as have their query tiles within one round of the grid (CTAs / query
//    tiles a head, at least 1), within half the L2. At causal
//    s2k / s4k / s8k (8 / 4 / 2 heads) d128 ran 1.03 / 1.04 / 1.04x and d256
//    1.08 / 1.09 / 1.09x over groups whose K and V fit a quarter of the L2;
//    groups of 3, 6 or 12 heads, whose tiles straddle rounds, were the
//    slowest (H100, 2026-12-08, docs/perf/gpu-fa3.md). d256's short causal
//    rows (s512 / s1k: 33 / 16 heads, against 25 / 12 before) were not timed;
//  - dynamic, d64's 192-row tiles: heads whose K and V fit a quarter of the
//    L2 (the round rule ran 1-3% slower at s4k / s8k, the same call);
//  - static, d128 (short rows): one head at a time, its 1-8 tiles dealt side
//    by side, so its K and V come from DRAM once. Groups of heads whose K and
//    V filled half the L2 moved 306 MB from DRAM against 268 compulsory at
//    d128 causal s512 (ncu); one head at a time ran 1.15x / 1.17x faster at
//    causal s512 / s1k (H100, 2026-12-07, docs/perf/gpu-fa3.md);
//  - static, other head dims: heads whose K and V fit half the L2. d64's
//    192-row tiles ran 2% slower one head at a time (the same call): at ~2/3
//    of d128's rate they press less on DRAM, and the balance across CTAs
//    weighs more. d96 was not measured.
struct WalkGroupShape {
  bool dynamic = false;
  int head_dim_qk = 0;
  int block_m = 0;                    // rows a tile
  long long m_blocks = 0;             // query tiles a head
  long long ctas = 0;                 // the persistent grid
  long long kv_bytes_per_slice = 0;   // K and V of one (batch, head)
  long long l2_bytes = 0;
};
inline long long walk_group_heads(const WalkGroupShape& w) {
  constexpr long long kMax = 1 << 20;
  auto heads_in = [&](long long budget) {
    return std::clamp<long long>(w.kv_bytes_per_slice > 0 ? budget / w.kv_bytes_per_slice : 1, 1, kMax);
  };
  if (!w.dynamic && w.head_dim_qk == 128) return 1;
  if (w.dynamic && w.block_m == 128 && w.m_blocks > 0 && w.ctas > 0) {
    const long long round = std::clamp<long long>(w.ctas / w.m_blocks, 1, kMax);
    return std::min(round, heads_in(w.l2_bytes / 2));
  }
  return heads_in(w.l2_bytes / (w.dynamic ? 4 : 2));
}

// The persistent walk's decode (fa3) on divisors built once per launch: the
// tiles of tile / grouped_tile / cost_ordered_tile above, with each / and %
// a multiply-high and a shift (FastDivmod). Built only while walk positions
// stay below 2^31 (tiles + CTAs); `enabled` is 0 otherwise and the kernel
// decodes with the 64-bit functions above.
struct TileWalk {
  int enabled = 0;
  int order = 0;  // 0: in order (tile); 1: grouped_tile; 2: cost_ordered_tile
  std::uint32_t tiles = 0, full_groups = 0;  // groups of group.divisor slices; then one of last_group.divisor
  FastDivmod m_blocks, heads_q, ctas, per_group, group, last_group;

  // For TileScheduler<BlockM>'s walk of `p` over `ctas_` CTAs: cost_group <= 0 in order; dynamic: grouped_tile
  // (slots from a counter); else cost_ordered_tile.
  template <int BlockM>
  static TileWalk make(const AttnParams& p, long long ctas_, int cost_group, bool dynamic) {
    TileWalk w;
    const long long tiles_ = TileScheduler<BlockM>::num_tiles(p);
    if (tiles_ <= 0 || ctas_ <= 0 || tiles_ + ctas_ > 0x7fffffffLL) return w;
    const long long slices = static_cast<long long>(p.heads_q) * p.batch;
    // A group of at least every slice is one group of all of them (grouped_tile's `size`).
    const long long g = cost_group > 0 ? (cost_group < slices ? cost_group : slices) : 1;
    const int mb = TileScheduler<BlockM>::num_m_blocks(p);
    w.enabled = 1;
    w.order = cost_group <= 0 ? 0 : dynamic ? 1 : 2;
    w.tiles = static_cast<std::uint32_t>(tiles_);
    w.full_groups = static_cast<std::uint32_t>(slices / g);
    w.m_blocks = FastDivmod(static_cast<std::uint32_t>(mb));
    w.heads_q = FastDivmod(static_cast<std::uint32_t>(p.heads_q));
    w.ctas = FastDivmod(static_cast<std::uint32_t>(ctas_));
    w.per_group = FastDivmod(static_cast<std::uint32_t>(mb * g));  // <= tiles < 2^31
    w.group = FastDivmod(static_cast<std::uint32_t>(g));
    w.last_group = FastDivmod(static_cast<std::uint32_t>(slices % g != 0 ? slices % g : g));
    return w;
  }

  AK_HOST_DEVICE Tile slice_tile(int m_block, std::uint32_t slice) const {
    const std::uint32_t batch = heads_q.div(slice);
    return {m_block, static_cast<int>(slice - batch * heads_q.divisor), static_cast<int>(batch)};
  }
  AK_HOST_DEVICE Tile in_order(std::uint32_t linear) const {
    const std::uint32_t slice = m_blocks.div(linear);
    return slice_tile(static_cast<int>(m_blocks.divisor - 1 - (linear - slice * m_blocks.divisor)), slice);
  }
  AK_HOST_DEVICE Tile grouped(std::uint32_t slot) const {
    const std::uint32_t g = per_group.div(slot), r = slot - g * per_group.divisor;
    const FastDivmod& size = g < full_groups ? group : last_group;
    const std::uint32_t q = size.div(r);
    return slice_tile(static_cast<int>(m_blocks.divisor - 1 - q), g * group.divisor + (r - q * size.divisor));
  }
  AK_HOST_DEVICE Tile cost_ordered(std::uint32_t walk) const {
    const std::uint32_t round = ctas.div(walk), pos = walk - round * ctas.divisor;
    const bool full_round = (round + 1) * ctas.divisor <= tiles;  // < tiles + ctas < 2^31
    return grouped((round & 1) && full_round ? round * ctas.divisor + (ctas.divisor - 1 - pos) : walk);
  }
  // Walk position `walk` (< tiles) in this launch's order.
  AK_HOST_DEVICE Tile at(std::uint32_t walk) const {
    return order == 0 ? in_order(walk) : order == 1 ? grouped(walk) : cost_ordered(walk);
  }
};

}  // namespace attnkit::cuda
