// sparge_attn's selection kernels (sparge_select.hpp). The `__*_rn`
// intrinsics keep nvcc from fusing a multiply and an add: the host computes
// these sums unfused, and the means, norms and scores must round alike.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attnkit/core/block_sparse.hpp"
#include "backends/cuda/csr_lists.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/sparge_select.hpp"
#include "kernels/cuda/common/math.hpp"
#include "kernels/cuda/cuda_types.hpp"
#include "kernels/cuda/sm80_primitives.hpp"

namespace attnkit::cuda {
namespace {

constexpr int kMaxRows = 128;  // the larger of the two block sizes (SpargeSettings::kBlockQ)
constexpr int kPoolThreads = 128;
constexpr int kSelectThreads = 256;

int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Elements between a pooled block's rows in shared memory: whole 16-byte
// chunks (cp.async targets), an odd number of them, so the norm pass (thread
// i reads row i, 16 bytes at a time, 8 threads a phase) meets no bank conflicts.
__host__ __device__ constexpr int pool_ld(int d) { return (((d + 7) / 8) | 1) * 8; }

// One pooled block's rows in global memory: query blocks first, then key blocks.
template <class T>
struct PoolBlock {
  bool is_q;
  std::int64_t local;       // the block's index among the query (or key) blocks
  int n;                    // its rows
  const T* row0;            // its first row
  std::int64_t row_stride;  // elements between its rows
};

template <class T>
__device__ PoolBlock<T> pool_block_at(const SpargeSelect& s, std::int64_t u, std::int64_t rows_q) {
  PoolBlock<T> p;
  p.is_q = u < rows_q;
  p.local = p.is_q ? u : u - rows_q;
  const int blocks = p.is_q ? num_blocks(s.seqlen, s.block_q) : num_blocks(s.seqlen, s.block_k);
  const int heads = p.is_q ? s.heads_q : s.heads_kv, size = p.is_q ? s.block_q : s.block_k;
  const int blk = static_cast<int>(p.local % blocks), h = static_cast<int>(p.local / blocks % heads),
            b = static_cast<int>(p.local / blocks / heads);
  const int lo = blk * size;
  p.n = min(s.seqlen, lo + size) - lo;
  const std::int64_t* st = p.is_q ? s.q_strides : s.k_strides;
  p.row0 = static_cast<const T*>(p.is_q ? s.q : s.k) + b * st[0] + lo * st[1] + h * st[2];
  p.row_stride = st[1];
  return p;
}

// Starts copying p's rows into x (row i at x + i * pool_ld(d)): 16-byte
// cp.async where the rows allow, else element by element (done on return).
// The scalar copy (a 2-byte load and a division per element, one load in
// flight a thread) held pooling to 1.28 ms at 30720 tokens x 24 heads (H100).
template <class T>
__device__ void stage_rows(T* x, const PoolBlock<T>& p, int d) {
  const int ld = pool_ld(d);
  const bool vec = d % 8 == 0 && p.row_stride % 8 == 0 && aligned_16(p.row0);
  if (vec) {
    const int chunks = d / 8;
    const std::uint32_t base = smem_addr(x);
    for (int e = threadIdx.x; e < p.n * chunks; e += blockDim.x) {
      const int i = e / chunks, c = (e - i * chunks) * 8;
      cp_async_16(base + static_cast<std::uint32_t>((i * ld + c) * sizeof(T)), p.row0 + i * p.row_stride + c, true);
    }
    cp_async_commit();
  } else {
    for (int e = threadIdx.x; e < p.n * d; e += blockDim.x) {
      const int i = e / d, c = e - i * d;
      x[i * ld + c] = p.row0[i * p.row_stride + c];
    }
  }
}

// One CTA per block (query blocks first, then key blocks): the mean of its
// rows (float, summed over rows in order, as pool_block) and whether its mean
// pairwise cosine similarity |sum of unit rows|^2 / n^2 exceeds simthreshd1.
// The next block's copy runs behind thread 0's final sum.
template <class T>
__global__ void __launch_bounds__(kPoolThreads) pool_kernel(SpargeSelect s, std::int64_t rows_q, std::int64_t units) {
  __shared__ __align__(16) T x[kMaxRows * pool_ld(kSpargeMaxHeadDim)];
  __shared__ double norm[kMaxRows];
  __shared__ double unit[kSpargeMaxHeadDim];
  const int d = s.head_dim, ld = pool_ld(d);
  if (blockIdx.x < rows_q + units) stage_rows(x, pool_block_at<T>(s, blockIdx.x, rows_q), d);
  for (std::int64_t u = blockIdx.x; u < rows_q + units; u += gridDim.x) {
    const PoolBlock<T> p = pool_block_at<T>(s, u, rows_q);
    const int n = p.n;
    cp_async_wait<0>();
    __syncthreads();  // x holds this block's rows
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      double sq = 0.0;
      for (int c0 = 0; c0 < d; c0 += 8) {
        const uint4 chunk = *reinterpret_cast<const uint4*>(x + i * ld + c0);  // 16-byte aligned: ld, c0 % 8 == 0
        const T* v8 = reinterpret_cast<const T*>(&chunk);
#pragma unroll
        for (int k = 0; k < 8; ++k)
          if (c0 + k < d) {
            const double v = to_float(v8[k]);
            sq = __dadd_rn(sq, __dmul_rn(v, v));
          }
      }
      norm[i] = sqrt(sq);
    }
    __syncthreads();
    // The mean and the sum of unit rows in one pass over a column (each still summed over rows in order).
    float* mean = (p.is_q ? s.q_mean : s.k_mean) + p.local * d;
    const float nf = static_cast<float>(n);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
      float m = 0.0f;
      double acc = 0.0;
      for (int i = 0; i < n; ++i) {
        const float v = to_float(x[i * ld + c]);
        m = __fadd_rn(m, __fdiv_rn(v, nf));
        if (norm[i] != 0.0) acc = __dadd_rn(acc, __ddiv_rn(v, norm[i]));  // zero rows add nothing
      }
      mean[c] = m;
      unit[c] = acc;
    }
    __syncthreads();  // x is free, unit is complete
    if (u + gridDim.x < rows_q + units) stage_rows(x, pool_block_at<T>(s, u + gridDim.x, rows_q), d);
    if (threadIdx.x == 0) {
      double sq = 0.0;
      for (int c = 0; c < d; ++c) sq = __dadd_rn(sq, __dmul_rn(unit[c], unit[c]));
      const double sim = __ddiv_rn(sq, static_cast<double>(n) * n);
      (p.is_q ? s.q_smooth : s.k_smooth)[p.local] = sim > s.simthreshd1 ? 1 : 0;
    }
  }
}

