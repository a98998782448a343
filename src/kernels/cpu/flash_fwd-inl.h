// Flash attention forward on the CPU, one q tile at a time, per Highway target.
// Re-included once per target by foreach_target.h (see the toggle below); the
// including file defines the exported entry point. Framework-free.
//
// For a q tile (rows i of one (batch, head)) and each visible KV tile (keys j):
//   S^T[j][i] = t(q_i . k_j)                       scores in log2 units (FlashArgs)
//   m_new[i]  = max(m[i], max_j S^T[j][i])
//   P^T[j][i] = exp2(S^T[j][i] - m_new[i])
//   alpha[i]  = exp2(m[i] - m_new[i])
//   l[i]      = alpha[i] l[i] + sum_j P^T[j][i]
//   O^T[c][i] = alpha[i] O^T[c][i] + sum_j V[j][c] P^T[j][i]
// and at the end O = O^T / l, LSE = ln2 * (m + log2 l), sinks joining l.
// KV tiles that no query of the tile can see are never visited (causal: about
// half of them); tiles every query sees entirely skip the mask. Block-sparse
// heads visit only the key blocks their query blocks list.

#if defined(ATTNKIT_KERNELS_CPU_FLASH_FWD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_KERNELS_CPU_FLASH_FWD_INL_H_
#undef ATTNKIT_KERNELS_CPU_FLASH_FWD_INL_H_
#else
#define ATTNKIT_KERNELS_CPU_FLASH_FWD_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/dtype.hpp"
#include "attnkit/core/mask.hpp"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/cpu/flash_params.hpp"

HWY_BEFORE_NAMESPACE();
namespace attnkit::kernels::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Register blocking of the two fp32 micro-kernels: kRows broadcast rows (keys
// for S, channels for O) x kVecs query vectors. AVX-512 has 32 registers.
#if HWY_TARGET <= HWY_AVX3
constexpr int kRows = 6, kVecs = 4;
#else
constexpr int kRows = 4, kVecs = 2;
#endif

// 2^x for x <= 0 (exactly 0 below -126, -inf included).
// x = n + f with n = round(x), |f| <= 1/2; 2^f = e^(f ln2) by its Taylor series
// to degree 7 (relative error < 1e-8 on |f| <= 1/2); 2^n through the exponent bits.
HWY_INLINE VF Exp2NonPositive(DF df, VF x) {
  const hn::RebindToSigned<DF> di;
  const VF lowest = hn::Set(df, -126.0f);
  const auto underflow = hn::Lt(x, lowest);
  x = hn::Max(x, lowest);
  const VF n = hn::Round(x);
  const VF f = hn::Sub(x, n);
  VF p = hn::Set(df, 1.525273380405984e-05f);          // ln2^7 / 7!
  p = hn::MulAdd(p, f, hn::Set(df, 1.5403530393381606e-04f));  // ln2^6 / 6!
  p = hn::MulAdd(p, f, hn::Set(df, 1.3333558146428443e-03f));  // ln2^5 / 5!
  p = hn::MulAdd(p, f, hn::Set(df, 9.618129107628477e-03f));   // ln2^4 / 4!
  p = hn::MulAdd(p, f, hn::Set(df, 5.550410866482158e-02f));   // ln2^3 / 3!
  p = hn::MulAdd(p, f, hn::Set(df, 2.402265069591007e-01f));   // ln2^2 / 2!
  p = hn::MulAdd(p, f, hn::Set(df, 6.931471805599453e-01f));   // ln2
  p = hn::MulAdd(p, f, hn::Set(df, 1.0f));
  // 2^n for integer n in [-126, 0]: biased exponent n + 127, mantissa 0.
  const auto bits = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::IfThenZeroElse(underflow, hn::Mul(p, hn::BitCast(df, bits)));
}

HWY_INLINE float LoadScalar(const void* base, Elem e, std::int64_t i) {
  switch (e) {
    case Elem::f32: return static_cast<const float*>(base)[i];
    case Elem::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case Elem::f16: return f16_to_float(static_cast<const std::uint16_t*>(base)[i]);
  }
  return 0.0f;
}

// dst[0, n) = src[0, n) as fp32.
HWY_INLINE void RowToFloat(const void* src, Elem e, int n, float* HWY_RESTRICT dst) {
  const DF df;
  const hn::Rebind<hwy::bfloat16_t, DF> dbf;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int N = static_cast<int>(hn::Lanes(df));
  int c = 0;
  if (e == Elem::f32) {
    std::memcpy(dst, src, sizeof(float) * n);
    return;
  }
  if (e == Elem::bf16) {
    const auto* s = static_cast<const hwy::bfloat16_t*>(src);
    for (; c + N <= n; c += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dbf, s + c)), df, dst + c);
  } else {
    const auto* s = static_cast<const hwy::float16_t*>(src);
    for (; c + N <= n; c += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, s + c)), df, dst + c);
  }
  for (; c < n; ++c) dst[c] = LoadScalar(src, e, c);
}

