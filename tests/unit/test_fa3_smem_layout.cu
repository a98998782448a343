// CPU checks of what the fa3 kernel relies on about its shared-memory tiles,
// against CuTe (CUTLASS's layout algebra, whose GMMA layouts FlashAttention-3
// runs on): for every tile of every Fa3Config,
//  - tile_offset() is a bijection onto the tile's bytes and equals the address
//    CuTe's canonical swizzled GMMA layout gives the same (row, column), i.e.
//    what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B / 64B;
//  - kmajor_desc() / mnmajor_desc() carry the leading / stride byte offsets
//    and swizzle mode that CuTe's make_gmma_desc computes for the slice one
//    wgmma reads (Q or K for S = Q K^T, V for O = P V), and step the start
//    address by the offset of the slice's first element.
// Host code only (compiled by nvcc for CuTe's headers); no GPU needed.
#include <gtest/gtest.h>

#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <set>
#include <vector>

#include "kernels/cuda/sm90/smem_layout.hpp"
#include "kernels/cuda/sm90/traits.hpp"

namespace {

using namespace attnkit::cuda::sm90;
using cute::_1;
using cute::Int;

constexpr std::uint32_t kBase = 1u << 16;  // a fake 1024-aligned shared address

// The byte address CuTe's swizzled layout gives element (row, col) of a K-major
// tile (rows along M/N, columns along K) or (col, row) of an MN-major one.
template <class Layout>
std::uint32_t cute_offset(const Layout& layout, int i, int j) {
  auto t = cute::make_tensor(cute::make_smem_ptr(reinterpret_cast<cute::bfloat16_t*>(std::uintptr_t{kBase})), layout);
  return static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(&t(i, j)) - kBase);
}

template <Swizzle kSw>
auto k_atom() {
  if constexpr (kSw == Swizzle::b128) return cute::GMMA::Layout_K_SW128_Atom<cute::bfloat16_t>{};
  else return cute::GMMA::Layout_K_SW64_Atom<cute::bfloat16_t>{};
}
template <Swizzle kSw>
auto mn_atom() {
  if constexpr (kSw == Swizzle::b128) return cute::GMMA::Layout_MN_SW128_Atom<cute::bfloat16_t>{};
  else return cute::GMMA::Layout_MN_SW64_Atom<cute::bfloat16_t>{};
}

struct Fields {
  unsigned lbo, sbo, type;
};
Fields fields(std::uint64_t d) {
  return {static_cast<unsigned>((d >> 16) & 0x3FFF), static_cast<unsigned>((d >> 32) & 0x3FFF),
          static_cast<unsigned>(d >> 62)};
}

// A K-major tile of kRows rows x kCols columns (Q: BlockM x d_qk, K: BlockN x d_qk).
template <class Traits, int kRows, int kCols>
void check_kmajor_tile(const char* what) {
  SCOPED_TRACE(what);
  constexpr Swizzle kSw = Traits::kSwizzle;
  // Column blocks one after another: the K mode's atoms are tiled last.
  auto layout = cute::tile_to_shape(k_atom<kSw>(), cute::make_shape(Int<kRows>{}, Int<kCols>{}),
                                    cute::Step<_1, cute::_2>{});
  std::set<std::uint32_t> seen;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      const std::uint32_t mine = tile_offset(kSw, kRows, r, c);
      ASSERT_EQ(mine, cute_offset(layout, r, c)) << "row " << r << " col " << c;
      seen.insert(mine);
    }
  EXPECT_EQ(seen.size(), std::size_t(kRows) * kCols);
  EXPECT_EQ(*seen.rbegin(), std::uint32_t(kRows * kCols * 2 - 2));

  // The 64-row (or kRows-row) slice x 16 columns one wgmma reads, per k-step.
  constexpr int kSliceRows = kRows < 64 ? kRows : 64;
  for (int row0 = 0; row0 + kSliceRows <= kRows; row0 += 64)
    for (int ks = 0; ks < kCols / 16; ++ks) {
      auto t = cute::make_tensor(cute::make_smem_ptr(reinterpret_cast<cute::bfloat16_t*>(std::uintptr_t{kBase})),
                                 layout);
      auto slice = cute::local_tile(t, cute::make_shape(Int<kSliceRows>{}, Int<16>{}),
                                    cute::make_coord(row0 / kSliceRows, ks));
      const Fields want = fields(cute::GMMA::make_gmma_desc<cute::GMMA::Major::K>(slice));
      const std::uint64_t desc = kmajor_desc(kBase, kSw, kRows, row0, ks);
      const Fields got = fields(desc);
      EXPECT_EQ(got.sbo, want.sbo) << "row0 " << row0 << " ks " << ks;
      EXPECT_EQ(got.type, want.type);
      // The start address names the slice's first element (unswizzled: the
      // hardware swizzles the addresses it forms from it).
      EXPECT_EQ((desc & 0x3FFF) << 4, (kBase + tile_offset(kSw, kRows, row0, 16 * ks)) & 0x3FFF0u);
      // The mainloop's form: the k-step 0 descriptor advanced by the step's bytes.
      EXPECT_EQ(desc_advance(kmajor_desc(kBase, kSw, kRows, row0, 0), kmajor_step_bytes(kSw, kRows, ks)), desc)
          << "row0 " << row0 << " ks " << ks;
    }
}

