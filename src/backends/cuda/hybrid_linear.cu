// hybrid_window_attn_h3's linear branch and combine kernels (hybrid_linear.hpp).
// The feature map and the combine are sparse/hybrid_window.hpp's, which the
// CPU path runs too (in double). Here the products run on tensor cores
// (mma.sync m16n8k16, fp32 accumulate) over sub-blocks of kRows tokens:
//   chunk state:  S_c = phi(K)^T V,  z_c = sum_j phi(k_j)       (D x D, K = tokens)
//   query, full:  num = phi(Q) S,    den = phi(Q) . z            (64 x D, K = D)
//   query, causal: the same with S, z the sums of the keys before the
//     sub-block, plus the sub-block's own keys j <= i: num += mask(phi(Q) phi(K)^T) V,
//     den += the masked row sums; then S, z add the sub-block's keys.
// Every mma operand is bf16 (phi(q), phi(k), v, the masked products and S):
// S sums up to seqlen products, past fp16's range. The sums stay fp32; the
// rounding of the operands is 2^-9 relative per element.
// The token-serial SIMT kernels these replace took 4.5 ms (query 2.98, chunk
// states 1.55) at 30720 tokens, 24 heads, d128, full (H100, 2026-12-07): 24
// GFLOP each at 8-16 TFLOP/s.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/platform/cuda_limits.hpp"
#include "attnkit/sparse/hybrid_window.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/hybrid_linear.hpp"
#include "kernels/cuda/common/math.hpp"
#include "kernels/cuda/cuda_types.hpp"
#include "kernels/cuda/sm80_primitives.hpp"

namespace attnkit::cuda {
namespace {

using Op = __nv_bfloat16;          // every mma operand
constexpr int kRows = 64;          // tokens a sub-block (chunks are 64-multiples)
constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kScanThreads = 256;

// The warp tiles of the kernels for head dim D (shared memory: HybridLinearSmem).
template <int D>
struct Geo {
  static constexpr int ld = HybridLinearSmem{D, 1, 1, true}.operand_ld();
  static constexpr int ldn = HybridLinearSmem{D, 1, 1, true}.num_ld();  // fp32 half rows of the staged num
  // S update (D x D): warps kSm x kSn, each two m16 tiles (32 rows of c) x kScols columns of e.
  static constexpr int kSm = D / 32, kSn = kWarps / kSm, kScols = D / kSn, kSnt = kScols / 8;
  // num (64 x D): warps 4 x 2, each 16 rows x D / 2 columns.
  static constexpr int kOnt = D / 16;
  static_assert(kScols % 16 == 0 && D % 32 == 0 && HybridLinearSmem::kRows == kRows);
  // Half of num fits q's operand tile exactly.
  static_assert(kRows * ldn * 4 <= HybridLinearSmem{D, 1, 1, true}.op_bytes());
};
// Every kernel fits sm_80; all but the causal d128 query kernel fit sm_86 / 89 / 120 (the plan refuses that there).
static_assert(hybrid_linear_smem_bytes(128, true) <= cuda_smem_per_block(80) &&
              hybrid_linear_smem_bytes(128, false) <= cuda_smem_per_block(86));

// The rows [i0, i0 + n) of one (sequence, head) slice into a raw tile: 16-byte
// async copies when the rows allow them (`vec`), else element loads; rows past
// n are not read (their raw bytes are never used: to_operand zeroes them).
template <class T, int D>
__device__ __forceinline__ void load_raw(T* raw, const T* slice, std::int64_t row_stride, std::int64_t i0, int n,
                                         bool vec) {
  constexpr int kPieces = D / 8;
#pragma unroll 1
  for (int x = threadIdx.x; x < kRows * kPieces; x += kThreads) {
    const int r = x / kPieces, c = (x % kPieces) * 8;
    if (r >= n) continue;
    const T* g = slice + (i0 + r) * row_stride + c;
    if (vec) {
      cp_async_16(smem_addr(raw + r * D + c), g, true);
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) raw[r * D + c + k] = g[k];
    }
  }
  cp_async_commit();
}

// A raw tile -> a bf16 operand tile, phi applied to q and k (kFeature); rows
// past n zero (phi(0) is 1: a padded key must add nothing).
template <class T, int D, bool kFeature>
__device__ __forceinline__ void to_operand(const T* raw, Op* op, int n) {
  constexpr int kPieces = D / 8;
#pragma unroll 1  // one piece in flight: unrolled, the causal kernel (S in registers) spilled
  for (int x = threadIdx.x; x < kRows * kPieces; x += kThreads) {
    const int r = x / kPieces, c = (x % kPieces) * 8;
    alignas(16) T in[8];
    alignas(16) Op o[8];
    if (r < n) *reinterpret_cast<uint4*>(in) = *reinterpret_cast<const uint4*>(raw + r * D + c);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float f = r < n ? to_float(in[k]) : 0.f;
      o[k] = __float2bfloat16_rn(r < n && kFeature ? sparse::linear_feature(f) : f);
    }
    *reinterpret_cast<uint4*>(op + r * Geo<D>::ld + c) = *reinterpret_cast<const uint4*>(o);
  }
}

