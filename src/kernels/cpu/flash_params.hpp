#pragma once
// Framework-free description of one CPU flash-attention call, shared by the
// SIMD kernels (flash_fwd-inl.h, bf16_dot_avx512.hpp) and the host glue
// (backends/cpu_flash). No attnkit types beyond plain integers and pointers.
//
// The kernels work "transposed": a q tile of kBlockQ queries is stored with the
// queries along the SIMD lanes (Q^T, S^T, P^T, O^T), so the online softmax is
// lane-wise (no horizontal reductions) and any head dim works without tails:
//   S^T[j][i] = sum_d K[j][d] * Q^T[d][i]          (broadcast K, vector over i)
//   O^T[c][i] = sum_j V[j][c] * P^T[j][i]          (broadcast V, vector over i)
#include <cstddef>
#include <cstdint>

namespace attnkit::kernels::cpu {

enum class Elem : std::uint8_t { f32, f16, bf16 };

// Masks beyond the (left, right) window: a per-element uint8 mask.
enum class ExtraMask : std::uint8_t { none, element };

// The smallest sign-cleared bit pattern of a NaN or infinity of type e.
constexpr std::uint32_t non_finite_bits(Elem e) {
  return e == Elem::f32 ? 0x7f800000u : e == Elem::bf16 ? 0x7f80u : 0x7c00u;
}

struct FlashTraits {
  static constexpr int kBlockQ = 64;  // queries per tile: 4 AVX-512 vectors of fp32
  static constexpr int kBlockK = 64;      // keys per KV tile (FlashArgs::kv_tile's default)
  static constexpr int kMaxBlockK = 128;  // the largest KV tile (skip-softmax's decision blocks)
  static_assert(kBlockQ % 64 == 0, "a q tile must hold a whole number of 4x16-lane register blocks");
  static_assert(kBlockK % 2 == 0 && kMaxBlockK % 2 == 0, "bf16 dot products consume keys in pairs");
  static constexpr float kLog2e = 1.4426950408889634f;
  static constexpr float kLn2 = 0.6931471805599453f;
};

// bf16 dot-product micro-kernels (bf16_dot_avx512.hpp), reached through
// pointers so that only their own translation unit needs AVX512_BF16 flags.
struct Bf16DotOps {
  // S^T rows j < nk (all kBlockQ lanes) from Q^T pairs (d2 pairs) and bf16 K rows.
  void (*qk)(const std::uint32_t* qt2, int d2, const std::uint16_t* k, std::int64_t k_stride, int nk,
             float* st);
  // P^T (fp32, rows j < nk) to pairs; an odd last row pairs with zero.
  void (*pack_p)(const float* st, int nk, std::uint32_t* p2);
  // V rows j < nk to pairs over j; an odd last row pairs with zero.
  void (*pack_v)(const std::uint16_t* v, std::int64_t v_stride, int nk, int dv, std::uint32_t* v2);
  // O^T = O^T * alpha + V^T P^T over nk2 key pairs.
  void (*pv)(const std::uint32_t* p2, int nk2, const std::uint32_t* v2, int dv, const float* alpha,
             float* ot);
};

// Problem-wide constants, fixed at plan time.
struct FlashArgs {
  int dqk = 0, dv = 0;
  Elem in = Elem::f32;   // q, k and v
  Elem out = Elem::f32;  // out
  // The scores the softmax sees are in log2 units: t = log2(e) * s, so that
  // exp(s - m) = exp2(t - m2). Without softcap: t = (scale * log2e) * q.k.
  // With softcap: t = (cap * log2e) * tanh((scale / cap) * q.k).
  // fp32 path: Q is pre-multiplied by score_mul; bf16 dot path: S is.
  float score_mul = 1.0f;
  float softcap_log2 = 0.0f;  // cap * log2e; 0: no softcap
  float out_mul = 1.0f;       // v descale
  int window_left = -1, window_right = -1;
  ExtraMask extra = ExtraMask::none;
  // Block sparsity (HeadSlice::block_offsets): query / key block sizes; 0: dense.
  int block_q = 0, block_k = 0;
  int kv_tile = FlashTraits::kBlockK;  // keys per KV tile: even, <= kMaxBlockK
  // Skip-softmax (docs/sparse.md): KV tiles are the decision's blocks, aligned
  // at multiples of kv_tile from key 0; a row skips a tile whose largest score
  // is below its running max plus HeadSlice::skip_log2_threshold (log2 units).
  bool skip_softmax = false;
  bool has_sinks = false;
  const Bf16DotOps* dot = nullptr;  // non-null: bf16 inputs through bf16 dot products
};

// One (batch, q head): row r of q/out starts at base + r * stride (elements),
// likewise k/v for key rows; lse row r at lse[r * lse_stride].
struct HeadSlice {
  const void* q = nullptr;
  std::int64_t q_stride = 0;
  const void* k = nullptr;
  std::int64_t k_stride = 0;
  const void* v = nullptr;
  std::int64_t v_stride = 0;
  void* out = nullptr;
  std::int64_t out_stride = 0;
  float* lse = nullptr;  // null: not requested
  std::int64_t lse_stride = 0;
  float sink = 0.0f;  // natural-log sink logit (FlashArgs::has_sinks)
  int sq = 0, sk = 0;
  int diagonal = 0;  // query 0 is aligned with key `diagonal` (sk - sq: bottom-right)
  // ExtraMask::element: mask[i * mask_si + j * mask_sj]; 0 hides.
  const std::uint8_t* mask = nullptr;
  std::int64_t mask_si = 0, mask_sj = 0;
  // Block sparsity (FlashArgs::block_q > 0): query block qb of this head lists
  // the key blocks block_indices[block_offsets[qb] .. block_offsets[qb + 1])
  // (block_offsets points at this head's first row; core/block_sparse.hpp),
  // entries clamped to [0, block_nnz). Unlisted key blocks are never read.
  const std::int32_t* block_offsets = nullptr;
  const std::int32_t* block_indices = nullptr;
  std::int64_t block_nnz = 0;
  // Skip-softmax (FlashArgs::skip_softmax): log2(threshold) of this sequence,
  // and where the kernel adds the (row, tile) pairs it decided on and skipped.
  float skip_log2_threshold = 0.0f;
  std::int64_t* skip_counts = nullptr;  // [0] decided, [1] skipped; per thread
};

// Per-thread workspace, in floats, every part 64-byte aligned.
struct WorkspaceLayout {
  std::size_t qt, st, pt2, ot, kf, vf, m, l, alpha, lo, hi, vis, total;
};

constexpr std::size_t round_up16(std::size_t n) { return (n + 15) / 16 * 16; }

constexpr WorkspaceLayout workspace_layout(int dqk, int dv) {
  using T = FlashTraits;
  WorkspaceLayout w{};
  std::size_t at = 0;
  auto take = [&](std::size_t floats) {
    const std::size_t here = at;
    at += round_up16(floats);
    return here;
  };
  w.qt = take(static_cast<std::size_t>(dqk) * T::kBlockQ);          // Q^T (fp32) or Q^T pairs (bf16x2)
  w.st = take(static_cast<std::size_t>(T::kMaxBlockK) * T::kBlockQ);   // S^T, then P^T in place
  w.pt2 = take(static_cast<std::size_t>(T::kMaxBlockK / 2) * T::kBlockQ);  // P^T as bf16 pairs
  w.ot = take(static_cast<std::size_t>(dv) * T::kBlockQ);              // O^T accumulator
  w.kf = take(static_cast<std::size_t>(T::kMaxBlockK) * dqk);          // K tile converted to fp32
  w.vf = take(static_cast<std::size_t>(T::kMaxBlockK) * dv);           // V tile (fp32 or bf16 pairs)
  w.m = take(T::kBlockQ);      // running max (log2 units)
  w.l = take(T::kBlockQ);      // running denominator
  w.alpha = take(T::kBlockQ);  // exp2(m_old - m_new) of the current KV tile
  w.lo = take(T::kBlockQ);     // first visible key per query (int32)
  w.hi = take(T::kBlockQ);     // one past the last visible key per query (int32)
  w.vis = take(static_cast<std::size_t>(T::kMaxBlockK) * T::kBlockQ / 4);  // uint8 visibility of a tile
  w.total = at;
  return w;
}

constexpr std::size_t workspace_bytes_per_thread(int dqk, int dv) {
  return workspace_layout(dqk, dv).total * sizeof(float);
}

}  // namespace attnkit::kernels::cpu
