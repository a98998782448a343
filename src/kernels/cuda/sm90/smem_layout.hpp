#pragma once
// Where the sm_90 flash kernel keeps each element of a shared-memory tile, and
// the wgmma descriptors that read it, as pure host-callable functions (CPU
// tests: tests/unit/test_fa3_smem_layout.cu checks them against CuTe).
//
// A tile of R rows x D columns of 16-bit elements is what TMA writes with
// CU_TENSOR_MAP_SWIZZLE_{128B,64B}: column blocks of W = swizzle / 2 elements,
// one block after another ([D / W][R][W]); inside a block, rows of `swizzle`
// bytes, and the 16-byte chunk c of row r stored at chunk c ^ f(r):
//   128B: f(r) = r % 8          (address bits 4-6 ^= bits 7-9)
//    64B: f(r) = (r / 2) % 4    (address bits 4-5 ^= bits 7-8)
// so every 8 rows form one swizzle atom of 8 * swizzle bytes (1024 / 512).
#include <cstdint>

#include "attnkit/core/host_device.hpp"

namespace attnkit::cuda::sm90 {

enum class Swizzle : std::uint64_t { b128 = 1, b64 = 2, b32 = 3 };  // the descriptor's encoding

AK_HOST_DEVICE constexpr int swizzle_bytes(Swizzle s) { return s == Swizzle::b128 ? 128 : s == Swizzle::b64 ? 64 : 32; }

// Byte offset of element (row, col) in a tile of `rows` rows.
AK_HOST_DEVICE constexpr std::uint32_t tile_offset(Swizzle s, int rows, int row, int col) {
  const int sw = swizzle_bytes(s), width = sw / 2;  // elements per block row
  const int block = col / width, in_row = (col % width) * 2;
  const int chunk = in_row >> 4;
  const int xor_bits = s == Swizzle::b128 ? (row & 7) : s == Swizzle::b64 ? ((row >> 1) & 3) : ((row >> 2) & 1);
  return static_cast<std::uint32_t>(block * rows * sw + row * sw + (((chunk ^ xor_bits) << 4) | (in_row & 15)));
}

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
//   bits 0-13 start address >> 4, 16-29 leading byte offset >> 4,
//   32-45 stride byte offset >> 4, 62-63 swizzle mode.
AK_HOST_DEVICE constexpr std::uint64_t make_desc(std::uint32_t smem, std::uint32_t lbo, std::uint32_t sbo, Swizzle s) {
  return (static_cast<std::uint64_t>((smem & 0x3FFFFu) >> 4)) |
         (static_cast<std::uint64_t>((lbo >> 4) & 0x3FFFu) << 16) |
         (static_cast<std::uint64_t>((sbo >> 4) & 0x3FFFu) << 32) | (static_cast<std::uint64_t>(s) << 62);
}

// The same descriptor for an operand `bytes` further on (a multiple of 16):
// one 32-bit add to the start address field. Shared memory ends below 256 KB
// (18 address bits, 14 after >> 4), so the field never carries into bit 14.
// The mainloop builds one descriptor per tile and steps it with this: a
// whole make_desc per wgmma cost four uniform instructions (mask, shift, add,
// or) in the turn that issues them.
AK_HOST_DEVICE constexpr std::uint64_t desc_advance(std::uint64_t desc, std::uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | static_cast<std::uint32_t>(static_cast<std::uint32_t>(desc) + (bytes >> 4));
}

// K-major operand (Q or K for S = Q K^T: rows along M / N, the head dim along
// K): the k-step of 16 elements starting at column 16 * ks of a tile with
// `rows` rows, from row `row0` (a multiple of 8). Inside a block the step
// moves the start address by 32 bytes; the hardware applies the swizzle to
// the addresses it forms. 8-row atoms are 8 * swizzle bytes apart (the
// stride byte offset); the leading byte offset is unused (1) when swizzled.
AK_HOST_DEVICE constexpr std::uint32_t kmajor_step_bytes(Swizzle s, int rows, int ks) {
  const int sw = swizzle_bytes(s), width = sw / 2;
  const int col = 16 * ks, block = col / width;
  return static_cast<std::uint32_t>(block * rows * sw + (col % width) * 2);
}
AK_HOST_DEVICE constexpr std::uint64_t kmajor_desc(std::uint32_t tile, Swizzle s, int rows, int row0, int ks) {
  const int sw = swizzle_bytes(s);
  const std::uint32_t addr = tile + static_cast<std::uint32_t>(row0 * sw) + kmajor_step_bytes(s, rows, ks);
  return make_desc(addr, 16, 8 * sw, s);
}

// MN-major B operand (V for O = P V: keys along K, the head dim along N,
// contiguous): the k-step of keys [16 kk, 16 kk + 16) of a tile with `rows`
// keys. Along K, 8-key atoms are 8 * swizzle bytes apart (stride byte
// offset); along N, the next column block is rows * swizzle bytes on (leading
// byte offset).
AK_HOST_DEVICE constexpr std::uint32_t mnmajor_step_bytes(Swizzle s, int kk) {
  return static_cast<std::uint32_t>(16 * kk * swizzle_bytes(s));
}
AK_HOST_DEVICE constexpr std::uint64_t mnmajor_desc(std::uint32_t tile, Swizzle s, int rows, int kk) {
  const int sw = swizzle_bytes(s);
  return make_desc(tile + mnmajor_step_bytes(s, kk), static_cast<std::uint32_t>(rows * sw), 8 * sw, s);
}

// O's staging tile (kStoreOTma, epilogue.hpp), written with stmatrix .x4 from
// the wgmma accumulators of one warp: the warp's 16 rows (16 * warp of its
// warpgroup's 64, from row 64 * wg) and the 8-column tiles j, j + 1 of O.
// Lane l gives row l % 8 of matrix l / 8; matrices 0 / 1 are rows 0-7 / 8-15
// of tile j, 2 / 3 the same rows of tile j + 1. Returns the byte offset of
// that 16-byte row in a tile of `rows` rows.
AK_HOST_DEVICE constexpr std::uint32_t o_staging_offset(Swizzle s, int rows, int wg, int warp, int lane, int j) {
  const int matrix = lane >> 3;
  const int row = 64 * wg + 16 * warp + (lane & 7) + 8 * (matrix & 1);
  return tile_offset(s, rows, row, 8 * j + 8 * (matrix >> 1));
}

}  // namespace attnkit::cuda::sm90