// acc += phi(K)^T V over the sub-block: warp w owns rows c0 = (w % kSm) * 32
// (two m16 tiles) and columns e0 = (w / kSm) * kScols of S.
template <int D>
__device__ __forceinline__ void add_state(float (&acc)[2][Geo<D>::kSnt][4], std::uint32_t k_op, std::uint32_t v_op,
                                          int warp, int lane) {
  using G = Geo<D>;
  const int c0 = (warp % G::kSm) * 32, e0 = (warp / G::kSm) * G::kScols;
#pragma unroll
  for (int ks = 0; ks < kRows / 16; ++ks) {
    std::uint32_t a[2][4];
    // A = phi(K)^T from the [token][c] tile: transposed 8 x 8 loads.
    const int ja = ks * 16 + (lane & 7) + ((lane >> 4) << 3);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
      ldmatrix_x4_trans(a[mt], k_op + (ja * G::ld + c0 + mt * 16 + ((lane >> 3) & 1) * 8) * 2);
    const int jb = ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int np = 0; np < G::kSnt / 2; ++np) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, v_op + (jb * G::ld + e0 + np * 16 + (lane >> 4) * 8) * 2);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        mma_16816<Op>(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma_16816<Op>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Element (row, col) of each accumulator register of add_state's layout.
template <int D>
__device__ __forceinline__ std::int64_t state_index(int warp, int lane, int mt, int nt, int reg) {
  using G = Geo<D>;
  const int row = (warp % G::kSm) * 32 + mt * 16 + (lane >> 2) + (reg >= 2 ? 8 : 0);
  const int col = (warp / G::kSm) * G::kScols + nt * 8 + (lane & 3) * 2 + (reg & 1);
  return static_cast<std::int64_t>(row) * D + col;
}

// S as bf16 into the [c][e] operand tile, from add_state's registers.
template <int D>
__device__ __forceinline__ void store_state_op(const float (&acc)[2][Geo<D>::kSnt][4], Op* s_op, int warp, int lane) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < Geo<D>::kSnt; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const std::int64_t x = state_index<D>(warp, lane, mt, nt, 2 * half);
        const int row = static_cast<int>(x / D), col = static_cast<int>(x % D);
        *reinterpret_cast<std::uint32_t*>(s_op + row * Geo<D>::ld + col) =
            pack2<Op>(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
      }
}

// z += the column sums of the sub-block's phi(K) (threads < D, one column each).
template <int D>
__device__ __forceinline__ float column_sum(const Op* k_op) {
  float sum = 0.f;
  for (int j = 0; j < kRows; ++j) sum += __bfloat162float(k_op[j * Geo<D>::ld + threadIdx.x]);
  return sum;
}