HWY_INLINE void StoreRow(const float* HWY_RESTRICT src, int n, Elem e, void* dst) {
  switch (e) {
    case Elem::f32: std::memcpy(dst, src, sizeof(float) * n); return;
    case Elem::bf16:
      for (int c = 0; c < n; ++c) static_cast<std::uint16_t*>(dst)[c] = float_to_bf16(src[c]);
      return;
    case Elem::f16:
      for (int c = 0; c < n; ++c) static_cast<std::uint16_t*>(dst)[c] = float_to_f16(src[c]);
      return;
  }
}

// Calls f(std::integral_constant<int, n>) for the n in [1, kRows) rows left
// after the full kRows blocks, so they run as one block of n rows.
template <class F>
HWY_INLINE void RestBlocks(int n, F&& f) {
  static_assert(kRows <= 6, "RestBlocks covers rests of up to 5 rows");
  switch (n) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 3: f(std::integral_constant<int, 3>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 5: f(std::integral_constant<int, 5>()); break;
    default: break;
  }
}

// S^T[j][i] = sum_d K[j][d] Q^T[d][i] for kR keys and kV query vectors.
template <int kR, int kV>
HWY_INLINE void QkBlock(const float* HWY_RESTRICT qt, int dqk, const float* HWY_RESTRICT k, std::int64_t ks,
                        float* HWY_RESTRICT st) {
  constexpr int Q = FlashTraits::kBlockQ;
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  VF acc[kR][kV];
  for (int r = 0; r < kR; ++r)
    for (int v = 0; v < kV; ++v) acc[r][v] = hn::Zero(df);
  for (int d = 0; d < dqk; ++d) {
    VF q[kV];
    for (int v = 0; v < kV; ++v) q[v] = hn::LoadU(df, qt + d * Q + v * N);
    for (int r = 0; r < kR; ++r) {
      const VF kb = hn::Set(df, k[r * ks + d]);
      for (int v = 0; v < kV; ++v) acc[r][v] = hn::MulAdd(kb, q[v], acc[r][v]);
    }
  }
  for (int r = 0; r < kR; ++r)
    for (int v = 0; v < kV; ++v) hn::StoreU(acc[r][v], df, st + r * Q + v * N);
}

HWY_INLINE void QkTile(const float* qt, int dqk, const float* k, std::int64_t ks, int nk, float* st) {
  constexpr int Q = FlashTraits::kBlockQ;
  const int step = kVecs * static_cast<int>(hn::Lanes(DF()));
  for (int i0 = 0; i0 < Q; i0 += step) {
    int j = 0;
    for (; j + kRows <= nk; j += kRows) QkBlock<kRows, kVecs>(qt + i0, dqk, k + j * ks, ks, st + j * Q + i0);
    // The rest (64 = 10 x 6 + 4 keys) in one block: one-row blocks ran the
    // last 4 keys at half speed (one broadcast per kVecs FMAs, 4 FMA chains).
    if (j < nk) RestBlocks(nk - j, [&](auto rows) {
      QkBlock<decltype(rows)::value, kVecs>(qt + i0, dqk, k + j * ks, ks, st + j * Q + i0);
    });
  }
}

