#pragma once
// The fa2 mainloop: for one warp's 16 query rows, stream key tiles through a
// ring of shared-memory stages and keep
//   m = running max of the scores (log2 units, the sink logit included),
//   l = running sum of 2^(s - m), this thread's columns only,
//   O = running sum of 2^(s - m) v,
// so that after the last tile O / l is the attention output (epilogue.hpp).
#include <cmath>

#include "kernels/cuda/fa2/smem_layout.hpp"
#include "kernels/cuda/params.hpp"
#include "kernels/cuda/sm80_primitives.hpp"

namespace attnkit::cuda {

// Copies kRows rows of one (batch, head) slice into shared memory (at a
// shared-window byte address) with cp.async, 16 bytes per thread and pass.
// Each thread owns one 16-byte column chunk of rows r, r + kRowsPerPass, ...:
// a tile costs a few address ops and the cp.async instructions (a per-chunk
// divide and 64-bit multiply had been a third of all instructions at d128,
// per ncu). Rows at or past `valid_rows` (the sequence end; only the last
// tile) are zero-filled and never read from global memory.
template <class Traits, int kRows>
struct TileLoader {
  using T = typename Traits::T;
  static constexpr int kChunks = Traits::kChunksPerRow;
  static constexpr int kRowsPerPass = Traits::kThreads / kChunks;  // d96/d192 leave a few threads idle
  static constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr bool kSomeThreadsIdle = Traits::kThreads % kChunks != 0;
  static_assert(kRowsPerPass >= 1, "one CTA must cover at least one whole row per pass");

  // Only the slice pointer and its row stride stay live across the key loop
  // (registers are the d128 kernel's limit); the thread's row and column are
  // re-derived from threadIdx per tile, a few integer ops.
  const T* slice;
  std::int64_t row_stride;  // elements

  static __device__ __forceinline__ int thread_row() { return static_cast<int>(threadIdx.x) / kChunks; }
  static __device__ __forceinline__ int thread_col() { return (static_cast<int>(threadIdx.x) % kChunks) * 8; }

  // Rows [row0, row0 + kRows) of the slice into `smem`.
  __device__ __forceinline__ void load(std::uint32_t smem, int row0, int valid_rows) const {
    const int row = thread_row(), col = thread_col();
    if (kSomeThreadsIdle && row >= kRowsPerPass) return;
    const T* tile = slice + row0 * row_stride;  // the tile's first row, which exists
    const T* src = tile + row * row_stride + col;
    const std::int64_t pass_stride = kRowsPerPass * row_stride;
    const std::uint32_t dst = smem + tile_offset<Traits>(row, col);
    if (row0 + kRows <= valid_rows) {  // every row exists (all but a sequence's last tile)
#pragma unroll
      for (int i = 0; i < kPasses; ++i)
        if (kRows % kRowsPerPass == 0 || row + i * kRowsPerPass < kRows)
          cp_async_16(pass_offset<Traits, kRowsPerPass>(dst, i), src + i * pass_stride, true);
    } else {
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int r = row + i * kRowsPerPass;
        const bool valid = row0 + r < valid_rows;
        if (kRows % kRowsPerPass == 0 || r < kRows)  // a skipped chunk still names an existing address
          cp_async_16(pass_offset<Traits, kRowsPerPass>(dst, i), valid ? src + i * pass_stride : tile, valid);
      }
    }
  }
};

// Per-thread softmax state for the two rows it holds (g and g + 8).
struct OnlineSoftmax {
  float m[2];
  float l[2];
};

template <class Traits>
struct Fa2Mainloop {
  using T = typename Traits::T;
  static constexpr int kM = Traits::kMTiles;
  static constexpr int kSTiles = Traits::kSTiles;
  static constexpr int kOTiles = Traits::kOTiles;
  using SFrag = float[kM][kSTiles][4];  // S (then P) of one key tile, per row strip
  using OFrag = float[kM][kOTiles][4];  // the output accumulator, per row strip

  static __device__ __forceinline__ int lane() { return threadIdx.x & 31; }