// Step 1. One CTA per (b, kv head, chunk): S and z over the chunk's keys.
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2) chunk_state_kernel(HybridLinear a, bool vec) {
  using G = Geo<D>;
  constexpr HybridLinearSmem L = hybrid_chunk_state_smem(D);
  extern __shared__ __align__(16) unsigned char smem[];
  T* raw_k = reinterpret_cast<T*>(smem + L.raw(0));
  T* raw_v = reinterpret_cast<T*>(smem + L.raw(1));
  Op* k_op = reinterpret_cast<Op*>(smem + L.op(0));
  Op* v_op = reinterpret_cast<Op*>(smem + L.op(1));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t u = blockIdx.x;  // ((b * heads_kv) + hk) * chunks + chunk
  const int chunk = static_cast<int>(u % a.chunks), hk = static_cast<int>(u / a.chunks % a.heads_kv),
            b = static_cast<int>(u / a.chunks / a.heads_kv);
  const T* k = static_cast<const T*>(a.k) + b * a.k_strides[0] + hk * a.k_strides[2];
  const T* v = static_cast<const T*>(a.v) + b * a.v_strides[0] + hk * a.v_strides[2];
  const std::int64_t j0 = static_cast<std::int64_t>(chunk) * a.chunk,
                     j1 = min(static_cast<std::int64_t>(a.seqlen), j0 + a.chunk);
  float acc[2][G::kSnt][4] = {};
  float z = 0.f;
  auto rows_at = [&](std::int64_t s) { return static_cast<int>(min(static_cast<std::int64_t>(kRows), j1 - s)); };
  load_raw<T, D>(raw_k, k, a.k_strides[1], j0, rows_at(j0), vec);
  load_raw<T, D>(raw_v, v, a.v_strides[1], j0, rows_at(j0), vec);
  for (std::int64_t s = j0; s < j1; s += kRows) {
    cp_async_wait<0>();
    __syncthreads();  // the raw tiles are in; the previous sub-block's operands are read
    to_operand<T, D, true>(raw_k, k_op, rows_at(s));
    to_operand<T, D, false>(raw_v, v_op, rows_at(s));
    __syncthreads();  // the operands are written, the raw tiles free
    if (s + kRows < j1) {
      load_raw<T, D>(raw_k, k, a.k_strides[1], s + kRows, rows_at(s + kRows), vec);
      load_raw<T, D>(raw_v, v, a.v_strides[1], s + kRows, rows_at(s + kRows), vec);
    }
    add_state<D>(acc, smem_addr(k_op), smem_addr(v_op), warp, lane);
    if (threadIdx.x < D) z += column_sum<D>(k_op);
  }
  float* out = a.state + u * (D * D + D);
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < G::kSnt; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        *reinterpret_cast<float2*>(out + state_index<D>(warp, lane, mt, nt, 2 * half)) =
            make_float2(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
  if (threadIdx.x < D) out[D * D + threadIdx.x] = z;
}

// Step 2. Per (b, kv head) and state element, over the chunks in order:
// causal, an exclusive scan in place; full, the total into chunk 0.
__global__ void __launch_bounds__(kScanThreads) scan_state_kernel(HybridLinear a) {
  const std::int64_t width = static_cast<std::int64_t>(a.head_dim) * a.head_dim + a.head_dim;
  const std::int64_t x = static_cast<std::int64_t>(blockIdx.y) * kScanThreads + threadIdx.x;
  if (x >= width) return;
  float* s = a.state + static_cast<std::int64_t>(blockIdx.x) * a.chunks * width + x;
  float run = 0.f;
  for (int c = 0; c < a.chunks; ++c) {
    const float here = s[c * width];
    if (a.causal) s[c * width] = run;
    run += here;
  }
  if (!a.causal) s[0] = run;
}

// Step 3. One CTA per (b, query head, chunk): the chunk's queries in
// sub-blocks; causal, each sub-block's own keys and then S += them.
template <class T, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads, kCausal ? 1 : 2) query_kernel(HybridLinear a, bool vec, bool vec_io) {
  using G = Geo<D>;
  constexpr HybridLinearSmem L = hybrid_query_smem(D, kCausal);
  extern __shared__ __align__(16) unsigned char smem[];
  T* raw_q = reinterpret_cast<T*>(smem + L.raw(0));
  Op* q_op = reinterpret_cast<Op*>(smem + L.op(L.ops - 1));  // causal: k op(0), v op(1), q op(2)
  Op* s_op = reinterpret_cast<Op*>(smem + L.s());
  float* z_s = reinterpret_cast<float*>(smem + L.z());
  float* den_s = reinterpret_cast<float*>(smem + L.den());
  float* num_s = reinterpret_cast<float*>(smem + L.num());  // over q_op, half a row at a time
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t u = blockIdx.x;  // ((b * heads_q) + h) * chunks + chunk
  const int chunk = static_cast<int>(u % a.chunks), h = static_cast<int>(u / a.chunks % a.heads_q),
            b = static_cast<int>(u / a.chunks / a.heads_q), hk = h / (a.heads_q / a.heads_kv);
  const float* state =
      a.state + ((static_cast<std::int64_t>(b) * a.heads_kv + hk) * a.chunks + (kCausal ? chunk : 0)) * (D * D + D);
  const T* q = static_cast<const T*>(a.q) + b * a.q_strides[0] + h * a.q_strides[2];
  const T* k = static_cast<const T*>(a.k) + b * a.k_strides[0] + hk * a.k_strides[2];
  const T* v = static_cast<const T*>(a.v) + b * a.v_strides[0] + hk * a.v_strides[2];
  const std::int64_t i0 = static_cast<std::int64_t>(chunk) * a.chunk,
                     i1 = min(static_cast<std::int64_t>(a.seqlen), i0 + a.chunk);
  auto rows_at = [&](std::int64_t s) { return static_cast<int>(min(static_cast<std::int64_t>(kRows), i1 - s)); };
  auto load = [&](std::int64_t s) {
    load_raw<T, D>(raw_q, q, a.q_strides[1], s, rows_at(s), vec);
    if constexpr (kCausal) {
      load_raw<T, D>(reinterpret_cast<T*>(smem + L.raw(1)), k, a.k_strides[1], s, rows_at(s), vec);
      load_raw<T, D>(reinterpret_cast<T*>(smem + L.raw(2)), v, a.v_strides[1], s, rows_at(s), vec);
    }
  };
  load(i0);

  // S (the keys before the chunk, or all of them) as the bf16 operand; causal also in fp32 registers.
  [[maybe_unused]] float acc_s[2][G::kSnt][4];
  if constexpr (kCausal) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < G::kSnt; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float2 p = *reinterpret_cast<const float2*>(state + state_index<D>(warp, lane, mt, nt, 2 * half));
          acc_s[mt][nt][2 * half] = p.x, acc_s[mt][nt][2 * half + 1] = p.y;
        }
    store_state_op<D>(acc_s, s_op, warp, lane);
  } else {
    for (int x = threadIdx.x; x < D * D / 4; x += kThreads) {
      const float4 p = reinterpret_cast<const float4*>(state)[x];
      const int row = 4 * x / D, col = 4 * x % D;
      *reinterpret_cast<uint2*>(s_op + row * G::ld + col) = make_uint2(pack2<Op>(p.x, p.y), pack2<Op>(p.z, p.w));
    }
  }
  if (threadIdx.x < D) z_s[threadIdx.x] = state[D * D + threadIdx.x];

  const int wm = warp % 4, wn = warp / 4;  // num's warp tile: rows wm * 16, columns wn * D / 2
  for (std::int64_t s = i0; s < i1; s += kRows) {
    const int n = rows_at(s);
    cp_async_wait<0>();
    __syncthreads();  // raw tiles in; the previous sub-block's operands, S, z, den and num read
    to_operand<T, D, true>(raw_q, q_op, n);
    if constexpr (kCausal) {
      to_operand<T, D, true>(reinterpret_cast<const T*>(smem + L.raw(1)), reinterpret_cast<Op*>(smem + L.op(0)), n);
      to_operand<T, D, false>(reinterpret_cast<const T*>(smem + L.raw(2)), reinterpret_cast<Op*>(smem + L.op(1)), n);
    }
    __syncthreads();  // operands written, raw tiles free
    if (s + kRows < i1) load(s + kRows);

    // den = phi(q) . z: four threads a row, a quarter of the dims each.
    {
      const int row = threadIdx.x / 4, part = threadIdx.x % 4;
      float sum = 0.f;
      for (int c = part * (D / 4); c < (part + 1) * (D / 4); ++c)
        sum += __bfloat162float(q_op[row * G::ld + c]) * z_s[c];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (part == 0) den_s[row] = sum;
    }

    const std::uint32_t q_addr = smem_addr(q_op), s_addr = smem_addr(s_op);
    auto q_fragment = [&](std::uint32_t (&af)[4], int ks) {
      ldmatrix_x4(af, q_addr + ((wm * 16 + (lane & 15)) * G::ld + ks * 16 + (lane >> 4) * 8) * 2);
    };
    // Causal: P = mask(phi(Q) phi(K)^T) for this warp's 16 rows and the
    // sub-block's 64 keys j <= i (the same token offsets for both), its fp32
    // row sums, and P in bf16 as the A fragments of k-steps of 16 keys. Done
    // before num, so that P's fp32 accumulators are gone when num's are live
    // (the causal kernel holds S in registers too).
    [[maybe_unused]] std::uint32_t pa[kRows / 16][4];
    [[maybe_unused]] float sum0 = 0.f, sum1 = 0.f;
    const int r0 = wm * 16 + (lane >> 2);
    if constexpr (kCausal) {
      float acc_p[kRows / 8][4] = {};
      const std::uint32_t k_addr = smem_addr(smem + L.op(0));
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        std::uint32_t af[4];
        q_fragment(af, ks);
#pragma unroll
        for (int np = 0; np < kRows / 16; ++np) {
          std::uint32_t bf[4];
          ldmatrix_x4(bf, k_addr + ((np * 16 + (lane & 7) + (lane >> 4) * 8) * G::ld + ks * 16 + ((lane >> 3) & 1) * 8) * 2);
          mma_16816<Op>(acc_p[2 * np], af, bf[0], bf[1]);
          mma_16816<Op>(acc_p[2 * np + 1], af, bf[2], bf[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < kRows / 8; ++nt)
#pragma unroll
        for (int reg = 0; reg < 4; ++reg) {
          const int row = r0 + (reg >= 2 ? 8 : 0), col = nt * 8 + (lane & 3) * 2 + (reg & 1);
          if (col > row) acc_p[nt][reg] = 0.f;
          (reg >= 2 ? sum1 : sum0) += acc_p[nt][reg];
        }
      sum0 = quad_sum(sum0), sum1 = quad_sum(sum1);
#pragma unroll
      for (int kb = 0; kb < kRows / 16; ++kb) {
        pa[kb][0] = pack2<Op>(acc_p[2 * kb][0], acc_p[2 * kb][1]);
        pa[kb][1] = pack2<Op>(acc_p[2 * kb][2], acc_p[2 * kb][3]);
        pa[kb][2] = pack2<Op>(acc_p[2 * kb + 1][0], acc_p[2 * kb + 1][1]);
        pa[kb][3] = pack2<Op>(acc_p[2 * kb + 1][2], acc_p[2 * kb + 1][3]);
      }
    }

    // num = phi(Q) S.
    float acc_o[G::kOnt][4] = {};
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      std::uint32_t af[4];
      q_fragment(af, ks);
      const int cb = ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int np = 0; np < G::kOnt / 2; ++np) {
        std::uint32_t bf[4];
        ldmatrix_x4_trans(bf, s_addr + (cb * G::ld + wn * (D / 2) + np * 16 + (lane >> 4) * 8) * 2);
        mma_16816<Op>(acc_o[2 * np], af, bf[0], bf[1]);
        mma_16816<Op>(acc_o[2 * np + 1], af, bf[2], bf[3]);
      }
    }
    __syncthreads();  // den_s holds phi(q) . z; every warp is done with q_op (num lies over it), S and z
    if constexpr (kCausal) {
      if (wn == 0 && (lane & 3) == 0) den_s[r0] += sum0, den_s[r0 + 8] += sum1;
      // num += P V.
      const std::uint32_t v_addr = smem_addr(smem + L.op(1));
#pragma unroll
      for (int kb = 0; kb < kRows / 16; ++kb) {
        const int jb = kb * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int np = 0; np < G::kOnt / 2; ++np) {
          std::uint32_t bf[4];
          ldmatrix_x4_trans(bf, v_addr + (jb * G::ld + wn * (D / 2) + np * 16 + (lane >> 4) * 8) * 2);
          mma_16816<Op>(acc_o[2 * np], pa[kb], bf[0], bf[1]);
          mma_16816<Op>(acc_o[2 * np + 1], pa[kb], bf[2], bf[3]);
        }
      }
      // The sub-block's keys join S and z for the next sub-block.
      add_state<D>(acc_s, smem_addr(smem + L.op(0)), v_addr, warp, lane);
      store_state_op<D>(acc_s, s_op, warp, lane);
      if (threadIdx.x < D) z_s[threadIdx.x] += column_sum<D>(reinterpret_cast<const Op*>(smem + L.op(0)));
    }
    // out = window + gate * num / den, 8 elements a thread, num staged in fp32
    // over q's operand tile half a row at a time (the warps of columns wn * D / 2):
    // the whole of num would not fit beside S under 99 KB (sm_86 / 89 / 120).
    const T* window = static_cast<const T*>(a.window);
    T* out = static_cast<T*>(a.out);