// Whether (pa, ia) ranks before (pb, ib): higher probability, ties by the lower block index.
__device__ __forceinline__ bool ranks_before(double pa, int ia, double pb, int ib) {
  return pa > pb || (pa == pb && ia < ib);
}

// Key means staged a tile of kSelectThreads blocks x kStageDims dims at a
// time (coalesced loads; rows padded to an odd count of floats, so thread t
// reading row t meets no bank conflicts). Reading each block's mean strided by
// d floats per thread, once per query block, held the selection to 1.71 ms at
// 30720 tokens x 24 heads (H100).
constexpr int kStageDims = 16;
constexpr int kStageLd = kStageDims + 1;
constexpr int kStageRowsPerPass = kSelectThreads / kStageDims;     // a CTA-wide load: 16 blocks' 64 bytes
constexpr int kStageLoads = kSelectThreads / kStageRowsPerPass;    // loads a thread makes per tile
constexpr std::size_t kStageBytes = std::size_t{kSelectThreads} * kStageLd * sizeof(float);

// Query blocks a selection CTA scores together against each staged tile (one
// kv head's, consecutive): up to 32 KB of their probabilities.
int select_rows_per_cta(int cap) { return cap <= 1024 ? 4 : cap <= 2048 ? 2 : 1; }

// One CTA per kRows query blocks of one (sequence, head) (rows of the CSR
// lists): their scores against the key blocks of the kv head, then row by
// row P = softmax over the smooth ones, sorted by P descending (a bitonic
// network over `cap` >= key blocks entries: data-independent accesses, in
// bounds whatever the values), the kept flags and their count. Mirrors
// sparge_select (sparse/sparge.cpp).
template <int kRows>
__global__ void __launch_bounds__(kSelectThreads) select_kernel(SpargeSelect s, std::int64_t groups, int cap) {
  const int d = s.head_dim, nq = num_blocks(s.seqlen, s.block_q), nk = num_blocks(s.seqlen, s.block_k);
  extern __shared__ double smem[];
  double* probs = smem;                                   // [kRows][cap]: scores, then probabilities
  double* q_means = probs + kRows * cap;                  // [kRows][d]
  float* stage = reinterpret_cast<float*>(q_means + kRows * d);  // [kSelectThreads][kStageLd] while scoring
  int* order = reinterpret_cast<int*>(stage);             // [cap] while ranking (the same bytes)
  __shared__ double red[kSelectThreads / 32];
  __shared__ double chunk_sum[kSelectThreads];
  __shared__ int candidates, taken, counted;
  const int group = s.heads_q / s.heads_kv, per_slice = (nq + kRows - 1) / kRows;
  for (std::int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const std::int64_t slice = g / per_slice;  // b * heads_q + h
    const int qb0 = static_cast<int>(g % per_slice) * kRows, rows_here = min(kRows, nq - qb0);
    const int h = static_cast<int>(slice % s.heads_q), b = static_cast<int>(slice / s.heads_q);
    const std::int64_t r0 = slice * nq + qb0;  // the first row
    const std::int64_t k0 = (static_cast<std::int64_t>(b) * s.heads_kv + h / group) * nk;
    __syncthreads();  // the previous group is done with the shared arrays
    for (int x = threadIdx.x; x < kRows * d; x += blockDim.x)
      q_means[x] = x < rows_here * d ? static_cast<double>(s.q_mean[r0 * d + x]) : 0.0;
    const bool any_smooth = __syncthreads_or(threadIdx.x < rows_here && s.q_smooth[r0 + threadIdx.x]);
    // Scores: -inf for a non-smooth key block (kept regardless, outside the softmax).
    // Each dot product sums c = 0..d-1 in order, a tile's dims at a time.
    for (int kc = 0; any_smooth && kc < cap; kc += kSelectThreads) {
      const int kb = kc + threadIdx.x, chunk = min(kSelectThreads, nk - kc);  // chunk <= 0: padding only
      double dot[kRows] = {};
      const int e = threadIdx.x % kStageDims, l0 = threadIdx.x / kStageDims;
      const float* k_means = s.k_mean + (k0 + kc + l0) * d + e;  // this thread's first staged element
      for (int c0 = 0; chunk > 0 && c0 < d; c0 += kStageDims) {
        const int width = min(kStageDims, d - c0);
        float tile[kStageLoads];
#pragma unroll
        for (int j = 0; j < kStageLoads; ++j)  // every load in flight before the stores
          tile[j] = l0 + j * kStageRowsPerPass < chunk && e < width ? k_means[j * kStageRowsPerPass * d + c0] : 0.0f;
        __syncthreads();  // the previous tile's readers are done
#pragma unroll
        for (int j = 0; j < kStageLoads; ++j) stage[(l0 + j * kStageRowsPerPass) * kStageLd + e] = tile[j];
        __syncthreads();
        if (kb < nk)
          for (int c = 0; c < width; ++c) {
            const double km = stage[threadIdx.x * kStageLd + c];
#pragma unroll
            for (int ri = 0; ri < kRows; ++ri)
              dot[ri] = __dadd_rn(dot[ri], __dmul_rn(q_means[ri * d + c0 + c], km));
          }
      }
      if (kb < cap) {
        const bool smooth_key = kb < nk && s.k_smooth[k0 + kb];
#pragma unroll
        for (int ri = 0; ri < kRows; ++ri) probs[ri * cap + kb] = smooth_key ? __dmul_rn(s.scale, dot[ri]) : -INFINITY;
      }
    }
    __syncthreads();  // the scores are written; stage's bytes are free for order
    for (int ri = 0; ri < rows_here; ++ri) {
      const std::int64_t r = r0 + ri;
      std::uint8_t* keep = s.keep + r * nk;
      if (!s.q_smooth[r]) {  // a non-smooth query block attends to every key block
        for (int kb = threadIdx.x; kb < nk; kb += blockDim.x) keep[kb] = 1;
        if (threadIdx.x == 0) s.counts[r] = nk;
        continue;
      }
      double* prob = probs + ri * cap;
      if (threadIdx.x == 0) candidates = 0, taken = 0, counted = 0;  // thread 0 read the previous row's
      __syncthreads();  // the previous row is done with order and the counters
      double local_max = -INFINITY;
      int local_candidates = 0;
      for (int kb = threadIdx.x; kb < cap; kb += blockDim.x) {
        const bool candidate = !isinf(prob[kb]);
        if (kb < nk) keep[kb] = candidate ? 0 : 1;
        if (candidate) local_max = fmax(local_max, prob[kb]), ++local_candidates;
        order[kb] = kb;
      }
      atomicAdd(&candidates, local_candidates);
      const double m = block_reduce(local_max, true, red);
      double local_total = 0.0;
      for (int kb = threadIdx.x; kb < cap; kb += blockDim.x)
        if (!isinf(prob[kb])) local_total += prob[kb] = exp(prob[kb] - m);
      const double total = block_reduce(local_total, false, red);  // its syncs also publish prob and candidates
      for (int kb = threadIdx.x; kb < cap; kb += blockDim.x)
        prob[kb] = isinf(prob[kb]) ? -1.0 : prob[kb] / total;  // non-candidates and padding rank last
      __syncthreads();
      for (int width = 2; width <= cap; width <<= 1)
        for (int stride = width >> 1; stride > 0; stride >>= 1) {
          for (int i = threadIdx.x; i < cap; i += blockDim.x) {
            const int j = i ^ stride;
            if (j <= i) continue;
            const bool forward = (i & width) == 0;  // this run in ranking order, the other reversed
            const bool swap = forward ? ranks_before(prob[j], order[j], prob[i], order[i])
                                      : ranks_before(prob[i], order[i], prob[j], order[j]);
            if (swap) {
              const double p = prob[i];
              prob[i] = prob[j], prob[j] = p;
              const int o = order[i];
              order[i] = order[j], order[j] = o;
            }
          }
          __syncthreads();
        }
      const int n = candidates;
      int take = min(n, s.topk_blocks);
      if (s.cdfthreshd > 0) {
        // The fewest leading blocks whose P reaches cdfthreshd: the count of
        // ranked candidates whose exclusive prefix sum is still below it.
        const int per = (n + blockDim.x - 1) / blockDim.x, lo = min(n, threadIdx.x * per), hi = min(n, lo + per);
        double sum = 0.0;
        for (int i = lo; i < hi; ++i) sum += prob[i];
        chunk_sum[threadIdx.x] = sum;
        __syncthreads();
        if (threadIdx.x == 0) {
          double run = 0.0;
          for (int t = 0; t < static_cast<int>(blockDim.x); ++t) {
            const double here = chunk_sum[t];
            chunk_sum[t] = run;
            run += here;
          }
        }
        __syncthreads();
        double run = chunk_sum[threadIdx.x];
        int below = 0;
        for (int i = lo; i < hi; ++i) {
          below += run < s.cdfthreshd;
          run += prob[i];
        }
        atomicAdd(&taken, below);
        __syncthreads();
        take = taken;
      }
      // Ranked candidates first (P >= 0 > -1), so order[i < take] are
      // candidates; the bound keeps a NaN score's disorder inside the row.
      for (int i = threadIdx.x; i < take; i += blockDim.x)
        if (order[i] < nk) keep[order[i]] = 1;
      __syncthreads();
      // The count from the flags themselves (take + non-candidates unless a NaN
      // broke the ranking): offsets and indices always agree.
      int kept = 0;
      for (int kb = threadIdx.x; kb < nk; kb += blockDim.x) kept += keep[kb];
      atomicAdd(&counted, kept);
      __syncthreads();
      if (threadIdx.x == 0) s.counts[r] = counted;
    }
  }
}

}  // namespace

