// sol_attn's routing kernels (sol_route.hpp). The rule and its arithmetic
// are sparse/sol_rule.hpp's, which the host runs too; the loops here visit
// queries, keys, dims and tiles in the host's order (backends/sparse/sol_routing.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "attnkit/core/block_sparse.hpp"
#include "backends/cuda/csr_lists.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/sol_route.hpp"
#include "kernels/cuda/cuda_types.hpp"

namespace attnkit::cuda {
namespace {

using sparse::kSolBlock;

constexpr int kThreads = 256;
constexpr int kRows = 8;                  // CSR rows (query blocks) per routing CTA: a warp each
constexpr int kChunk = kThreads / kRows;  // key tiles staged at a time: a lane each
static_assert(kChunk == 32, "the routing kernel gives each row a warp and each staged tile a lane");
constexpr int kPoolThreads = 128;
// Loads issued together before their (ordered) sums: as one loop nvcc kept
// one query load in flight (each term's division branches) and about two k_mean loads.
constexpr int kQueryBatch = 16, kStageBatch = 8;
// The routing CTA keeps its rows' scores in shared memory while its bytes stay
// within this (every sm_80+ GPU opts in to at least 99 KB a CTA), else in s.z.
constexpr std::size_t kScoresInSharedLimit = 96 << 10;

// The routing CTA's dynamic shared memory: its rows' query means, their scores
// (when kept there) and one chunk of mean keys in rows of d + 1 floats.
constexpr std::size_t route_smem_bytes(int d, int tiles, bool scores_in_shared) {
  return sizeof(double) * kRows * (static_cast<std::size_t>(d) + (scores_in_shared ? tiles : 0)) +
         sizeof(float) * kChunk * (static_cast<std::size_t>(d) + 1);
}
// What the routing kernel is configured for: the most either variant launches with.
constexpr std::size_t kRouteSmemMax = std::max(kScoresInSharedLimit, route_smem_bytes(kSolMaxHeadDim, 0, false));

// One CTA per (b, tile c, kv head h): the mean of the tile's keys (fp32, for
// the routing; and in T for the pooled-key kernel) and of its values (in T);
// each thread one dim, summing the tile's rows in order. (0.16 ms at 30720
// tokens, 24 kv heads, d 128 on an H200; one loop for a dim's key and value
// sums with 16 loads in flight measured 0.17 ms.)
template <class T>
__global__ void __launch_bounds__(kPoolThreads) pool_kv_kernel(SolRoute s, int tiles) {
  const int d = s.head_dim, dv = s.head_dim_v;
  const std::int64_t units = static_cast<std::int64_t>(s.batch) * tiles * s.heads_kv;
  const T* k = static_cast<const T*>(s.k);
  const T* v = static_cast<const T*>(s.v);
  T* k_pooled = static_cast<T*>(s.k_pooled);
  T* v_pooled = static_cast<T*>(s.v_pooled);
  for (std::int64_t u = blockIdx.x; u < units; u += gridDim.x) {  // u = (b * tiles + c) * heads_kv + h
    const int h = static_cast<int>(u % s.heads_kv), c = static_cast<int>(u / s.heads_kv % tiles),
              b = static_cast<int>(u / s.heads_kv / tiles);
    const int lo = c * kSolBlock, hi = min(s.seqlen, lo + kSolBlock), n = hi - lo;
    for (int x = threadIdx.x; x < d + dv; x += blockDim.x) {
      const bool is_k = x < d;
      const int e = is_k ? x : x - d;
      const T* src = is_k ? k : v;
      const std::int64_t* st = is_k ? s.k_strides : s.v_strides;
      const std::int64_t base = b * st[0] + h * st[2] + e;
      double sum = 0.0;
      for (int j = lo; j < hi; ++j) sum = unfused_add(sum, static_cast<double>(to_float(src[base + j * st[1]])));
      const float mean = sparse::sol_tile_mean(sum, n);
      if (is_k) {
        s.k_mean[u * d + e] = mean;
        k_pooled[u * d + e] = from_float<T>(mean);
      } else {
        v_pooled[u * dv + e] = from_float<T>(mean);
      }
    }
  }
}

// One CTA per kRows CSR rows of one (b, kv head hk): rows r = (b * heads_q +
// h) * nq + qb are, for the heads h of hk's group, the contiguous run
// r = (b * heads_kv + hk) * group * nq + (h - hk * group) * nq + qb, and all
// score against the same mean keys. The CTA computes its rows' mean queries
// (a thread per (row, dim), the block's queries in order), stages the mean
// keys a chunk of kChunk tiles at a time (coalesced; rows of d + 1 floats, so
// lane c reading tile c is conflict free), scores each chunk (warp j row j,
// lane c tile c, its dims in order), then per row the cut (one lane, the
// tiles in order: the host's sums), the kept flags and their count (the
// row's warp). At 30720 tokens, 24 heads, d 128 on an H200: 0.48 ms; one
// CTA per row, thread c reading tile c's mean key from global memory
// (heads_kv * d floats apart), took 3.55 ms. Scores also go to s.z; with
// kScoresInShared the cut reads the shared copy.
template <class T, bool kScoresInShared>
__global__ void __launch_bounds__(kThreads) route_kernel(SolRoute s, int nq, int tiles) {
  extern __shared__ double smem[];
  const int d = s.head_dim, group = s.heads_q / s.heads_kv, head_rows = group * nq;
  double* q_mean = smem;                  // [kRows][d]
  double* z_shared = smem + kRows * d;    // [kRows][tiles]
  float* k_chunk = reinterpret_cast<float*>(z_shared + (kScoresInShared ? kRows * tiles : 0));  // [kChunk][d + 1]
  const int parts = num_blocks(head_rows, kRows);
  const std::int64_t units = static_cast<std::int64_t>(s.batch) * s.heads_kv * parts;
  const std::int64_t tile_stride = static_cast<std::int64_t>(s.heads_kv) * d;  // k_mean's, between tiles
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* q = static_cast<const T*>(s.q);
  for (std::int64_t u = blockIdx.x; u < units; u += gridDim.x) {  // u = (b * heads_kv + hk) * parts + part
    const std::int64_t bk = u / parts;
    const int b = static_cast<int>(bk / s.heads_kv), hk = static_cast<int>(bk % s.heads_kv);
    const int first = static_cast<int>(u % parts) * kRows, n_rows = min(kRows, head_rows - first);
    const std::int64_t r0 = bk * head_rows + first;  // row j of the CTA: r0 + j, (h, qb) from first + j
    // The previous unit last read q_mean and k_chunk before its final barrier.
    for (int p = threadIdx.x; p < n_rows * d; p += kThreads) {
      const int j = p / d, x = p - j * d, h = hk * group + (first + j) / nq, qb = (first + j) % nq;
      const int lo = qb * kSolBlock, hi = min(s.seqlen, lo + kSolBlock);
      const std::int64_t at = b * s.q_strides[0] + h * s.q_strides[2] + x;
      double m = 0.0;
      int i = lo;
      for (; i + kQueryBatch <= hi; i += kQueryBatch) {  // the batch's loads first, then its terms in order
        float qi[kQueryBatch];
#pragma unroll
        for (int t = 0; t < kQueryBatch; ++t) qi[t] = to_float(q[at + (i + t) * s.q_strides[1]]);
#pragma unroll
        for (int t = 0; t < kQueryBatch; ++t) m = unfused_add(m, sparse::sol_q_mean_term(qi[t], hi - lo));
      }
      for (; i < hi; ++i) m = unfused_add(m, sparse::sol_q_mean_term(to_float(q[at + i * s.q_strides[1]]), hi - lo));
      q_mean[p] = m;  // p = j * d + x
    }
    const float* k_mean = s.k_mean + (static_cast<std::int64_t>(b) * tiles * s.heads_kv + hk) * d;  // tile 0's
    for (int c0 = 0; c0 < tiles; c0 += kChunk) {
      const int n_tiles = min(kChunk, tiles - c0);
      for (int e0 = threadIdx.x; e0 < n_tiles * d; e0 += kThreads * kStageBatch) {  // e = t * d + x: tile t, dim x
        float kx[kStageBatch];
#pragma unroll
        for (int i = 0; i < kStageBatch; ++i) {
          const int e = e0 + i * kThreads, t = e / d;
          kx[i] = e < n_tiles * d ? k_mean[(c0 + t) * tile_stride + (e - t * d)] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < kStageBatch; ++i) {
          const int e = e0 + i * kThreads, t = e / d;
          if (e < n_tiles * d) k_chunk[t * (d + 1) + (e - t * d)] = kx[i];
        }
      }
      __syncthreads();  // the chunk (and the first time the query means) staged
      if (warp < n_rows && lane < n_tiles) {
        const double z = sparse::sol_proxy_score(q_mean + warp * d, k_chunk + lane * (d + 1), d, s.scale);
        if constexpr (kScoresInShared) z_shared[warp * tiles + c0 + lane] = z;
        s.z[(r0 + warp) * tiles + c0 + lane] = z;
      }
      __syncthreads();  // the chunk scored: k_chunk is free, and after the last one every score is written
    }
    if (warp < n_rows) {
      const std::int64_t r = r0 + warp;
      const double* z = kScoresInShared ? z_shared + warp * tiles : s.z + r * tiles;
      const int qb = (first + warp) % nq;
      double cut = 0.0;
      if (lane == 0) cut = sparse::sol_route_cut(s.rule, z, tiles);
      cut = __shfl_sync(0xffffffffu, cut, 0);
      int kept = 0;
      for (int c0 = 0; c0 < tiles; c0 += 32) {
        const int c = c0 + lane;
        const bool keep = c < tiles && sparse::sol_keeps(s.rule, z[c], cut, c, qb, s.seqlen);
        if (c < tiles) s.keep[r * tiles + c] = keep ? 1 : 0;
        kept += __popc(__ballot_sync(0xffffffffu, keep));
      }
      if (lane == 0) s.counts[r] = kept;
    }
  }
}

template <class T>
Diagnostics queue(const SolRoute& s, cudaStream_t st) {
  const int nq = num_blocks(s.seqlen, kSolBlock), tiles = num_blocks(s.seqlen, kSolBlock);
  const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.heads_q * nq;
  const std::int64_t units = static_cast<std::int64_t>(s.batch) * tiles * s.heads_kv;
  pool_kv_kernel<T><<<stride_loop_grid(units), kPoolThreads, 0, st>>>(s, tiles);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "sol tile means launch"); !why.ok()) return why;
  const std::int64_t ctas = static_cast<std::int64_t>(s.batch) * s.heads_kv *
                            num_blocks(s.heads_q / s.heads_kv * nq, kRows);
  const bool scores_in_shared = route_smem_bytes(s.head_dim, tiles, true) <= kScoresInSharedLimit;
  const std::size_t bytes = route_smem_bytes(s.head_dim, tiles, scores_in_shared);
  auto* kernel = scores_in_shared ? route_kernel<T, true> : route_kernel<T, false>;  // configure_sol_route() raised its limit
  kernel<<<stride_loop_grid(ctas), kThreads, bytes, st>>>(s, nq, tiles);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "sol routing launch"); !why.ok()) return why;
  return csr_from_flags({s.keep, s.counts, s.offsets, s.indices, rows, tiles}, st);
}

}  // namespace

Diagnostics configure_sol_route() {
  // One value for every shape (the most either variant launches with): plans of other shapes never lower it.
  for (auto* kernel : {route_kernel<__nv_bfloat16, true>, route_kernel<__nv_bfloat16, false>, route_kernel<__half, true>,
                       route_kernel<__half, false>})
    if (Diagnostics why = raise_dynamic_smem(reinterpret_cast<const void*>(kernel), kRouteSmemMax, "sol routing");
        !why.ok())
      return why;
  return {};
}

Diagnostics sol_route(const SolRoute& s, StreamHandle stream) {
  if (s.batch == 0 || s.seqlen == 0 || s.heads_q == 0) return {};
  auto st = static_cast<cudaStream_t>(stream);
  if (s.dtype == DType::bf16) return queue<__nv_bfloat16>(s, st);
  return queue<__half>(s, st);
}

}  // namespace attnkit::cuda