// V: kKeys rows (keys, K of O = P V) x d_v columns (N), the head dim contiguous.
template <class Traits>
void check_v_tile() {
  SCOPED_TRACE("V");
  constexpr Swizzle kSw = Traits::kSwizzle;
  constexpr int kKeys = Traits::kBlockN, kDim = Traits::kHeadDimV;
  // (N, K) = (dim, keys); the K mode's atoms first, so each column block holds all keys.
  auto layout = cute::tile_to_shape(mn_atom<kSw>(), cute::make_shape(Int<kDim>{}, Int<kKeys>{}),
                                    cute::Step<cute::_2, _1>{});
  for (int key = 0; key < kKeys; ++key)
    for (int c = 0; c < kDim; ++c)
      ASSERT_EQ(tile_offset(kSw, kKeys, key, c), cute_offset(layout, c, key)) << "key " << key << " col " << c;
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    auto t = cute::make_tensor(cute::make_smem_ptr(reinterpret_cast<cute::bfloat16_t*>(std::uintptr_t{kBase})),
                               layout);
    auto slice = cute::local_tile(t, cute::make_shape(Int<kDim>{}, Int<16>{}), cute::make_coord(0, kk));
    const Fields want = fields(cute::GMMA::make_gmma_desc<cute::GMMA::Major::MN>(slice));
    const std::uint64_t desc = mnmajor_desc(kBase, kSw, kKeys, kk);
    const Fields got = fields(desc);
    if (kDim > Traits::kBlockCols) EXPECT_EQ(got.lbo, want.lbo) << "kk " << kk;  // unused with one column block
    EXPECT_EQ(got.sbo, want.sbo) << "kk " << kk;
    EXPECT_EQ(got.type, want.type);
    EXPECT_EQ((desc & 0x3FFF) << 4, (kBase + tile_offset(kSw, kKeys, 16 * kk, 0)) & 0x3FFF0u);
    EXPECT_EQ(desc_advance(mnmajor_desc(kBase, kSw, kKeys, 0), mnmajor_step_bytes(kSw, kk)), desc) << "kk " << kk;
  }
}

template <int QK, int V>
void check_config() {
  using Tr = typename Fa3Config<std::uint16_t, QK, V>::Traits;
  check_kmajor_tile<Tr, Tr::kBlockM, QK>("Q");
  check_kmajor_tile<Tr, Tr::kBlockN, QK>("K");
  check_v_tile<Tr>();
  // O is staged in Q's rows: it must fit them.
  EXPECT_LE(std::size_t(Tr::kBlockM) * V * 2, Tr::kQBytes);
  // The mainloop's K and V descriptors of a stage: stage 0's, advanced by whole tiles.
  const std::uint32_t k0 = kBase + static_cast<std::uint32_t>(Tr::kQBytes);
  const std::uint32_t v0 = k0 + static_cast<std::uint32_t>(Tr::kStages * Tr::kKBytes);
  for (int stage = 0; stage < Tr::kStages; ++stage) {
    const auto k_bytes = static_cast<std::uint32_t>(stage * Tr::kKBytes);
    const auto v_bytes = static_cast<std::uint32_t>(stage * Tr::kVBytes);
    EXPECT_EQ(desc_advance(kmajor_desc(k0, Tr::kSwizzle, Tr::kBlockN, 0, 0), k_bytes),
              kmajor_desc(k0 + k_bytes, Tr::kSwizzle, Tr::kBlockN, 0, 0))
        << "stage " << stage;
    EXPECT_EQ(desc_advance(mnmajor_desc(v0, Tr::kSwizzle, Tr::kBlockN, 0), v_bytes),
              mnmajor_desc(v0 + v_bytes, Tr::kSwizzle, Tr::kBlockN, 0))
        << "stage " << stage;
  }
}

