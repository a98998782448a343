#pragma once
// The online softmax of the flash kernels, written against the accumulator
// row view that mma.sync (sm_80) and wgmma (sm_90) share: a thread holds, per
// 16-row strip m and 8-column tile j, frag[m][j][0..1] = row g, columns
// 8j + 2t + {0,1}, and frag[m][j][2..3] = the same columns of row g + 8
// (g = lane / 4, t = lane % 4); the 4 threads of a quad hold a whole row.
//
// State per row, in log2 units (x = c * s, c > 0 the score scale):
//   m = running max of x (the sink logit included),
//   l = running sum of 2^(x - m) over this thread's columns,
//   O = running sum of 2^(x - m) v,
// so that after the last tile O / quad_sum(l) is the attention output.
#include <cmath>

#include "kernels/cuda/common/math.hpp"
#include "kernels/cuda/params.hpp"

namespace attnkit::cuda {

// Rows g and g + 8 of one strip.
struct RowState {
  float m[2];
  float l[2];
};

template <int kM, int kTiles>
struct TileSoftmax {
  using Frag = float[kM][kTiles][4];

  // c * rowmax(s) of row r of strip m over this tile, the quad combined.
  static __device__ __forceinline__ float row_max(const Frag& s, int m, int r, float c) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) mx = fmaxf(mx, fmaxf(s[m][j][2 * r], s[m][j][2 * r + 1]));
    return quad_max(mx) * c;
  }

  // s <- P = 2^(c s - m_sub) for row r of strip m; returns this thread's sum of P.
  static __device__ __forceinline__ float exponentiate_row(Frag& s, int m, int r, float c, float m_sub) {
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      s[m][j][2 * r] = fast_exp2(fmaf(s[m][j][2 * r], c, -m_sub));
      s[m][j][2 * r + 1] = fast_exp2(fmaf(s[m][j][2 * r + 1], c, -m_sub));
      sum += s[m][j][2 * r] + s[m][j][2 * r + 1];
    }
    return sum;
  }

  // Exact running max: m_new = max(m, rowmax(x)); s <- P = 2^(x - m_new);
  // l <- l * alpha + rowsum(P) with alpha = 2^(m - m_new), the factor O must
  // be scaled by (rescale_rows). A row that has seen only masked keys keeps
  // m = -inf and subtracts 0 instead, so every 2^(-inf) is a clean 0.
  static __device__ __forceinline__ void step(Frag& s, RowState (&st)[kM], float c, float (&alpha)[kM][2]) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) step_row(s, st, c, alpha, m, r);
  }
  // step() for row r of strip m alone: move_max(), then the exponentials.
  static __device__ __forceinline__ void step_row(Frag& s, RowState (&st)[kM], float c, float (&alpha)[kM][2], int m,
                                                  int r) {
    const float m_sub = move_max(s, st, c, alpha, m, r);
    st[m].l[r] = st[m].l[r] * alpha[m][r] + exponentiate_row(s, m, r, c, m_sub);
  }
  // Row r's new running max and alpha; returns the max its exponentials
  // subtract (0 for a row that has seen only masked keys).
  static __device__ __forceinline__ float move_max(const Frag& s, RowState (&st)[kM], float c,
                                                   float (&alpha)[kM][2], int m, int r) {
    const float mx = fmaxf(st[m].m[r], row_max(s, m, r, c));
    const float m_sub = mx == -INFINITY ? 0.0f : mx;
    alpha[m][r] = fast_exp2(st[m].m[r] - m_sub);
    st[m].m[r] = mx;
    return m_sub;
  }

  // The same update with a lazily moving max (FlashAttention-4's trick, fa2's
  // Fa2Traits RescaleThreshold): m moves only when a tile's max exceeds it by
  // more than kThreshold (log2 units), so P = 2^(x - m) <= 2^kThreshold and O
  // needs rescaling only when some row of the warp moved (returned; alpha = 1
  // for rows that did not). O / l and LSE = ln2 m + ln l stay exact for any m.
  template <int kThreshold>
  static __device__ __forceinline__ bool step_lazy(Frag& s, RowState (&st)[kM], float c, float (&alpha)[kM][2]) {
    const bool moved = move_max_lazy<kThreshold>(s, st, c, alpha);
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) exponentiate_at_max(s, st, c, alpha, m, r);
    return __any_sync(0xffffffffu, moved);
  }
  // step_lazy's first half: every row's max and alpha; whether some row of
  // this thread moved.
  template <int kThreshold>
  static __device__ __forceinline__ bool move_max_lazy(const Frag& s, RowState (&st)[kM], float c,
                                                       float (&alpha)[kM][2]) {
    bool moved = false;
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float tile_max = row_max(s, m, r, c);
        // m = -inf (no visible key yet): any finite tile max moves it, and 2^(-inf) = 0 clears O and l.
        const bool move = tile_max > st[m].m[r] + static_cast<float>(kThreshold);
        alpha[m][r] = move ? fast_exp2(st[m].m[r] - tile_max) : 1.0f;
        if (move) st[m].m[r] = tile_max;
        moved |= move;
      }
    return moved;
  }
  // Row r's exponentials against its running max st.m (after move_max or
  // move_max_lazy; 0 subtracted while it is -inf), and l <- l * alpha + rowsum(P).
  static __device__ __forceinline__ void exponentiate_at_max(Frag& s, RowState (&st)[kM], float c,
                                                             const float (&alpha)[kM][2], int m, int r) {
    const float m_sub = st[m].m[r] == -INFINITY ? 0.0f : st[m].m[r];
    st[m].l[r] = st[m].l[r] * alpha[m][r] + exponentiate_row(s, m, r, c, m_sub);
  }
};