#pragma unroll 1
    for (int part = 0; part < 2; ++part) {
      if (part == 1) __syncthreads();  // the first half is read
      if (wn == part) {
#pragma unroll
        for (int nt = 0; nt < G::kOnt; ++nt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int row = wm * 16 + (lane >> 2) + half * 8, col = nt * 8 + (lane & 3) * 2;
            *reinterpret_cast<float2*>(num_s + row * G::ldn + col) =
                make_float2(acc_o[nt][2 * half], acc_o[nt][2 * half + 1]);
          }
      }
      __syncthreads();  // this half of num (and den) complete
      for (int x = threadIdx.x; x < n * (D / 16); x += kThreads) {
        const int r = x / (D / 16), c0 = (x % (D / 16)) * 8, e0 = part * (D / 2) + c0;
        const std::int64_t i = s + r;
        const float g = a.gate[gate_offset(a.layout, a.gate_strides, b, h, i, 0)], den = den_s[r];
        const std::int64_t w_at = b * a.window_strides[0] + i * a.window_strides[1] + h * a.window_strides[2] + e0;
        const std::int64_t o_at = b * a.out_strides[0] + i * a.out_strides[1] + h * a.out_strides[2] + e0;
        alignas(16) T soft[8], res[8];
        if (vec_io) {
          *reinterpret_cast<uint4*>(soft) = *reinterpret_cast<const uint4*>(window + w_at);
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) soft[k] = window[w_at + k];
        }
#pragma unroll
        for (int k = 0; k < 8; ++k)
          res[k] = from_float<T>(sparse::hybrid_combine(to_float(soft[k]), g, num_s[r * G::ldn + c0 + k], den));
        if (vec_io) {
          *reinterpret_cast<uint4*>(out + o_at) = *reinterpret_cast<const uint4*>(res);
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) out[o_at + k] = res[k];
        }
      }
    }
  }
}


