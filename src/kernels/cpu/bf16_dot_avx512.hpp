#pragma once
// AVX512_BF16 micro-kernels (vdpbf16ps): two bf16 products per fp32 lane per
// instruction, twice the fp32 FMA rate. Highway 1.0.3's ReorderWidenMulAccumulate
// for bf16 lowers to shifts + two fp32 FMAs, so these use the intrinsics
// directly. The including translation unit must be compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512bf16; callers check the CPU at run time.
//
// Pair layouts (a "pair" is one uint32 holding two bf16, element 2k in the low half):
//   Q^T pairs : qt2[d2 * kBlockQ + i] = (Q[i][2 d2], Q[i][2 d2 + 1])
//   K         : read in place; row j's pair d2 is (K[j][2 d2], K[j][2 d2 + 1])
//   P^T pairs : p2[j2 * kBlockQ + i]  = (P[i][2 j2], P[i][2 j2 + 1])
//   V pairs   : v2[j2 * dv + c]       = (V[2 j2][c], V[2 j2 + 1][c])
// so that vdpbf16ps(acc, A, B) adds A.lo*B.lo + A.hi*B.hi per lane:
//   S^T[j][i] += K[j][2d2] Q[i][2d2] + K[j][2d2+1] Q[i][2d2+1]
//   O^T[c][i] += V[2j2][c] P[i][2j2] + V[2j2+1][c] P[i][2j2+1]
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/flash_params.hpp"

namespace attnkit::kernels::cpu {



namespace avx512bf16 {

constexpr int kQ = FlashTraits::kBlockQ;
constexpr int kVecs = kQ / 16;  // 16 fp32 lanes per zmm
static_assert(kVecs == 4, "the register blocking below assumes 64 queries per tile");

inline std::uint32_t load_u32(const std::uint16_t* p) {
  std::uint32_t x;
  std::memcpy(&x, p, 4);
  return x;
}

// kJ keys x 64 queries of S^T in 4*kJ zmm accumulators.
template <int kJ>
inline void qk_rows(const std::uint32_t* qt2, int d2, const std::uint16_t* k, std::int64_t ks, float* st) {
  __m512 acc[kJ][kVecs];
  for (int r = 0; r < kJ; ++r)
    for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int p = 0; p < d2; ++p) {
    __m512bh q[kVecs];
    for (int v = 0; v < kVecs; ++v) q[v] = (__m512bh)_mm512_loadu_si512(qt2 + p * kQ + 16 * v);
    for (int r = 0; r < kJ; ++r) {
      const __m512bh kk = (__m512bh)_mm512_set1_epi32(static_cast<int>(load_u32(k + r * ks + 2 * p)));
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], q[v], kk);
    }
  }
  for (int r = 0; r < kJ; ++r)
    for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(st + r * kQ + 16 * v, acc[r][v]);
}

inline void qk(const std::uint32_t* qt2, int d2, const std::uint16_t* k, std::int64_t ks, int nk, float* st) {
  int j = 0;
  for (; j + 6 <= nk; j += 6) qk_rows<6>(qt2, d2, k + j * ks, ks, st + j * kQ);
  for (; j < nk; ++j) qk_rows<1>(qt2, d2, k + j * ks, ks, st + j * kQ);
}

inline void pack_p(const float* st, int nk, std::uint32_t* p2) {
  // Interleave the low halves (row 2 j2) and high halves (row 2 j2 + 1) of one
  // cvtne2ps result: lane 2k <- element k, lane 2k + 1 <- element 16 + k.
  alignas(64) static constexpr std::uint16_t kIdx[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                         21, 6, 22, 7, 23, 8,  24, 9,  25, 10, 26,
                                                         11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kIdx);
  for (int j2 = 0; 2 * j2 < nk; ++j2) {
    const float* even = st + 2 * j2 * kQ;
    const bool has_odd = 2 * j2 + 1 < nk;
    for (int v = 0; v < kVecs; ++v) {
      const __m512 e = _mm512_loadu_ps(even + 16 * v);
      const __m512 o = has_odd ? _mm512_loadu_ps(even + kQ + 16 * v) : _mm512_setzero_ps();
      const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(o, e);  // low 16: even, high 16: odd
      _mm512_storeu_si512(p2 + j2 * kQ + 16 * v, _mm512_permutexvar_epi16(idx, packed));
    }
  }
}

inline void pack_v(const std::uint16_t* v, std::int64_t vs, int nk, int dv, std::uint32_t* v2) {
  // Lanes 2k / 2k+1 of the result take channel c0 + k of rows 2 j2 / 2 j2 + 1.
  alignas(64) static constexpr std::uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                        37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                        11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr std::uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                        53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                        27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(kLo), hi = _mm512_load_si512(kHi);
  for (int j2 = 0; 2 * j2 < nk; ++j2) {
    const std::uint16_t* a = v + 2 * j2 * vs;
    const bool has_b = 2 * j2 + 1 < nk;
    const std::uint16_t* b = a + vs;
    std::uint32_t* dst = v2 + static_cast<std::int64_t>(j2) * dv;
    int c = 0;
    for (; c + 32 <= dv; c += 32) {
      const __m512i va = _mm512_loadu_si512(a + c);
      const __m512i vb = has_b ? _mm512_loadu_si512(b + c) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + c, _mm512_permutex2var_epi16(va, lo, vb));
      _mm512_storeu_si512(dst + c + 16, _mm512_permutex2var_epi16(va, hi, vb));
    }
    for (; c < dv; ++c) dst[c] = a[c] | (has_b ? static_cast<std::uint32_t>(b[c]) << 16 : 0u);
  }
}

// kC channels x 64 queries of O^T: acc = O^T * alpha, then += over key pairs.
template <int kC>
inline void pv_channels(const std::uint32_t* p2, int nk2, const std::uint32_t* v2, int dv, const __m512* alpha,
                        float* ot) {
  __m512 acc[kC][kVecs];
  for (int r = 0; r < kC; ++r)
    for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_mul_ps(_mm512_loadu_ps(ot + r * kQ + 16 * v), alpha[v]);
  for (int j2 = 0; j2 < nk2; ++j2) {
    __m512bh p[kVecs];
    for (int v = 0; v < kVecs; ++v) p[v] = (__m512bh)_mm512_loadu_si512(p2 + j2 * kQ + 16 * v);
    for (int r = 0; r < kC; ++r) {
      const __m512bh vv = (__m512bh)_mm512_set1_epi32(static_cast<int>(v2[static_cast<std::int64_t>(j2) * dv + r]));
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], p[v], vv);
    }
  }
  for (int r = 0; r < kC; ++r)
    for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(ot + r * kQ + 16 * v, acc[r][v]);
}

inline void pv(const std::uint32_t* p2, int nk2, const std::uint32_t* v2, int dv, const float* alpha_in,
               float* ot) {
  __m512 alpha[kVecs];
  for (int v = 0; v < kVecs; ++v) alpha[v] = _mm512_loadu_ps(alpha_in + 16 * v);
  int c = 0;
  for (; c + 6 <= dv; c += 6) pv_channels<6>(p2, nk2, v2 + c, dv, alpha, ot + c * kQ);
  for (; c < dv; ++c) pv_channels<1>(p2, nk2, v2 + c, dv, alpha, ot + c * kQ);
}

inline const Bf16DotOps& ops() {
  static const Bf16DotOps table{&qk, &pack_p, &pack_v, &pv};
  return table;
}

}  // namespace avx512bf16
}  // namespace attnkit::kernels::cpu