// O^T[c][i] = alpha[i] O^T[c][i] + sum_j V[j][c] P^T[j][i] for kR channels.
template <int kR, int kV>
HWY_INLINE void PvBlock(const float* HWY_RESTRICT pt, int nk, const float* HWY_RESTRICT v, std::int64_t vs,
                        const float* HWY_RESTRICT alpha, float* HWY_RESTRICT ot) {
  constexpr int Q = FlashTraits::kBlockQ;
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  VF acc[kR][kV];
  for (int vv = 0; vv < kV; ++vv) {
    const VF a = hn::LoadU(df, alpha + vv * N);
    for (int r = 0; r < kR; ++r) acc[r][vv] = hn::Mul(hn::LoadU(df, ot + r * Q + vv * N), a);
  }
  for (int j = 0; j < nk; ++j) {
    VF p[kV];
    for (int vv = 0; vv < kV; ++vv) p[vv] = hn::LoadU(df, pt + j * Q + vv * N);
    for (int r = 0; r < kR; ++r) {
      const VF vb = hn::Set(df, v[j * vs + r]);
      for (int vv = 0; vv < kV; ++vv) acc[r][vv] = hn::MulAdd(vb, p[vv], acc[r][vv]);
    }
  }
  for (int r = 0; r < kR; ++r)
    for (int vv = 0; vv < kV; ++vv) hn::StoreU(acc[r][vv], df, ot + r * Q + vv * N);
}

HWY_INLINE void PvTile(const float* pt, int nk, const float* v, std::int64_t vs, int dv, const float* alpha,
                       float* ot) {
  constexpr int Q = FlashTraits::kBlockQ;
  const int step = kVecs * static_cast<int>(hn::Lanes(DF()));
  for (int i0 = 0; i0 < Q; i0 += step) {
    int c = 0;
    for (; c + kRows <= dv; c += kRows)
      PvBlock<kRows, kVecs>(pt + i0, nk, v + c, vs, alpha + i0, ot + c * Q + i0);
    if (c < dv) RestBlocks(dv - c, [&](auto rows) {
      PvBlock<decltype(rows)::value, kVecs>(pt + i0, nk, v + c, vs, alpha + i0, ot + c * Q + i0);
    });
  }
}

// max over x in [0, n) of (bits(x) with the sign cleared), as uint32. A value
// >= NonFiniteBits(e) means a NaN or an infinity is present.
std::uint32_t MaxMagnitudeBits(const void* p, Elem e, std::int64_t n) {
  if (e == Elem::f32) {
    const hn::ScalableTag<std::uint32_t> du;
    const auto* x = static_cast<const std::uint32_t*>(p);
    const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(du));
    const auto mag = hn::Set(du, 0x7fffffffu);
    auto mx = hn::Zero(du);
    std::int64_t i = 0;
    for (; i + N <= n; i += N) mx = hn::Max(mx, hn::And(hn::LoadU(du, x + i), mag));
    std::uint32_t r = hn::GetLane(hn::MaxOfLanes(du, mx));
    for (; i < n; ++i) r = std::max(r, x[i] & 0x7fffffffu);
    return r;
  }
  const hn::ScalableTag<std::uint16_t> du;
  const auto* x = static_cast<const std::uint16_t*>(p);
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(du));
  const auto mag = hn::Set(du, std::uint16_t{0x7fff});
  auto mx = hn::Zero(du);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) mx = hn::Max(mx, hn::And(hn::LoadU(du, x + i), mag));
  std::uint32_t r = hn::GetLane(hn::MaxOfLanes(du, mx));
  for (; i < n; ++i) r = std::max<std::uint32_t>(r, x[i] & 0x7fffu);
  return r;
}