// configure_hybrid_linear raised each kernel's shared memory limit at plan time.
template <class Kernel>
Diagnostics launch(Kernel kernel, unsigned grid, int smem, cudaStream_t st, const char* what, auto... args) {
  kernel<<<grid, kThreads, smem, st>>>(args...);
  return check_cuda(cudaGetLastError(), what);
}

template <class T, int D>
Diagnostics queue(const HybridLinear& a, cudaStream_t st) {
  const unsigned kv_units = static_cast<unsigned>(static_cast<std::int64_t>(a.batch) * a.heads_kv * a.chunks);
  const unsigned q_units = static_cast<unsigned>(static_cast<std::int64_t>(a.batch) * a.heads_q * a.chunks);
  // 16-byte copies of q, k, v rows; 16-byte loads and stores of the window and out rows.
  const bool vec = rows_aligned_16(a.q, a.q_strides) && rows_aligned_16(a.k, a.k_strides) &&
                   rows_aligned_16(a.v, a.v_strides);
  const bool vec_io = rows_aligned_16(a.window, a.window_strides) && rows_aligned_16(a.out, a.out_strides);
  if (Diagnostics why = launch(chunk_state_kernel<T, D>, kv_units, hybrid_chunk_state_smem(D).bytes(), st,
                               "hybrid_window chunk state launch", a, vec);
      !why.ok())
    return why;
  const dim3 scan_grid(static_cast<unsigned>(static_cast<std::int64_t>(a.batch) * a.heads_kv),
                       static_cast<unsigned>((D * D + D + kScanThreads - 1) / kScanThreads));
  scan_state_kernel<<<scan_grid, kScanThreads, 0, st>>>(a);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "hybrid_window state scan launch"); !why.ok()) return why;
  if (a.causal)
    return launch(query_kernel<T, D, true>, q_units, hybrid_query_smem(D, true).bytes(), st,
                  "hybrid_window linear branch launch", a, vec, vec_io);
  return launch(query_kernel<T, D, false>, q_units, hybrid_query_smem(D, false).bytes(), st,
                "hybrid_window linear branch launch", a, vec, vec_io);
}