// Request skip-softmax (docs/sparse.md section 3) on top of the exact update.
// Per row: `key_max` is the running max over keys alone (log2 units; the sink
// is not a key), `valid` says the row lies inside the sequence. Row r skips the
// tile when it has seen a key and the tile's max is below key_max + log2_threshold;
// a skipped row, a row with no visible key in the tile and a row past the
// sequence add nothing (P = 0, alpha = 1, m and l unchanged).
struct SkipRows {
  float log2_threshold;
  float key_max[2];
  bool valid[2];
  unsigned decided = 0, skipped = 0;  // (valid row, tile with a visible key) pairs; counted by one thread per row
};

template <int kTiles>
struct TileSoftmaxSkip {
  using Frag = float[1][kTiles][4];
  using Base = TileSoftmax<1, kTiles>;

  // Returns whether this thread's rows keep the tile (some P is non-zero).
  // Branch-free, in the dense step's order (both rows' maxima, then the
  // exponentials): a skipped row subtracts +inf, so its P = 2^(-inf) = 0.
  static __device__ __forceinline__ bool step(Frag& s, RowState (&st)[1], SkipRows& rows, float c,
                                              float (&alpha)[1][2], bool counting) {
    float tile_max[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) tile_max[r] = Base::row_max(s, 0, r, c);
    bool kept = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool seen = rows.valid[r] && tile_max[r] != -INFINITY;
      const bool skip =
          !seen || (rows.key_max[r] != -INFINITY && tile_max[r] < rows.key_max[r] + rows.log2_threshold);
      if (counting && seen) {
        ++rows.decided;
        rows.skipped += skip ? 1u : 0u;
      }
      kept |= !skip;
      rows.key_max[r] = skip ? rows.key_max[r] : fmaxf(rows.key_max[r], tile_max[r]);
      const float mx = skip ? st[0].m[r] : fmaxf(st[0].m[r], tile_max[r]);  // kept: finite
      alpha[0][r] = skip ? 1.0f : fast_exp2(st[0].m[r] - mx);
      st[0].m[r] = mx;
      st[0].l[r] = st[0].l[r] * alpha[0][r] + Base::exponentiate_row(s, 0, r, c, skip ? INFINITY : mx);
    }
    return kept;
  }
};