// The key blocks a block-sparse q tile visits: the union of the lists of the
// query blocks it overlaps (at most kMaxBlocks, block_q >= 16), in ascending
// order, as runs of consecutive key blocks listed by the same query blocks
// (bit r of a run's mask: query block first + r lists it).
class ListedKeyBlocks {
 public:
  static constexpr int kMaxBlocks = FlashTraits::kBlockQ / 16 + 1;

  ListedKeyBlocks(const FlashArgs& a, const HeadSlice& h, int q0, int nq)
      : first_(q0 / a.block_q), count_((q0 + nq - 1) / a.block_q - q0 / a.block_q + 1) {
    for (int r = 0; r < count_; ++r) {
      const BlockListRange range = block_list_range(h.block_offsets, first_ + r, h.block_nnz);
      at_[r] = h.block_indices + range.begin;
      end_[r] = h.block_indices + range.end;
    }
  }
  // The next run [lo, hi) of key blocks listed by the query blocks in `mask`.
  bool next(std::int64_t& lo, std::int64_t& hi, unsigned& mask) {
    std::int32_t kb;
    if (!peek(kb, mask)) return false;
    pop(mask);
    lo = kb;
    hi = static_cast<std::int64_t>(kb) + 1;
    unsigned m;
    while (peek(kb, m) && kb == hi && m == mask) {
      pop(m);
      ++hi;
    }
    return true;
  }

 private:
  bool peek(std::int32_t& kb, unsigned& mask) const {
    kb = std::numeric_limits<std::int32_t>::max();
    bool any = false;
    for (int r = 0; r < count_; ++r)
      if (at_[r] < end_[r]) {
        kb = std::min(kb, *at_[r]);
        any = true;
      }
    mask = 0;
    for (int r = 0; r < count_; ++r)
      if (at_[r] < end_[r] && *at_[r] == kb) mask |= 1u << r;
    return any;
  }
  void pop(unsigned mask) {
    for (int r = 0; r < count_; ++r)
      if (mask & (1u << r)) ++at_[r];
  }

  int first_, count_;
  const std::int32_t* at_[kMaxBlocks] = {};
  const std::int32_t* end_[kMaxBlocks] = {};
};

