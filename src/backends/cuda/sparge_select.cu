// sparge_attn's selection kernels (sparge_select.hpp). The `__*_rn`
// intrinsics keep nvcc from fusing a multiply and an add: the host computes
// these sums unfused, and the means, norms and scores must round alike.
#include <cuda_runtime.h>

#include <cmath>

#include "attnkit/core/block_sparse.hpp"
#include "backends/cuda/csr_lists.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/sparge_select.hpp"
#include "kernels/cuda/common/math.hpp"
#include "kernels/cuda/cuda_types.hpp"

namespace attnkit::cuda {
namespace {

constexpr int kMaxRows = 128;  // the larger of the two block sizes (SpargeSettings::kBlockQ)
// Shared rows padded by 2 elements (4 bytes: one bank), so the per-row norm
// loop (thread i reads row i) meets no bank conflicts.
constexpr int kRowPad = 2;
constexpr int kPoolThreads = 128;
constexpr int kSelectThreads = 256;

int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// One CTA per block (query blocks first, then key blocks): the mean of its
// rows (float, summed over rows in order, as pool_block) and whether its mean
// pairwise cosine similarity |sum of unit rows|^2 / n^2 exceeds simthreshd1.
template <class T>
__global__ void __launch_bounds__(kPoolThreads) pool_kernel(SpargeSelect s, std::int64_t rows_q, std::int64_t units) {
  __shared__ T x[kMaxRows * (kSpargeMaxHeadDim + kRowPad)];
  __shared__ double norm[kMaxRows];
  __shared__ double unit[kSpargeMaxHeadDim];
  const int d = s.head_dim, ld = d + kRowPad;
  const int nq = num_blocks(s.seqlen, s.block_q), nk = num_blocks(s.seqlen, s.block_k);
  for (std::int64_t u = blockIdx.x; u < rows_q + units; u += gridDim.x) {
    const bool is_q = u < rows_q;
    const std::int64_t local = is_q ? u : u - rows_q;
    const int blocks = is_q ? nq : nk, heads = is_q ? s.heads_q : s.heads_kv, size = is_q ? s.block_q : s.block_k;
    const int blk = static_cast<int>(local % blocks), h = static_cast<int>(local / blocks % heads),
              b = static_cast<int>(local / blocks / heads);
    const int lo = blk * size, n = min(s.seqlen, lo + size) - lo;
    const T* src = static_cast<const T*>(is_q ? s.q : s.k);
    const std::int64_t* st = is_q ? s.q_strides : s.k_strides;
    __syncthreads();  // the previous block's readers are done with x
    for (int e = threadIdx.x; e < n * d; e += blockDim.x) {
      const int i = e / d, c = e % d;
      x[i * ld + c] = src[b * st[0] + (lo + i) * st[1] + h * st[2] + c];
    }
    __syncthreads();
    float* mean = (is_q ? s.q_mean : s.k_mean) + local * d;
    const float nf = static_cast<float>(n);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
      float m = 0.0f;
      for (int i = 0; i < n; ++i) m = __fadd_rn(m, __fdiv_rn(to_float(x[i * ld + c]), nf));
      mean[c] = m;
    }
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      double sq = 0.0;
      for (int c = 0; c < d; ++c) {
        const double v = to_float(x[i * ld + c]);
        sq = __dadd_rn(sq, __dmul_rn(v, v));
      }
      norm[i] = sqrt(sq);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
      double acc = 0.0;
      for (int i = 0; i < n; ++i)
        if (norm[i] != 0.0) acc = __dadd_rn(acc, __ddiv_rn(to_float(x[i * ld + c]), norm[i]));  // zero rows add nothing
      unit[c] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double sq = 0.0;
      for (int c = 0; c < d; ++c) sq = __dadd_rn(sq, __dmul_rn(unit[c], unit[c]));
      const double sim = __ddiv_rn(sq, static_cast<double>(n) * n);
      (is_q ? s.q_smooth : s.k_smooth)[local] = sim > s.simthreshd1 ? 1 : 0;
    }
  }
}