std::size_t sparge_select_smem_bytes(int key_blocks, int head_dim) {
  const int cap = pow2_at_least(key_blocks), rows = select_rows_per_cta(cap);
  // probs and q_means (doubles), then stage or order (the same bytes).
  return static_cast<std::size_t>(rows) * (static_cast<std::size_t>(cap) + head_dim) * sizeof(double) +
         std::max(kStageBytes, static_cast<std::size_t>(cap) * sizeof(int));
}

Diagnostics configure_sparge_select(std::size_t bytes) {
  for (const void* kernel : {reinterpret_cast<const void*>(select_kernel<1>), reinterpret_cast<const void*>(select_kernel<2>),
                             reinterpret_cast<const void*>(select_kernel<4>)})
    if (Diagnostics why = raise_dynamic_smem(kernel, bytes, "sparge_select"); !why.ok())
      return why;
  return {};
}

Diagnostics sparge_select(const SpargeSelect& s, StreamHandle stream) {
  auto st = static_cast<cudaStream_t>(stream);
  const int nq = num_blocks(s.seqlen, s.block_q), nk = num_blocks(s.seqlen, s.block_k);
  const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.heads_q * nq;
  const std::int64_t units = static_cast<std::int64_t>(s.batch) * s.heads_kv * nk;
  if (rows == 0) return {};
  if (s.dtype == DType::bf16)
    pool_kernel<__nv_bfloat16><<<stride_loop_grid(rows + units), kPoolThreads, 0, st>>>(s, rows, units);
  else
    pool_kernel<__half><<<stride_loop_grid(rows + units), kPoolThreads, 0, st>>>(s, rows, units);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "sparge pool launch"); !why.ok()) return why;
  const int cap = pow2_at_least(nk), per_cta = select_rows_per_cta(cap);
  const std::int64_t groups = static_cast<std::int64_t>(s.batch) * s.heads_q * ((nq + per_cta - 1) / per_cta);
  const std::size_t smem = sparge_select_smem_bytes(nk, s.head_dim);
  if (per_cta == 4)
    select_kernel<4><<<stride_loop_grid(groups), kSelectThreads, smem, st>>>(s, groups, cap);
  else if (per_cta == 2)
    select_kernel<2><<<stride_loop_grid(groups), kSelectThreads, smem, st>>>(s, groups, cap);
  else
    select_kernel<1><<<stride_loop_grid(groups), kSelectThreads, smem, st>>>(s, groups, cap);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "sparge select launch"); !why.ok()) return why;
  return csr_from_flags({s.keep, s.counts, s.offsets, s.indices, rows, nk}, stream);
}

}  // namespace attnkit::cuda
