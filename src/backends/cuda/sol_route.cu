// sol_attn's routing kernels (sol_route.hpp). The rule and its arithmetic
// are sparse/sol_rule.hpp's, which the host runs too; the loops here visit
// queries, keys, dims and tiles in the host's order (backends/sparse/sol_routing.cpp).
#include <cuda_runtime.h>

#include <algorithm>

#include "attnkit/core/block_sparse.hpp"
#include "backends/cuda/csr_lists.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/sol_route.hpp"
#include "kernels/cuda/cuda_types.hpp"

namespace attnkit::cuda {
namespace {

using sparse::kSolBlock;

constexpr int kThreads = 256;
constexpr int kPoolThreads = 128;
constexpr std::int64_t kMaxGrid = 1 << 16;  // grid-stride loops beyond

unsigned grid_for(std::int64_t work) { return static_cast<unsigned>(std::clamp<std::int64_t>(work, 1, kMaxGrid)); }

// One CTA per (b, tile c, kv head h): the mean of the tile's keys (fp32, for
// the routing; and in T for the pooled-key kernel) and of its values (in T);
// each thread one dim, summing the tile's rows in order.
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

// One CTA per CSR row r = (b, h, query block qb): the block's mean query
// (each thread one dim, the block's queries in order), the proxy score of
// every tile (each thread a tile, its dims in order), the cut (one thread,
// the tiles in order: the host's sums), the kept flags and their count.
template <class T>
__global__ void __launch_bounds__(kThreads) route_kernel(SolRoute s, std::int64_t rows, int nq, int tiles) {
  __shared__ double q_mean[kSolMaxHeadDim];
  __shared__ double cut;
  __shared__ int kept;
  const int d = s.head_dim, group = s.heads_q / s.heads_kv;
  const T* q = static_cast<const T*>(s.q);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int qb = static_cast<int>(r % nq), h = static_cast<int>(r / nq % s.heads_q),
              b = static_cast<int>(r / nq / s.heads_q), hk = h / group;
    const int lo = qb * kSolBlock, hi = min(s.seqlen, lo + kSolBlock);
    __syncthreads();  // the previous row is done with the shared values
    const std::int64_t q_base = b * s.q_strides[0] + h * s.q_strides[2];
    for (int x = threadIdx.x; x < d; x += blockDim.x) {
      double m = 0.0;
      for (int i = lo; i < hi; ++i)
        m = unfused_add(m, sparse::sol_q_mean_term(to_float(q[q_base + i * s.q_strides[1] + x]), hi - lo));
      q_mean[x] = m;
    }
    if (threadIdx.x == 0) kept = 0;
    __syncthreads();
    double* z = s.z + r * tiles;
    for (int c = threadIdx.x; c < tiles; c += blockDim.x)
      z[c] = sparse::sol_proxy_score(q_mean, s.k_mean + ((static_cast<std::int64_t>(b) * tiles + c) * s.heads_kv + hk) * d,
                                     d, s.scale);
    __syncthreads();  // z (global) is visible to the block
    if (threadIdx.x == 0) cut = sparse::sol_route_cut(s.rule, z, tiles);
    __syncthreads();
    int mine = 0;
    for (int c = threadIdx.x; c < tiles; c += blockDim.x) {
      const bool k = sparse::sol_keeps(s.rule, z[c], cut, c, qb, s.seqlen);
      s.keep[r * tiles + c] = k ? 1 : 0;
      mine += k;
    }
    atomicAdd(&kept, mine);
    __syncthreads();
    if (threadIdx.x == 0) s.counts[r] = kept;
  }
}

template <class T>
Diagnostics queue(const SolRoute& s, cudaStream_t st) {
  const int nq = num_blocks(s.seqlen, kSolBlock), tiles = num_blocks(s.seqlen, kSolBlock);
  const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.heads_q * nq;
  const std::int64_t units = static_cast<std::int64_t>(s.batch) * tiles * s.heads_kv;
  pool_kv_kernel<T><<<grid_for(units), kPoolThreads, 0, st>>>(s, tiles);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "sol tile means launch"); !why.ok()) return why;
  route_kernel<T><<<grid_for(rows), kThreads, 0, st>>>(s, rows, nq, tiles);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "sol routing launch"); !why.ok()) return why;
  return csr_from_flags({s.keep, s.counts, s.offsets, s.indices, rows, tiles}, st);
}

}  // namespace

Diagnostics sol_route(const SolRoute& s, StreamHandle stream) {
  if (s.batch == 0 || s.seqlen == 0 || s.heads_q == 0) return {};
  auto st = static_cast<cudaStream_t>(stream);
  if (s.dtype == DType::bf16) return queue<__nv_bfloat16>(s, st);
  return queue<__half>(s, st);
}

}  // namespace attnkit::cuda