// Whether (pa, ia) ranks before (pb, ib): higher probability, ties by the lower block index.
__device__ __forceinline__ bool ranks_before(double pa, int ia, double pb, int ib) {
  return pa > pb || (pa == pb && ia < ib);
}

// One CTA per query block (row r of the CSR lists): scores against the key
// blocks of its kv head, P = softmax over the smooth ones, sorted by P
// descending (a bitonic network over `cap` >= key blocks entries: data-
// independent accesses, in bounds whatever the values), the kept flags and
// their count. Mirrors sparge_select (sparse/sparge.cpp).
__global__ void __launch_bounds__(kSelectThreads) select_kernel(SpargeSelect s, std::int64_t rows, int cap) {
  extern __shared__ double smem[];
  double* prob = smem;                                  // [cap]
  int* order = reinterpret_cast<int*>(prob + cap);      // [cap]
  float* qm = reinterpret_cast<float*>(order + cap);    // [head_dim]
  __shared__ double red[kSelectThreads / 32];
  __shared__ double chunk_sum[kSelectThreads];
  __shared__ int candidates, taken, counted;
  const int d = s.head_dim, nq = num_blocks(s.seqlen, s.block_q), nk = num_blocks(s.seqlen, s.block_k);
  const int group = s.heads_q / s.heads_kv;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int h = static_cast<int>(r / nq % s.heads_q), b = static_cast<int>(r / nq / s.heads_q);
    const std::int64_t k0 = (static_cast<std::int64_t>(b) * s.heads_kv + h / group) * nk;
    std::uint8_t* keep = s.keep + r * nk;
    if (!s.q_smooth[r]) {  // a non-smooth query block attends to every key block
      for (int kb = threadIdx.x; kb < nk; kb += blockDim.x) keep[kb] = 1;
      if (threadIdx.x == 0) s.counts[r] = nk;
      continue;
    }
    __syncthreads();  // the previous row is done with the shared arrays
    for (int c = threadIdx.x; c < d; c += blockDim.x) qm[c] = s.q_mean[r * d + c];
    if (threadIdx.x == 0) candidates = 0, taken = 0, counted = 0;
    __syncthreads();
    // Scores: -inf for a non-smooth key block (kept regardless, outside the softmax).
    double local_max = -INFINITY;
    int local_candidates = 0;
    for (int kb = threadIdx.x; kb < cap; kb += blockDim.x) {
      double score = -INFINITY;
      if (kb < nk && s.k_smooth[k0 + kb]) {
        const float* km = s.k_mean + (k0 + kb) * d;
        double dot = 0.0;
        for (int c = 0; c < d; ++c) dot = __dadd_rn(dot, __dmul_rn(static_cast<double>(qm[c]), static_cast<double>(km[c])));
        score = __dmul_rn(s.scale, dot);
      }
      const bool candidate = !isinf(score);
      if (kb < nk) keep[kb] = candidate ? 0 : 1;
      if (candidate) local_max = fmax(local_max, score), ++local_candidates;
      prob[kb] = score;
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

}  // namespace

std::size_t sparge_select_smem_bytes(int key_blocks, int head_dim) {
  const std::size_t cap = static_cast<std::size_t>(pow2_at_least(key_blocks));
  return cap * (sizeof(double) + sizeof(int)) + static_cast<std::size_t>(head_dim) * sizeof(float);
}

Diagnostics configure_sparge_select(std::size_t bytes) {
  return check_cuda(cudaFuncSetAttribute(select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)),
                    "cudaFuncSetAttribute(sparge_select shared memory)");
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
  select_kernel<<<stride_loop_grid(rows), kSelectThreads, sparge_select_smem_bytes(nk, s.head_dim), st>>>(
      s, rows, pow2_at_least(nk));
  if (Diagnostics why = check_cuda(cudaGetLastError(), "sparge select launch"); !why.ok()) return why;
  return csr_from_flags({s.keep, s.counts, s.offsets, s.indices, rows, nk}, stream);
}

}  // namespace attnkit::cuda
