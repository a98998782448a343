// fa2's shared-memory layout (kernels/cuda/fa2/smem_layout.hpp), checked on
// the CPU for the shipped tile shapes and the layouts they do not use: what
// the kernel relies on but cannot check itself at run time. The GPU parity
// suite then shows the numbers come out right; these tests say which layout
// rule broke when they do not.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "kernels/cuda/fa2/smem_layout.hpp"
#include "kernels/cuda/fa2/traits.hpp"

namespace attnkit::cuda {
namespace {

using Half = std::uint16_t;  // a 2-byte stand-in: the layout does not depend on fp16 vs bf16

// The shipped shapes (d64 / d128 / d256 swizzled, d192 padded) and two layouts the table does not ship.
using Shipped64 = Fa2Config<Half, 64>::Traits;
using Shipped128 = Fa2Config<Half, 128>::Traits;
using Shipped192 = Fa2Config<Half, 192>::Traits;
using Shipped256 = Fa2Config<Half, 256>::Traits;
using Padded64 = Fa2Traits<Half, 64, 2, 128, 4, 2, false, 2, 0, 0, false>;            // 16 rows per copy pass
using Swizzled256x8 = Fa2Traits<Half, 256, 1, 64, 8, 2, false, 1, 1, 0, true>;        // 8 rows per copy pass

template <class Traits>
class Fa2SmemLayout : public ::testing::Test {};
using Layouts = ::testing::Types<Shipped64, Shipped128, Shipped192, Shipped256, Padded64, Swizzled256x8>;
TYPED_TEST_SUITE(Fa2SmemLayout, Layouts);

TEST(Fa2SmemLayoutTable, D64D128D256ShipSwizzledD192Padded) {
  // The table's choice, so that the typed tests below cover both layouts in shipped shapes.
  EXPECT_TRUE(Shipped128::kSwizzle);
  EXPECT_TRUE(Shipped256::kSwizzle);
  EXPECT_TRUE(Shipped64::kSwizzle);
  EXPECT_FALSE(Shipped192::kSwizzle);
  EXPECT_EQ(Shipped256::kSmemBytes, 3u * 64 * 256 * 2);  // Q, K, V tiles of 64 unpadded rows: two CTAs per SM
}

// Every (row, 16-byte chunk) of a tile gets its own 16-byte slot inside the
// tile, and the 8 elements of a chunk stay contiguous.
TYPED_TEST(Fa2SmemLayout, TileOffsetIsABijectionOntoAlignedChunks) {
  using Tr = TypeParam;
  const int rows = Tr::kBlockM > Tr::kBlockN ? Tr::kBlockM : Tr::kBlockN;
  std::set<std::uint32_t> seen;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < Tr::kChunksPerRow; ++c) {
      const std::uint32_t at = tile_offset<Tr>(r, c * 8);
      ASSERT_EQ(at % 16, 0u) << "row " << r << " chunk " << c;
      ASSERT_LT(at, static_cast<std::uint32_t>(rows * Tr::kRowBytes));
      ASSERT_TRUE(seen.insert(at).second) << "row " << r << " chunk " << c << " collides";
      for (int e = 1; e < 8; ++e) ASSERT_EQ(tile_offset<Tr>(r, c * 8 + e), at + 2u * e);
    }
}

// ldmatrix reads 8 rows of 16 bytes per matrix; they are conflict-free when
// the 8 addresses fall in 8 different 16-byte bank groups of a 128-byte line.
// fragment_offset's shortcut (lane part computed once, one XOR per column)
// must name the same address as tile_offset.
TYPED_TEST(Fa2SmemLayout, FragmentRowsAreConflictFreeAndMatchTileOffset) {
  using Tr = TypeParam;
  for (bool rows_first : {true, false})
    for (int row0 = 0; row0 + 16 <= Tr::kBlockN; row0 += 8)
      for (int chunk0 = 0; chunk0 + 2 <= Tr::kChunksPerRow; chunk0 += 2) {
        std::vector<std::uint32_t> at(32);
        for (int lane = 0; lane < 32; ++lane) {
          const int mi = lane >> 3;
          const int row_bit = rows_first ? (mi & 1) : (mi >> 1), chunk_bit = rows_first ? (mi >> 1) : (mi & 1);
          at[lane] = rows_first ? fragment_offset<Tr, true>(lane, row0, chunk0)
                                : fragment_offset<Tr, false>(lane, row0, chunk0);
          ASSERT_EQ(at[lane], tile_offset<Tr>(row0 + row_bit * 8 + (lane & 7), (chunk0 + chunk_bit) * 8))
              << "lane " << lane << " row0 " << row0 << " chunk0 " << chunk0 << " rows_first " << rows_first;
        }
        for (int matrix = 0; matrix < 4; ++matrix) {
          std::set<std::uint32_t> bank_groups;
          for (int l = 0; l < 8; ++l) bank_groups.insert((at[matrix * 8 + l] / 16) % 8);
          EXPECT_EQ(bank_groups.size(), 8u) << "matrix " << matrix << " row0 " << row0 << " chunk0 " << chunk0;
        }
      }
}

// TileLoader: thread t copies chunk t % kChunksPerRow of row t / kChunksPerRow,
// then kRowsPerPass rows further down each pass; pass_offset must land where
// tile_offset puts that row.
TYPED_TEST(Fa2SmemLayout, CopyPassesLandWhereTileOffsetSays) {
  using Tr = TypeParam;
  constexpr int kRowsPerPass = Tr::kThreads / Tr::kChunksPerRow;
  const int rows = Tr::kBlockM > Tr::kBlockN ? Tr::kBlockM : Tr::kBlockN;
  for (int t = 0; t < kRowsPerPass * Tr::kChunksPerRow; ++t) {
    const int row = t / Tr::kChunksPerRow, col = (t % Tr::kChunksPerRow) * 8;
    const std::uint32_t first = tile_offset<Tr>(row, col);
    for (int i = 0; row + i * kRowsPerPass < rows; ++i)
      ASSERT_EQ((pass_offset<Tr, kRowsPerPass>(first, i)), tile_offset<Tr>(row + i * kRowsPerPass, col))
          << "thread " << t << " pass " << i;
  }
}

// What the swizzle is for: the 8 lanes of one cp.async phase (128 contiguous
// bytes of one row in global memory) write one 128-byte shared line, so a copy
// costs 4 wavefronts per warp instead of 10-11 with padded rows (ncu,
// docs/perf/gpu-fa2.md).
template <class Traits>
class Fa2SwizzledLayout : public ::testing::Test {};
using SwizzledLayouts = ::testing::Types<Shipped64, Shipped128, Shipped256, Swizzled256x8>;
TYPED_TEST_SUITE(Fa2SwizzledLayout, SwizzledLayouts);

TYPED_TEST(Fa2SwizzledLayout, CopyPhasesFillWholeLines) {
  using Tr = TypeParam;
  static_assert(Tr::kSwizzle);
  for (int r = 0; r < Tr::kBlockN; ++r)
    for (int c0 = 0; c0 < Tr::kChunksPerRow; c0 += 8) {
      std::set<std::uint32_t> lines;
      for (int c = c0; c < c0 + 8; ++c) lines.insert(tile_offset<Tr>(r, c * 8) / 128);
      EXPECT_EQ(lines.size(), 1u) << "row " << r << " chunks " << c0 << ".." << c0 + 7;
    }
}

}  // namespace
}  // namespace attnkit::cuda