template <class T>
Diagnostics queue_dim(const HybridLinear& a, cudaStream_t st) {
  if (a.head_dim == 64) return queue<T, 64>(a, st);
  return queue<T, 128>(a, st);
}

template <class T, int D>
Diagnostics configure(bool causal) {
  const void* query = causal ? reinterpret_cast<const void*>(query_kernel<T, D, true>)
                             : reinterpret_cast<const void*>(query_kernel<T, D, false>);
  if (Diagnostics why = raise_dynamic_smem(reinterpret_cast<const void*>(chunk_state_kernel<T, D>),
                                           hybrid_chunk_state_smem(D).bytes(), "hybrid_window chunk state");
      !why.ok())
    return why;
  return raise_dynamic_smem(query, hybrid_query_smem(D, causal).bytes(), "hybrid_window linear branch");
}

}  // namespace

Diagnostics configure_hybrid_linear(DType dtype, int head_dim, bool causal) {
  if (head_dim != 64 && head_dim != 128) return {};  // hybrid_linear refuses the shape (AK2105)
  if (dtype == DType::bf16)
    return head_dim == 64 ? configure<__nv_bfloat16, 64>(causal) : configure<__nv_bfloat16, 128>(causal);
  return head_dim == 64 ? configure<__half, 64>(causal) : configure<__half, 128>(causal);
}

Diagnostics hybrid_linear(const HybridLinear& a, StreamHandle stream) {
  if (a.head_dim != 64 && a.head_dim != 128)
    return diagnose("AK2105", {{"backend", "hybrid_window_attn_h3"}, {"dim", std::to_string(a.head_dim)},
                               {"compiled", "64, 128"}});
  if (a.batch == 0 || a.heads_q == 0 || a.seqlen == 0 || a.chunks == 0) return {};
  auto st = static_cast<cudaStream_t>(stream);
  if (a.dtype == DType::bf16) return queue_dim<__nv_bfloat16>(a, st);
  return queue_dim<__half>(a, st);
}

}  // namespace attnkit::cuda
