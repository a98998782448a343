#pragma once
// Where fa2 keeps each element of a shared-memory tile (Q, K or V rows of
// kHeadDim 16-bit elements), as pure functions of row, column and lane:
//  - padded: row r at r * kRowBytes (rows 16 bytes longer than the data);
//  - swizzled: unpadded rows, 16-byte chunk c of row r at chunk c ^ (r % 8).
// Host-callable, so that CPU tests check what the kernel relies on (a
// bijection, conflict-free ldmatrix rows, cp.async phases filling whole
// 128-byte lines): tests/unit/test_fa2_smem_layout.cpp.
#include <cstdint>

#include "attnkit/core/host_device.hpp"

namespace attnkit::cuda {

// Byte offset of element (row, col) in a shared tile.
template <class Traits>
AK_HOST_DEVICE std::uint32_t tile_offset(int row, int col) {
  if constexpr (Traits::kSwizzle)
    return static_cast<std::uint32_t>(row * Traits::kRowBytes + ((((col >> 3) ^ (row & 7)) << 4) | ((col & 7) * 2)));
  else
    return static_cast<std::uint32_t>((row * Traits::kPitch + col) * sizeof(typename Traits::T));
}

// ldmatrix.x4 address offset of `lane` for one fragment. Lane L names row
// L % 8 of matrix L / 8; the four 8x8 matrices of a fragment whose first row
// is row0 (a multiple of 8) and first 16-byte chunk is chunk0 (even) sit at
// rows row0 + 8 * row_bit and chunks chunk0 + chunk_bit, two bits of L / 8:
// rows first (Q, V^T: matrix i at row bit i & 1, chunk bit i >> 1) or chunks
// first (K: row bit i >> 1, chunk bit i & 1). In a swizzled tile the lane's
// row % 8 is L % 8, so only chunk0's low bits move the XOR: the lane's part
// is one value, and each fragment column costs one XOR, the rest immediates.
template <class Traits, bool kRowsFirst>
AK_HOST_DEVICE std::uint32_t fragment_offset(int lane, int row0, int chunk0) {
  const int mi = lane >> 3, lr = lane & 7;
  const int row_bit = kRowsFirst ? (mi & 1) : (mi >> 1), chunk_bit = kRowsFirst ? (mi >> 1) : (mi & 1);
  if constexpr (Traits::kSwizzle) {
    const auto lane_part = static_cast<std::uint32_t>((row_bit * 8 + lr) * Traits::kRowBytes + ((chunk_bit ^ lr) << 4));
    return (lane_part ^ static_cast<std::uint32_t>((chunk0 & 7) << 4)) +
           static_cast<std::uint32_t>(row0 * Traits::kRowBytes + (chunk0 & ~7) * 16);
  } else {
    return tile_offset<Traits>(row0 + row_bit * 8 + lr, chunk0 * 8 + chunk_bit * 8);
  }
}

// A tile copy moves kRowsPerPass rows per pass: a thread that writes offset0
// (its row r < kRowsPerPass) in pass 0 writes this in pass i, i.e.
// tile_offset(r + i * kRowsPerPass, its column). Swizzled: (r + i *
// kRowsPerPass) % 8 = r % 8 XOR (i * kRowsPerPass) % 8 (no carry: kRowsPerPass
// divides 8 or is a multiple of it, Fa2Traits asserts), and a tile starts on a
// 128-byte line, so the XOR touches only the chunk bits.
template <class Traits, int kRowsPerPass>
AK_HOST_DEVICE std::uint32_t pass_offset(std::uint32_t offset0, int i) {
  constexpr std::uint32_t kPassBytes = kRowsPerPass * Traits::kRowBytes;
  if constexpr (Traits::kSwizzle)
    return (offset0 ^ static_cast<std::uint32_t>(((i * kRowsPerPass) & 7) << 4)) + i * kPassBytes;
  else
    return offset0 + i * kPassBytes;
}

}  // namespace attnkit::cuda