TEST(Fa3SmemLayout, D64MatchesCute) { check_config<64, 64>(); }
TEST(Fa3SmemLayout, D96MatchesCute) { check_config<96, 96>(); }
TEST(Fa3SmemLayout, D128MatchesCute) { check_config<128, 128>(); }
TEST(Fa3SmemLayout, D192MatchesCute) { check_config<192, 192>(); }
TEST(Fa3SmemLayout, D256MatchesCute) { check_config<256, 256>(); }
TEST(Fa3SmemLayout, Qk192V128MatchesCute) { check_config<192, 128>(); }

// The descriptor's bit fields as the PTX ISA lays them out.
TEST(Fa3SmemLayout, DescriptorEncoding) {
  const std::uint64_t d = make_desc(0x12340, 2048, 1024, Swizzle::b128);
  EXPECT_EQ(d & 0x3FFF, 0x12340u >> 4);
  EXPECT_EQ((d >> 16) & 0x3FFF, 2048u >> 4);
  EXPECT_EQ((d >> 32) & 0x3FFF, 1024u >> 4);
  EXPECT_EQ(d >> 62, 1u);
  EXPECT_EQ(make_desc(0, 16, 512, Swizzle::b64) >> 62, 2u);
}

// Stepping a descriptor to the last 16 bytes below 256 KB leaves the other fields alone.
TEST(Fa3SmemLayout, DescriptorAdvanceStaysInItsField) {
  const std::uint64_t from = make_desc(0x30000, 2048, 1024, Swizzle::b128);
  EXPECT_EQ(desc_advance(from, 0xFFF0), make_desc(0x3FFF0, 2048, 1024, Swizzle::b128));
  EXPECT_EQ(desc_advance(from, 0), from);
}

// O's staging tile (kStoreOTma): the stmatrix rows of every lane of every
// warp cover each 16-byte row chunk of the tile once; the 8 rows of one 8 x 8
// matrix fall in 8 different 16-byte bank groups (one shared-memory wavefront);
// and each warpgroup's TMA box starts on a 1024-byte swizzle atom.
TEST(Fa3SmemLayout, OStagingCoversTheTileOnceWithoutBankConflicts) {
  struct Shape {
    int rows, dv;
  };
  for (const Shape shape : {Shape{128, 128}, Shape{192, 64}, Shape{128, 64}, Shape{128, 256}, Shape{192, 128}}) {
    SCOPED_TRACE(testing::Message() << shape.rows << " rows x " << shape.dv);
    std::set<std::uint32_t> chunks;
    for (int wg = 0; wg < shape.rows / 64; ++wg) {
      for (int c = 0; c < shape.dv / 64; ++c) EXPECT_EQ((c * shape.rows + 64 * wg) * 128 % 1024, 0);
      for (int warp = 0; warp < 4; ++warp)
        for (int j = 0; j < shape.dv / 8; j += 2)
          for (int matrix = 0; matrix < 4; ++matrix) {
            std::set<std::uint32_t> bank_groups;
            for (int lane = 8 * matrix; lane < 8 * matrix + 8; ++lane) {
              const std::uint32_t at = o_staging_offset(Swizzle::b128, shape.rows, wg, warp, lane, j);
              EXPECT_EQ(at % 16, 0u);
              EXPECT_LT(at, static_cast<std::uint32_t>(shape.rows * shape.dv * 2));
              EXPECT_TRUE(chunks.insert(at).second) << "chunk written twice at " << at;
              bank_groups.insert((at / 16) % 8);
            }
            EXPECT_EQ(bank_groups.size(), 8u) << "wg " << wg << " warp " << warp << " j " << j << " matrix " << matrix;
          }
    }
    EXPECT_EQ(chunks.size(), static_cast<std::size_t>(shape.rows * shape.dv * 2 / 16));
  }
}

}  // namespace