  // C[strip][t..t+1] += A[strip] B for every row strip: one ldmatrix.x4 B
  // fragment holds two n8 tiles (b0,b1: tile t; b2,b3: tile t+1).
  template <int kTiles>
  static __device__ __forceinline__ void mma_tile_pair(float (&c)[kM][kTiles][4], const std::uint32_t (&a)[kM][4],
                                                       const std::uint32_t (&b)[4], int t) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      mma_16816<T>(c[m][t], a[m], b[0], b[1]);
      mma_16816<T>(c[m][t + 1], a[m], b[2], b[3]);
    }
  }

  // A fragment of Q (row strip m of this warp) for k-step ks.
  static __device__ __forceinline__ void load_q_fragment(std::uint32_t (&a)[4], std::uint32_t sQ_warp, int m,
                                                         int ks) {
    ldmatrix_x4(a, sQ_warp + fragment_offset<Traits, /*kRowsFirst=*/true>(lane(), m * 16, 2 * ks));
  }

  // S[strip][16 x kBlockN] = Q K^T for the tile in sK (fp32 accumulators). Each
  // K fragment loaded from shared memory feeds one mma per row strip.
  template <class QFrag>
  static __device__ __forceinline__ void qk(SFrag& s, const QFrag& q_regs, std::uint32_t sQ_warp, std::uint32_t sK) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) s[m][nt][0] = s[m][nt][1] = s[m][nt][2] = s[m][nt][3] = 0.0f;
    // Flattened steps i = (k-step ks, pair of n8 tiles np). K fragments for
    // step i + D are loaded before the mmas of step i (a ring of D + 1
    // buffers); the Q fragment of a k-step is loaded with its first K step.
    constexpr int kPairs = kSTiles / 2, kSteps = Traits::kKSteps * kPairs, D = Traits::kPrefetchDistance;
    static_assert(D <= kPairs, "at most the current and the next k-step's Q fragments are live");
    std::uint32_t a[2][kM][4];
    std::uint32_t b[D + 1][4];
    auto load_a = [&](std::uint32_t (&dst)[kM][4], int ks) {
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        if constexpr (Traits::kQInRegisters) {
          dst[m][0] = q_regs[m][ks][0], dst[m][1] = q_regs[m][ks][1], dst[m][2] = q_regs[m][ks][2],
          dst[m][3] = q_regs[m][ks][3];
        } else {
          load_q_fragment(dst[m], sQ_warp, m, ks);
        }
      }
    };
    // matrices: (keys nt, k lo), (keys nt, k hi), (keys nt+1, k lo), (keys nt+1, k hi)
    auto load_step = [&](int i) {
      const int ks = i / kPairs, nt = 2 * (i % kPairs);
      if (i % kPairs == 0) load_a(a[ks & 1], ks);
      ldmatrix_x4(b[i % (D + 1)], sK + fragment_offset<Traits, /*kRowsFirst=*/false>(lane(), nt * 8, 2 * ks));
    };
#pragma unroll
    for (int i = 0; i < D; ++i) load_step(i);
    // Nested (not flattened) loops: each unrolls fully, so every fragment
    // index below is a compile-time constant and nothing lands in local memory.