// Computes output rows [q0, q0 + kBlockQ) of one head; ws: workspace_layout floats.
void FlashQTile(const FlashArgs& a, const HeadSlice& h, int q0, float* HWY_RESTRICT ws) {
  constexpr int Q = FlashTraits::kBlockQ;
  const int K = a.kv_tile;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  const WorkspaceLayout L = workspace_layout(a.dqk, a.dv);
  float* HWY_RESTRICT qt = ws + L.qt;
  float* HWY_RESTRICT st = ws + L.st;
  float* HWY_RESTRICT ot = ws + L.ot;
  float* HWY_RESTRICT m = ws + L.m;
  float* HWY_RESTRICT l = ws + L.l;
  float* HWY_RESTRICT alpha = ws + L.alpha;
  // Visible key ranges as int32: exact for any sequence length (a float is
  // exact only up to 2^24).
  auto* HWY_RESTRICT lo_i = reinterpret_cast<std::int32_t*>(ws + L.lo);
  auto* HWY_RESTRICT hi_i = reinterpret_cast<std::int32_t*>(ws + L.hi);
  auto* vis = reinterpret_cast<std::uint8_t*>(ws + L.vis);
  auto* qt2 = reinterpret_cast<std::uint32_t*>(qt);
  auto* pt2 = reinterpret_cast<std::uint32_t*>(ws + L.pt2);
  auto* v2 = reinterpret_cast<std::uint32_t*>(ws + L.vf);
  const bool dot = a.dot != nullptr;
  const int nq = std::min(Q, h.sq - q0);
  const std::size_t in_size = a.in == Elem::f32 ? 4 : 2;
  const std::size_t out_size = a.out == Elem::f32 ? 4 : 2;

  // Visible keys per row; rows past the sequence see nothing.
  int lo_min = h.sk, lo_max = 0, hi_min = h.sk, hi_max = 0;
  for (int i = 0; i < Q; ++i) {
    KeyRange r{0, 0};
    if (i < nq) {
      r = visible_keys_on_diagonal(q0 + i, h.diagonal, h.sk, a.window_left, a.window_right);
      lo_min = std::min(lo_min, r.lo);
      lo_max = std::max(lo_max, r.lo);
      hi_min = std::min(hi_min, r.hi);
      hi_max = std::max(hi_max, r.hi);
    }
    lo_i[i] = r.lo;
    hi_i[i] = r.hi;
    m[i] = kNegInf;
    l[i] = 0.0f;
  }
  std::fill(ot, ot + static_cast<std::size_t>(a.dv) * Q, 0.0f);

  // Q^T: fp32 path pre-scaled by score_mul; bf16 dot path as exact bf16 pairs.
  if (dot) {
    const int d2 = a.dqk / 2;
    for (int i = 0; i < Q; ++i) {
      if (i >= nq) {
        for (int p = 0; p < d2; ++p) qt2[p * Q + i] = 0u;
        continue;
      }
      const auto* row = static_cast<const std::uint16_t*>(h.q) + (q0 + i) * h.q_stride;
      for (int p = 0; p < d2; ++p) qt2[p * Q + i] = row[2 * p] | static_cast<std::uint32_t>(row[2 * p + 1]) << 16;
    }
  } else {
    float* row_f = ws + L.kf;  // scratch before the K tiles use it
    for (int i = 0; i < Q; ++i) {
      if (i < nq) {
        RowToFloat(static_cast<const char*>(h.q) + (q0 + i) * h.q_stride * in_size, a.in, a.dqk, row_f);
        for (int d = 0; d < a.dqk; ++d) qt[d * Q + i] = row_f[d] * a.score_mul;
      } else {
        for (int d = 0; d < a.dqk; ++d) qt[d * Q + i] = 0.0f;
      }
    }
  }

  // One KV tile: keys [j0, j0 + nk), listed by the query blocks in
  // `listed_by` (bit r: query block first + r; all_listed: every row's).
  const bool sparse = a.block_q > 0;
  unsigned row_bit[Q];
  unsigned all_listed = 1u;
  int first_block = 0;
  if (sparse) {
    first_block = q0 / a.block_q;
    for (int i = 0; i < Q; ++i) row_bit[i] = i < nq ? 1u << ((q0 + i) / a.block_q - first_block) : 0u;
    all_listed = (1u << ((q0 + nq - 1) / a.block_q - first_block + 1)) - 1u;
  }
  auto visit = [&](int j0, int nk, unsigned listed_by) {
    // Per-element visibility where an extra mask or a partial listing hides
    // keys from some rows; a tile nobody sees is skipped.
    const bool partly_listed = listed_by != all_listed;
    const bool need_vis = a.extra != ExtraMask::none || partly_listed;
    if (need_vis) {
      bool any = false;
      for (int j = 0; j < nk; ++j)
        for (int i = 0; i < Q; ++i) {
          const int kj = j0 + j;
          bool v = i < nq && kj >= lo_i[i] && kj < hi_i[i];
          if (v && partly_listed) v = (listed_by & row_bit[i]) != 0;
          if (v && a.extra == ExtraMask::element)
            v = h.mask[static_cast<std::int64_t>(q0 + i) * h.mask_si + static_cast<std::int64_t>(kj) * h.mask_sj] != 0;
          vis[j * Q + i] = v;
          any |= v;
        }
      if (!any) return;
    }
    const bool full = !need_vis && j0 >= lo_max && j0 + nk <= hi_min;

    // S^T = K Q^T (then score transform).
    const char* k_tile = static_cast<const char*>(h.k) + j0 * h.k_stride * in_size;
    if (dot) {
      a.dot->qk(qt2, a.dqk / 2, reinterpret_cast<const std::uint16_t*>(k_tile), h.k_stride, nk, st);
    } else if (a.in == Elem::f32) {
      QkTile(qt, a.dqk, reinterpret_cast<const float*>(k_tile), h.k_stride, nk, st);
    } else {
      float* kf = ws + L.kf;
      for (int j = 0; j < nk; ++j) RowToFloat(k_tile + j * h.k_stride * in_size, a.in, a.dqk, kf + j * a.dqk);
      QkTile(qt, a.dqk, kf, a.dqk, nk, st);
    }
    const float mul = dot ? a.score_mul : 1.0f;
    if (a.softcap_log2 > 0.0f || mul != 1.0f) {
      const VF vm = hn::Set(df, mul), cap = hn::Set(df, a.softcap_log2);
      for (int e = 0; e < nk * Q; e += N) {
        VF x = hn::Mul(hn::LoadU(df, st + e), vm);
        if (a.softcap_log2 > 0.0f) x = hn::Mul(cap, hn::Tanh(df, x));  // t = cap log2e tanh(s / cap)
        hn::StoreU(x, df, st + e);
      }
    }
    // Masking: -inf where key j is hidden from query i.
    if (!full) {
      const VF ninf = hn::Set(df, kNegInf);
      if (need_vis) {
        for (int e = 0; e < nk * Q; ++e)
          if (!vis[e]) st[e] = kNegInf;
      } else {
        const hn::RebindToSigned<DF> di;
        for (int j = 0; j < nk; ++j) {
          // lo <= j < hi as lo < j + 1 and j < hi (Highway 1.0 has no signed Ge on x86).
          const auto jv = hn::Set(di, j0 + j), jv1 = hn::Set(di, j0 + j + 1);
          for (int i = 0; i < Q; i += N) {
            const auto seen = hn::And(hn::Lt(hn::LoadU(di, lo_i + i), jv1), hn::Lt(jv, hn::LoadU(di, hi_i + i)));
            hn::StoreU(hn::IfThenElse(hn::RebindMask(df, seen), hn::LoadU(df, st + j * Q + i), ninf), df, st + j * Q + i);
          }
        }
      }
    }
    // Online softmax, lane-wise over queries. Skip-softmax decides here: row
    // i skips this tile when it has seen a key (m finite) and the tile's
    // largest score is below m + log2(threshold); the tile then adds nothing
    // to the row (P = 0, alpha = 1). A vector of rows that all skip (or see
    // nothing) skips its exponentials; a tile no row keeps skips P V and the
    // V load.
    bool any_kept = !a.skip_softmax;
    std::int64_t decided = 0, skipped = 0;
    const VF ninf = hn::Set(df, kNegInf);
    for (int i = 0; i < Q; i += N) {
      const VF m_old = hn::LoadU(df, m + i);
      VF blk = ninf;
      for (int j = 0; j < nk; ++j) blk = hn::Max(blk, hn::LoadU(df, st + j * Q + i));
      VF mx = hn::Max(m_old, blk);
      auto skip = hn::FirstN(df, 0);
      if (a.skip_softmax) {
        const auto row = hn::Lt(hn::Iota(df, static_cast<float>(i)), hn::Set(df, static_cast<float>(nq)));
        const auto seen = hn::And(row, hn::Ne(blk, ninf));
        skip = hn::And(hn::And(seen, hn::Ne(m_old, ninf)), hn::Lt(blk, hn::Add(m_old, hn::Set(df, h.skip_log2_threshold))));
        decided += static_cast<std::int64_t>(hn::CountTrue(df, seen));
        skipped += static_cast<std::int64_t>(hn::CountTrue(df, skip));
        if (hn::AllFalse(df, hn::AndNot(skip, seen))) {  // nothing to add for these rows
          for (int j = 0; j < nk; ++j) hn::StoreU(hn::Zero(df), df, st + j * Q + i);
          hn::StoreU(hn::Set(df, 1.0f), df, alpha + i);
          continue;
        }
        any_kept = true;
        mx = hn::IfThenElse(skip, m_old, mx);
      }
      // A row with nothing visible yet keeps m = -inf; subtract 0 instead of -inf.
      const VF m_use = hn::IfThenZeroElse(hn::Eq(mx, ninf), mx);
      VF sum = hn::Zero(df);
      for (int j = 0; j < nk; ++j) {
        const VF p = hn::IfThenZeroElse(skip, Exp2NonPositive(df, hn::Sub(hn::LoadU(df, st + j * Q + i), m_use)));
        hn::StoreU(p, df, st + j * Q + i);
        sum = hn::Add(sum, p);
      }
      const VF al = Exp2NonPositive(df, hn::Sub(m_old, m_use));
      hn::StoreU(al, df, alpha + i);
      hn::StoreU(hn::MulAdd(hn::LoadU(df, l + i), al, sum), df, l + i);
      hn::StoreU(mx, df, m + i);
    }
    if (a.skip_softmax) {
      if (h.skip_counts) h.skip_counts[0] += decided, h.skip_counts[1] += skipped;
      if (!any_kept) return;
    }
    // O^T = alpha O^T + V^T P^T.
    const char* v_tile = static_cast<const char*>(h.v) + j0 * h.v_stride * in_size;
    if (dot) {
      a.dot->pack_p(st, nk, pt2);
      a.dot->pack_v(reinterpret_cast<const std::uint16_t*>(v_tile), h.v_stride, nk, a.dv, v2);
      a.dot->pv(pt2, (nk + 1) / 2, v2, a.dv, alpha, ot);
    } else if (a.in == Elem::f32) {
      PvTile(st, nk, reinterpret_cast<const float*>(v_tile), h.v_stride, a.dv, alpha, ot);
    } else {
      float* vf = ws + L.vf;
      for (int j = 0; j < nk; ++j) RowToFloat(v_tile + j * h.v_stride * in_size, a.in, a.dv, vf + j * a.dv);
      PvTile(st, nk, vf, a.dv, a.dv, alpha, ot);
    }
  };

  if (!sparse) {
    // hi_max <= seqlen_k <= kMaxSeqlen: j0 + K cannot wrap. Skip-softmax decides
    // on aligned tiles [n K, (n + 1) K); otherwise tiles start at the first visible key.
    const int first = a.skip_softmax ? lo_min / K * K : lo_min;
    for (int j0 = first; j0 < hi_max; j0 += K) visit(j0, std::min(K, hi_max - j0), all_listed);
  } else if (nq > 0) {
    ListedKeyBlocks lists(a, h, q0, nq);
    std::int64_t kb_lo, kb_hi;
    unsigned listed_by;
    while (lists.next(kb_lo, kb_hi, listed_by)) {
      // The run's keys within what the tile's rows can see at all.
      const int lo = static_cast<int>(std::max<std::int64_t>(kb_lo * a.block_k, lo_min));
      const int hi = static_cast<int>(std::min<std::int64_t>(kb_hi * a.block_k, hi_max));
      for (int j0 = lo; j0 < hi; j0 += K) visit(j0, std::min(K, hi - j0), listed_by);
    }
  }

  // Epilogue: sinks join the denominator; O = O^T / l; LSE = ln2 (m + log2 l).
  float* row = ws + L.kf;
  for (int i = 0; i < nq; ++i) {
    float mi = m[i], li = l[i], o_scale = 1.0f;
    if (a.has_sinks) {
      const float s2 = h.sink * FlashTraits::kLog2e;
      const float mf = std::max(mi, s2);
      o_scale = mi == kNegInf ? 0.0f : std::exp2(mi - mf);
      li = li * o_scale + std::exp2(s2 - mf);
      mi = mf;
    }
    const float inv = li > 0.0f ? o_scale * a.out_mul / li : 0.0f;  // fully masked: output 0
    for (int c = 0; c < a.dv; ++c) row[c] = ot[c * Q + i] * inv;
    StoreRow(row, a.dv, a.out, static_cast<char*>(h.out) + (q0 + i) * h.out_stride * out_size);
    if (h.lse != nullptr)
      h.lse[(q0 + i) * h.lse_stride] = li > 0.0f ? FlashTraits::kLn2 * (mi + std::log2(li)) : kNegInf;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit::kernels::cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
