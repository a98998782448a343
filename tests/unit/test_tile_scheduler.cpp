// The tile orders the flash kernels walk (src/kernels/cuda/common/tile_scheduler.hpp),
// checked on the CPU: every order visits every tile exactly once, and the
// cost-ordered snake deal for causal masks gives every CTA of a persistent
// grid a similar share of the work (walked in plain order, the CTAs of an
// H200's 132-CTA grid differed by 3x at d128 causal s16k), and the dynamic
// scheduler's greedy hand-out of the same order does better still.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "kernels/cuda/common/tile_scheduler.hpp"

namespace attnkit::cuda {
namespace {

constexpr int kBlockM = 128;
using Scheduler = TileScheduler<kBlockM>;

AttnParams grid_params(int batch, int heads, int seqlen) {
  AttnParams p;
  p.batch = batch;
  p.heads_q = heads;
  p.heads_kv = heads;
  p.seqlen_q = p.seqlen_k = seqlen;
  return p;
}

std::tuple<int, int, int> key(const Tile& t) { return {t.m_block, t.head, t.batch}; }

TEST(TileScheduler, InOrderWalkVisitsEveryTileOnce) {
  const AttnParams p = grid_params(3, 5, 1000);
  std::set<std::tuple<int, int, int>> seen;
  for (long long i = 0; i < Scheduler::num_tiles(p); ++i) seen.insert(key(Scheduler::tile(i, p)));
  EXPECT_EQ(static_cast<long long>(seen.size()), Scheduler::num_tiles(p));
  EXPECT_EQ(Scheduler::tile(0, p).m_block, Scheduler::num_m_blocks(p) - 1);  // longest first
}

TEST(TileScheduler, CostOrderedWalkVisitsEveryTileOnce) {
  for (auto [batch, heads, seqlen, ctas, group] :
       {std::tuple{1, 16, 16384, 132, 3}, {8, 16, 2048, 132, 30}, {32, 16, 512, 132, 120}, {3, 7, 1000, 10, 4},
        {1, 1, 300, 132, 1}, {2, 5, 4000, 7, 64}}) {
    const AttnParams p = grid_params(batch, heads, seqlen);
    const long long tiles = Scheduler::num_tiles(p);
    std::set<std::tuple<int, int, int>> seen;
    for (long long cta = 0; cta < std::min<long long>(ctas, tiles); ++cta)
      for (long long walk = cta; walk < tiles; walk += ctas) {
        const Tile t = Scheduler::cost_ordered_tile(walk, ctas, group, p);
        ASSERT_GE(t.m_block, 0);
        ASSERT_LT(t.m_block, Scheduler::num_m_blocks(p));
        ASSERT_LT(t.head, heads);
        ASSERT_LT(t.batch, batch);
        seen.insert(key(t));
      }
    EXPECT_EQ(static_cast<long long>(seen.size()), tiles) << batch << "x" << heads << " s" << seqlen;
  }
}

// Causal cost of a tile: its key tiles (m_block + 1 for a square problem).
double worst_over_mean(const AttnParams& p, long long ctas, int group, bool cost_ordered) {
  std::vector<double> work(ctas, 0.0);
  const long long tiles = Scheduler::num_tiles(p);
  for (long long cta = 0; cta < ctas; ++cta)
    for (long long walk = cta; walk < tiles; walk += ctas) {
      const Tile t = cost_ordered ? Scheduler::cost_ordered_tile(walk, ctas, group, p) : Scheduler::tile(walk, p);
      work[cta] += t.m_block + 1;
    }
  double sum = 0.0, worst = 0.0;
  for (double w : work) sum += w, worst = std::max(worst, w);
  return worst / (sum / ctas);
}

TEST(TileScheduler, CostOrderedWalkBalancesCausalTiles) {
  const AttnParams s16k = grid_params(1, 16, 16384);
  EXPECT_GT(worst_over_mean(s16k, 132, 3, false), 1.5);  // the plain walk: the imbalance measured
  EXPECT_LT(worst_over_mean(s16k, 132, 3, true), 1.2);  // 1.16: group boundaries break the snake's pairing
  const AttnParams s2k = grid_params(8, 16, 2048);
  EXPECT_LT(worst_over_mean(s2k, 132, 30, true), 1.15);
}

// Short causal rows at d128 walk statically, one head at a time
// (walk_group_heads): a head's tiles fall in one round of the grid or two
// neighbouring ones, so its K and V are read from DRAM once, and the snake
// still evens the CTAs. Groups of heads whose K and V filled half the L2 (100
// heads at d128 s512) spread a head's tiles over 3-4 rounds: 306 MB of DRAM
// traffic against 268 compulsory (ncu), 1.15x slower (H100, 2026-12-07).
template <int BlockM>
long long widest_head_span_in_rounds(const AttnParams& p, long long ctas, int group) {
  using S = TileScheduler<BlockM>;
  std::vector<long long> first(static_cast<std::size_t>(p.batch) * p.heads_q, -1), last(first.size(), -1);
  for (long long walk = 0; walk < S::num_tiles(p); ++walk) {
    const Tile t = S::cost_ordered_tile(walk, ctas, group, p);
    const std::size_t slice = static_cast<std::size_t>(t.batch) * p.heads_q + t.head;
    if (first[slice] < 0) first[slice] = walk / ctas;
    last[slice] = walk / ctas;
  }
  long long widest = 0;
  for (std::size_t i = 0; i < first.size(); ++i) widest = std::max(widest, last[i] - first[i]);
  return widest;
}

TEST(TileScheduler, ShortCausalRowsAtD128WalkOneHeadAtATime) {
  constexpr long long kL2 = 50LL << 20;  // an H100's / H200's L2
  // The dense grid's short rows (batch = 16384 / seqlen, 16 heads of d128, 128-row tiles).
  for (int seqlen : {512, 1024}) {
    const AttnParams p = grid_params(16384 / seqlen, 16, seqlen);
    const long long kv_bytes = 2LL * seqlen * 128 * 2;  // K and V of one head, bf16
    const long long group = walk_group_heads({false, 128, 128, seqlen / 128, 132, kv_bytes, kL2});
    EXPECT_EQ(group, 1) << "s" << seqlen;
    EXPECT_LE(widest_head_span_in_rounds<128>(p, 132, static_cast<int>(group)), 1) << "s" << seqlen;
    EXPECT_GE(widest_head_span_in_rounds<128>(p, 132, static_cast<int>(kL2 / 2 / kv_bytes)), 3) << "s" << seqlen;
    EXPECT_LT(worst_over_mean(p, 132, static_cast<int>(group), true), 1.12) << "s" << seqlen;
  }
  // d64 (measured 2% slower one head at a time) keeps its L2 share.
  EXPECT_EQ(walk_group_heads({false, 64, 192, 3, 132, 2LL * 512 * 64 * 2, kL2}), 200);
}

// The dynamic walk of 128-row tiles groups as many heads as have their tiles
// within one round of the grid: 8 / 4 / 2 / 1 heads at
// s2k / s4k / s8k / s16k on 132 CTAs (1.03-1.09x over the quarter-L2 groups at
// d128 / d256 causal s2k-s8k; groups of 3, 6 and 12 were the slowest; H100,
// 2026-12-08), never more than half the L2 holds. d64's 192-row tiles keep
// the heads whose K and V fit a quarter of the L2.
TEST(TileScheduler, DynamicWalkGroupsFillAboutOneRoundOfTheGrid) {
  constexpr long long kL2 = 50LL << 20;
  const auto kv = [](long long seqlen, int d) { return 2LL * seqlen * d * 2; };  // K and V of one head, bf16
  for (int d : {128, 256}) {
    EXPECT_EQ(walk_group_heads({true, d, 128, 16, 132, kv(2048, d), kL2}), 8) << "d" << d;
    EXPECT_EQ(walk_group_heads({true, d, 128, 32, 132, kv(4096, d), kL2}), 4) << "d" << d;
    EXPECT_EQ(walk_group_heads({true, d, 128, 64, 132, kv(8192, d), kL2}), 2) << "d" << d;
    EXPECT_EQ(walk_group_heads({true, d, 128, 128, 132, kv(16384, d), kL2}), 1) << "d" << d;
    EXPECT_EQ(walk_group_heads({true, d, 128, 1024, 132, kv(131072, d), kL2}), 1) << "d" << d;
  }
  // d256's short causal rows take the dynamic walk too: 33 heads of 4 tiles fill a round exactly, 16 of 8 stay inside it.
  EXPECT_EQ(walk_group_heads({true, 256, 128, 4, 132, kv(512, 256), kL2}), 33);
  EXPECT_EQ(walk_group_heads({true, 256, 128, 8, 132, kv(1024, 256), kL2}), 16);
  // Half the L2 bounds a group: d256 s2k's 2 MB heads on a 4 MB L2 (1 head), then on an 8 MB one (2).
  EXPECT_EQ(walk_group_heads({true, 256, 128, 16, 132, kv(2048, 256), 4LL << 20}), 1);
  EXPECT_EQ(walk_group_heads({true, 256, 128, 16, 132, kv(2048, 256), 8LL << 20}), 2);
  // d64: a quarter of the L2.
  EXPECT_EQ(walk_group_heads({true, 64, 192, 43, 132, kv(8192, 64), kL2}), 6);
  EXPECT_EQ(walk_group_heads({true, 64, 192, 11, 132, kv(2048, 64), kL2}), 25);
  // Degenerate inputs stay in [1, 2^20].
  EXPECT_EQ(walk_group_heads({true, 128, 128, 16, 132, 0, kL2}), 1);
  EXPECT_EQ(walk_group_heads({true, 128, 128, 0, 0, kv(2048, 128), kL2}), 12);
}

// The dynamic scheduler's order: every tile once, and within each group of
// slices the query blocks descend (the longest causal rows first).
TEST(TileScheduler, GroupedOrderVisitsEveryTileOnceLongestFirstPerGroup) {
  for (auto [batch, heads, seqlen, group] :
       {std::tuple{1, 16, 16384, 3}, {8, 16, 2048, 30}, {3, 7, 1000, 4}, {1, 1, 300, 1}, {2, 5, 4000, 64}}) {
    const AttnParams p = grid_params(batch, heads, seqlen);
    const long long tiles = Scheduler::num_tiles(p);
    const long long per_group = static_cast<long long>(Scheduler::num_m_blocks(p)) * group;
    std::set<std::tuple<int, int, int>> seen;
    for (long long slot = 0; slot < tiles; ++slot) {
      const Tile t = Scheduler::grouped_tile(slot, group, p);
      ASSERT_LT(t.head, heads);
      ASSERT_LT(t.batch, batch);
      seen.insert(key(t));
      if (slot % per_group != 0)
        EXPECT_LE(t.m_block, Scheduler::grouped_tile(slot - 1, group, p).m_block) << "slot " << slot;
    }
    EXPECT_EQ(static_cast<long long>(seen.size()), tiles) << batch << "x" << heads << " s" << seqlen;
  }
}

// Greedy hand-out in that order (each CTA takes the next slot when it frees
// up, as the atomic counter does) against the snake deal of the static walk:
// the busiest CTA's causal work over the mean.
double dynamic_worst_over_mean(const AttnParams& p, int ctas, int group) {
  std::vector<double> busy(ctas, 0.0);
  for (long long slot = 0; slot < Scheduler::num_tiles(p); ++slot) {
    auto next_free = std::min_element(busy.begin(), busy.end());
    *next_free += Scheduler::grouped_tile(slot, group, p).m_block + 1;
  }
  double sum = 0.0, worst = 0.0;
  for (double w : busy) sum += w, worst = std::max(worst, w);
  return worst / (sum / ctas);
}

TEST(TileScheduler, DynamicOrderBalancesCausalTilesBetterThanTheSnake) {
  for (auto [batch, heads, seqlen, group] : {std::tuple{1, 16, 16384, 3}, {8, 16, 2048, 30}, {4, 32, 4096, 12}}) {
    const AttnParams p = grid_params(batch, heads, seqlen);
    const double dynamic = dynamic_worst_over_mean(p, 132, group);
    EXPECT_LT(dynamic, 1.06) << batch << "x" << heads << " s" << seqlen;  // 1.049, 1.054, 1.000
    EXPECT_LE(dynamic, worst_over_mean(p, 132, group, true)) << batch << "x" << heads << " s" << seqlen;  // 1.16, 1.12, 1.01
  }
}

// The multiply-and-shift division of the tile walk and the raster kernel, against / and %.
TEST(FastDivmod, DividesExactly) {
  std::vector<std::uint32_t> divisors;
  for (std::uint32_t d = 1; d <= 1024; ++d) divisors.push_back(d);
  for (std::uint32_t d : {1536u, 69120u, 1u << 20, (1u << 20) + 1, 1000003u, (1u << 30) + 7, (1u << 31) - 1})
    divisors.push_back(d);
  std::vector<std::uint32_t> numerators;
  for (std::uint32_t n = 0; n < 4096; ++n) numerators.push_back(n);
  for (std::uint32_t n = (1u << 31) - 4096; n < (1u << 31); ++n) numerators.push_back(n);
  for (std::uint32_t n = 1; n < (1u << 31) / 7; n = n * 7 + 3) numerators.push_back(n);
  for (std::uint32_t d : divisors) {
    const FastDivmod f(d);
    for (std::uint32_t n : numerators) {
      for (std::uint32_t m : {n, (n / d) * d, (n / d) * d - 1}) {  // the multiples of d and their neighbours
        if (m >= (1u << 31)) continue;
        ASSERT_EQ(f.div(m), m / d) << m << " / " << d;
      }
    }
  }
}

// The launch-time walk (TileWalk: FastDivmod) decodes every walk position to
// the tile of the 64-bit functions, in all three orders, including groups
// that do not divide the slices, groups larger than every slice, partial last
// rounds and one CTA.
TEST(TileScheduler, FastWalkMatchesTheDivisions) {
  int shapes = 0;
  for (auto [batch, heads, seqlen] : {std::tuple{1, 16, 16384}, {8, 16, 2048}, {32, 16, 512}, {3, 7, 1000},
                                      {1, 1, 300}, {2, 5, 4000}, {5, 3, 129}, {1, 48, 32760}}) {
    const AttnParams p = grid_params(batch, heads, seqlen);
    const long long tiles = Scheduler::num_tiles(p);
    for (long long ctas : {1LL, 7LL, 132LL, tiles}) {
      for (int group : {0, 1, 2, 3, 4, 30, 64, 1 << 20}) {
        for (bool dynamic : {false, true}) {
          if (group <= 0 && dynamic) continue;
          const TileWalk w = TileWalk::make<kBlockM>(p, ctas, group, dynamic);
          ASSERT_EQ(w.enabled, 1);
          for (long long walk = 0; walk < tiles; ++walk) {
            const Tile want = group <= 0 ? Scheduler::tile(walk, p)
                              : dynamic  ? Scheduler::grouped_tile(walk, group, p)
                                         : Scheduler::cost_ordered_tile(walk, ctas, group, p);
            ASSERT_EQ(key(w.at(static_cast<std::uint32_t>(walk))), key(want))
                << batch << "x" << heads << " s" << seqlen << " ctas " << ctas << " group " << group
                << (dynamic ? " dynamic" : " static") << " walk " << walk;
          }
          ++shapes;
        }
      }
    }
  }
  EXPECT_EQ(shapes, 8 * 4 * 15);
}

// Walk positions that could pass 2^31: no fast walk (the kernel keeps the 64-bit decode).
TEST(TileScheduler, FastWalkIsOffPastTwoToThe31) {
  const AttnParams p = grid_params(1 << 16, 1 << 8, 128 * 128);  // 2^31 tiles
  EXPECT_EQ(TileWalk::make<kBlockM>(p, 132, 3, false).enabled, 0);
  const AttnParams fits = grid_params(1 << 16, 1 << 8, 128 * 64);  // 2^30 tiles
  EXPECT_EQ(TileWalk::make<kBlockM>(fits, 132, 3, false).enabled, 1);
}

}  // namespace
}  // namespace attnkit::cuda