#pragma unroll
    for (int ks = 0; ks < Traits::kKSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < kPairs; ++np) {
        const int i = ks * kPairs + np, nt = 2 * np;
        if (i + D < kSteps) load_step(i + D);
        const auto& bi = b[i % (D + 1)];
        mma_tile_pair(s, a[ks & 1], bi, nt);
      }
    }
  }

  // Under softcapping, s <- cap*log2(e) * tanh(s * scale / cap): scores in log2
  // units, and online_softmax then runs with score_scale = 1. Without it the
  // raw q.k scores go straight to online_softmax with score_scale =
  // scale*log2(e), folded into the exponent's FMA.
  static __device__ __forceinline__ void apply_softcap(SFrag& s, const AttnParams& p) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[m][nt][e] = p.softcap_log2 * tanhf(s[m][nt][e] * p.softcap_prescale);
  }

  // Hides keys outside each row's visible range [lo, hi) (causal / window /
  // sequence end). `key0` is the tile's first key, `warp_row0` this warp's
  // first query row. The ranges are recomputed here, on the few boundary
  // tiles, rather than kept live across the key loop: at d128 those 16
  // registers were what spilled.
  static __device__ __forceinline__ void apply_mask(SFrag& s, int key0, int warp_row0, int q_len, int k_len,
                                                    int window_left, int window_right) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const KeyRange keys = visible_keys(warp_row0 + 16 * m + g + 8 * r, q_len, k_len, window_left, window_right);
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int j = key0 + nt * 8 + 2 * t + c;
            if (j < keys.lo || j >= keys.hi) s[m][nt][2 * r + c] = -INFINITY;
          }
      }
  }

  // With x = c * s (c = score_scale > 0, x in log2 units):
  //   m_new = max(m, rowmax(x));  P = 2^(x - m_new) = 2^(fma(s, c, -m_new));
  //   l = l * 2^(m - m_new) + rowsum(P);  O *= 2^(m - m_new).
  // rowmax(c * s) = c * rowmax(s) since c > 0. A row that has seen only masked
  // keys keeps m = -inf; it subtracts 0 instead, so every 2^(-inf) is a clean 0.
  static __device__ __forceinline__ void online_softmax(SFrag& s, OFrag& o, OnlineSoftmax (&st)[kM],
                                                        float score_scale) {
    if constexpr (Traits::kRescaleThreshold > 0)
      online_softmax_lazy(s, o, st, score_scale);
    else
      online_softmax_exact(s, o, st, score_scale);
  }

  // c * rowmax(s) of row r of strip m over this tile, the quad's 4 threads combined.
  static __device__ __forceinline__ float tile_row_max(const SFrag& s, int m, int r, float score_scale) {
    float row_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) row_max = fmaxf(row_max, fmaxf(s[m][nt][2 * r], s[m][nt][2 * r + 1]));
    return quad_max(row_max) * score_scale;
  }

  // s <- P = 2^(c s - m_sub) for row r of strip m; returns this thread's sum of P.
  static __device__ __forceinline__ float exponentiate_row(SFrag& s, int m, int r, float score_scale, float m_sub) {
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
      s[m][nt][2 * r] = fast_exp2(fmaf(s[m][nt][2 * r], score_scale, -m_sub));
      s[m][nt][2 * r + 1] = fast_exp2(fmaf(s[m][nt][2 * r + 1], score_scale, -m_sub));
      sum += s[m][nt][2 * r] + s[m][nt][2 * r + 1];
    }
    return sum;
  }

  static __device__ __forceinline__ void online_softmax_exact(SFrag& s, OFrag& o, OnlineSoftmax (&st)[kM],
                                                              float score_scale) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float mx = fmaxf(st[m].m[r], tile_row_max(s, m, r, score_scale));
        const float m_sub = mx == -INFINITY ? 0.0f : mx;
        const float alpha = fast_exp2(st[m].m[r] - m_sub);
        st[m].m[r] = mx;
        const float sum = exponentiate_row(s, m, r, score_scale, m_sub);
        st[m].l[r] = st[m].l[r] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < kOTiles; ++dt) {
          o[m][dt][2 * r] *= alpha;
          o[m][dt][2 * r + 1] *= alpha;
        }
      }
  }

  // The same update with a lazily moving max (c = score_scale, thr = the
  // trait's threshold): m_new = rowmax(x) if it exceeds m + thr, else m; so
  // P = 2^(x - m_new) <= 2^thr, and O, l are rescaled by 2^(m - m_new) only
  // when some row of the warp moved (a warp-uniform branch: after the first
  // tiles it is almost never taken). O / l and LSE = ln2 m + ln l are exact
  // for any m; only the rounding of P's magnitude changes. The branch comes
  // before the exponentials, so that they and the first P V mmas stay in one
  // basic block that ptxas can interleave (d256 measured 5-7% slower with
  // the branch after them).
  static __device__ __forceinline__ void online_softmax_lazy(SFrag& s, OFrag& o, OnlineSoftmax (&st)[kM],
                                                             float score_scale) {
    constexpr float kThreshold = static_cast<float>(Traits::kRescaleThreshold);
    float alpha[kM][2];
    bool moved = false;
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float tile_max = tile_row_max(s, m, r, score_scale);
        // m = -inf (no visible key yet): any finite tile max moves it, and 2^(-inf) = 0 clears O and l.
        const bool move = tile_max > st[m].m[r] + kThreshold;
        alpha[m][r] = move ? fast_exp2(st[m].m[r] - tile_max) : 1.0f;
        if (move) st[m].m[r] = tile_max;
        moved |= move;
      }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int dt = 0; dt < kOTiles; ++dt) {
          o[m][dt][0] *= alpha[m][0];
          o[m][dt][1] *= alpha[m][0];
          o[m][dt][2] *= alpha[m][1];
          o[m][dt][3] *= alpha[m][1];
        }
    }
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_sub = st[m].m[r] == -INFINITY ? 0.0f : st[m].m[r];
        const float sum = exponentiate_row(s, m, r, score_scale, m_sub);
        st[m].l[r] = st[m].l[r] * alpha[m][r] + sum;
      }
  }

  // V fragments in flight: step i's sits in slot i % (D + 1).
  using VFrags = std::uint32_t[Traits::kPrefetchDistance + 1][4];

  // matrices (transposed): (keys lo, dims dt), (keys hi, dims dt), (keys lo, dims dt+1), (keys hi, dims dt+1)
  static __device__ __forceinline__ void load_v_fragment(VFrags& b, std::uint32_t sV, int i) {
    constexpr int kPairs = kOTiles / 2;
    const int kk = i / kPairs, dt = 2 * (i % kPairs);
    ldmatrix_x4_trans(b[i % (Traits::kPrefetchDistance + 1)],
                      sV + fragment_offset<Traits, /*kRowsFirst=*/true>(lane(), kk * 16, dt));
  }

  // The first D steps' V fragments: issued by the kernel before the softmax
  // when that ends in a branch (lazy rescaling), which ptxas does not hoist
  // loads across; right before pv() otherwise.
  static __device__ __forceinline__ void pv_first_loads(VFrags& b, std::uint32_t sV) {
#pragma unroll
    for (int i = 0; i < Traits::kPrefetchDistance; ++i) load_v_fragment(b, sV, i);
  }

  static __device__ __forceinline__ void pv(OFrag& o, const SFrag& p, std::uint32_t sV, VFrags& b) {
    // Flattened steps i = (16-key step kk, pair of n8 dim tiles dp); V
    // fragments for step i + D loaded before the mmas of step i (a ring of
    // D + 1 buffers; pv_first_loads issued the first D), P fragments
    // converted once per kk.
    constexpr int kPairs = kOTiles / 2, kSteps = Traits::kPvSteps * kPairs, D = Traits::kPrefetchDistance;
    auto load_v = [&](int i) { load_v_fragment(b, sV, i); };
    std::uint32_t a[kM][4];
#pragma unroll
    for (int kk = 0; kk < Traits::kPvSteps; ++kk) {
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        a[m][0] = pack2<T>(p[m][2 * kk][0], p[m][2 * kk][1]);
        a[m][1] = pack2<T>(p[m][2 * kk][2], p[m][2 * kk][3]);
        a[m][2] = pack2<T>(p[m][2 * kk + 1][0], p[m][2 * kk + 1][1]);
        a[m][3] = pack2<T>(p[m][2 * kk + 1][2], p[m][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kPairs; ++dp) {
        const int i = kk * kPairs + dp, dt = 2 * dp;
        if (i + D < kSteps) load_v(i + D);
        const auto& bi = b[i % (D + 1)];
        mma_tile_pair(o, a, bi, dt);
      }
    }
  }
};

}  // namespace attnkit::cuda