// O *= alpha, row by row.
template <int kM, int kOTiles>
__device__ __forceinline__ void rescale_rows(float (&o)[kM][kOTiles][4], const float (&alpha)[kM][2]) {
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int j = 0; j < kOTiles; ++j) {
      o[m][j][0] *= alpha[m][0];
      o[m][j][1] *= alpha[m][0];
      o[m][j][2] *= alpha[m][1];
      o[m][j][3] *= alpha[m][1];
    }
}

// Under softcapping, s <- cap*log2(e) * tanh(s * scale / cap): scores in log2
// units, and the softmax then runs with c = 1. Without it the raw q.k scores
// go to the softmax with c = scale*log2(e), folded into the exponent's FMA.
template <int kM, int kTiles>
__device__ __forceinline__ void apply_softcap(float (&s)[kM][kTiles][4], const AttnParams& p) {
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][j][e] = p.softcap_log2 * tanhf(s[m][j][e] * p.softcap_prescale);
}

// Hides keys outside each row's visible range (causal / window / sequence
// end). `key0` is the tile's first key, `strip_row0` the first row of strip 0
// (strips are 16 rows apart; warp-uniform). Both ends of the range are
// nondecreasing in the row (core/mask.hpp), so when the strips' last row sees
// from key0 on, no row of the warp is cut on the left and one compare a score
// is enough (causal without a window: always): the diagonal tile's mask ran
// two, 134 ISETP a thread where FlashAttention-3 has 64 (ncu d128 causal s1k,
// 2026-12-05). Limits are relative to the thread's first column, so each
// compare is a register against an immediate.
template <bool kLeft, int kM, int kTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kM][kTiles][4], int key0, int strip_row0, int q_len,
                                            int k_len, int window_left, int window_right) {
  const int g = (threadIdx.x & 31) >> 2, col0 = key0 + 2 * (threadIdx.x & 3);
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const KeyRange keys = visible_keys(strip_row0 + 16 * m + g + 8 * r, q_len, k_len, window_left, window_right);
      const int lo = keys.lo - col0, hi = keys.hi - col0;  // column c of the thread is key col0 + c
#pragma unroll
      for (int j = 0; j < kTiles; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const bool hidden = kLeft ? (j * 8 + c < lo || j * 8 + c >= hi) : j * 8 + c >= hi;
          if (hidden) s[m][j][2 * r + c] = -INFINITY;
        }
    }
}
template <int kM, int kTiles>
__device__ __forceinline__ void apply_mask(float (&s)[kM][kTiles][4], int key0, int strip_row0, int q_len, int k_len,
                                           int window_left, int window_right) {
  const int last_row = strip_row0 + 16 * (kM - 1) + 15;
  if (visible_keys(last_row, q_len, k_len, window_left, window_right).lo > key0)
    mask_scores<true>(s, key0, strip_row0, q_len, k_len, window_left, window_right);
  else
    mask_scores<false>(s, key0, strip_row0, q_len, k_len, window_left, window_right);
}

// The end of the softmax for one row: l_total = quad_sum(l) + 2^(sink - m)
// (sink in log2 units, when there is one); O is scaled by 1 / l_total, and
//   LSE = ln 2 * m + ln(l_total)    (natural log; -inf for a row that saw no key).
struct RowTotal {
  float inv_l;  // 0 for a row that saw no key: O = 0
  float lse;
};
__device__ __forceinline__ RowTotal finish_row(float m, float l_thread, bool has_sink, float sink_log2) {
  float l = quad_sum(l_thread);
  const float m_sub = m == -INFINITY ? 0.0f : m;
  if (has_sink) l += fast_exp2(sink_log2 - m_sub);
  return {l > 0.0f ? 1.0f / l : 0.0f, l > 0.0f ? m * kLn2 + logf(l) : -INFINITY};
}

}  // namespace attnkit::cuda
