// The key tiles the flash kernels visit (src/kernels/cuda/common/key_tiles.hpp),
// checked on the CPU against brute force: a block-sparse query block visits
// exactly the kernel tiles of the dense range whose KV block is listed, in
// ascending order, once each, whatever the block-to-tile ratio and wherever
// the range cuts the first and last listed blocks.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/cuda/common/key_tiles.hpp"

namespace attnkit::cuda {
namespace {

// Tiles t in [range.begin, range.end) with t / ratio listed, ascending.
std::vector<int> brute_force(const KeyTiles& range, const std::vector<std::int32_t>& list, int ratio) {
  std::vector<int> out;
  for (int t = range.begin; t < range.end; ++t)
    for (std::int32_t b : list)
      if (b == t / ratio) out.push_back(t);
  return out;
}

std::vector<int> visited(const SparseKeyTiles& s) {
  std::vector<int> out;
  for (int it = 0; it < s.count(); ++it) out.push_back(s.tile(it));
  return out;
}

TEST(SparseKeyTiles, VisitsTheListedTilesOfTheRangeOnce) {
  std::mt19937 rng(7);
  int checked = 0;
  for (int ratio : {1, 2, 3, 5})
    for (int trial = 0; trial < 400; ++trial) {
      const int k_blocks = 1 + static_cast<int>(rng() % 12);
      std::vector<std::int32_t> list;
      for (int b = 0; b < k_blocks; ++b)
        if (rng() % 3 != 0) list.push_back(b);
      const int tiles = k_blocks * ratio;
      KeyTiles range{};
      range.begin = static_cast<int>(rng() % (tiles + 1));
      range.end = range.begin + static_cast<int>(rng() % (tiles - range.begin + 1));
      // The CSR row sits inside a larger index buffer: [lo, hi) of `buffer`.
      std::vector<std::int32_t> buffer = {99, 98};
      const int lo = static_cast<int>(buffer.size());
      buffer.insert(buffer.end(), list.begin(), list.end());
      const int hi = static_cast<int>(buffer.size());
      buffer.push_back(-5);
      const SparseKeyTiles s = sparse_key_tiles(range, buffer.data(), lo, hi, ratio);
      ASSERT_EQ(visited(s), brute_force(range, list, ratio))
          << "ratio " << ratio << " range [" << range.begin << ", " << range.end << ") trial " << trial;
      ++checked;
    }
  EXPECT_EQ(checked, 1600);
}

TEST(SparseKeyTiles, EmptyListOrRangeVisitsNothing) {
  const std::int32_t list[] = {0, 1, 2};
  KeyTiles range{};
  range.begin = 0;
  range.end = 6;
  EXPECT_EQ(sparse_key_tiles(range, list, 1, 1, 2).count(), 0);  // an empty row
  range.end = 0;
  EXPECT_EQ(sparse_key_tiles(range, list, 0, 3, 2).count(), 0);  // no visible key
}

// A list that is not ascending (device lists are not validated) still yields
// tiles in bounds: entries outside the range's blocks become the tile just
// past the range, which the kernels mask entirely.
TEST(SparseKeyTiles, BadListsStayInBounds) {
  const std::int32_t list[] = {5, -7, 1 << 30, 2, 0};
  KeyTiles range{};
  range.begin = 1;
  range.end = 9;  // blocks 0..2 at ratio 3
  const SparseKeyTiles s = sparse_key_tiles(range, list, 0, 5, 3);
  for (int it = 0; it < s.count(); ++it) {
    const int t = s.tile(it);
    EXPECT_TRUE((t >= 0 && t < range.end) || t == range.end) << "tile " << t;
  }
}

// A dense range visits begin, begin + 1, ... (what the sm_90 mainloop relies on
// when it calls tile(it) for both kinds).
TEST(KeyTiles, DenseRangeTilesAreConsecutive) {
  const KeyTiles t = visible_key_tiles(256, 128, 1000, 1000, 300, 0, 128);
  ASSERT_GT(t.count(), 0);
  for (int it = 0; it < t.count(); ++it) EXPECT_EQ(t.tile(it), t.begin + it);
}

// A row the dense range covers takes its first and last entries without a
// search, also inside a larger index buffer.
TEST(SparseKeyTiles, WholeRowsNeedNoSearch) {
  const std::int32_t buffer[] = {7, 0, 2, 3, 5, 1};
  KeyTiles range{};
  range.begin = 0;
  range.end = 12;  // blocks 0..5 at ratio 2
  const SparseKeyTiles s = sparse_key_tiles(range, buffer, 1, 5, 2);
  EXPECT_EQ(visited(s), (std::vector<int>{0, 1, 4, 5, 6, 7, 10, 11}));
}

}  // namespace
}  // namespace attnkit::cuda
