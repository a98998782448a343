// hybrid_window_attn_h3's linear branch and combine kernels (hybrid_linear.hpp).
// The feature map and the combine are sparse/hybrid_window.hpp's, which the
// CPU path runs too (in double; these sum in fp32, chunk by chunk).
#include <cuda_runtime.h>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/sparse/hybrid_window.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/hybrid_linear.hpp"
#include "kernels/cuda/cuda_types.hpp"

namespace attnkit::cuda {
namespace {

constexpr int kScanThreads = 256;

template <class T>
__device__ __forceinline__ float feature(const T* x, const std::int64_t* st, int b, std::int64_t i, int h, int e) {
  return sparse::linear_feature(to_float(x[b * st[0] + i * st[1] + h * st[2] + e]));
}
template <class T>
__device__ __forceinline__ float element(const T* x, const std::int64_t* st, int b, std::int64_t i, int h, int e) {
  return to_float(x[b * st[0] + i * st[1] + h * st[2] + e]);
}

// Both kernels walk a chunk's tokens in order, each token's arithmetic
// depending on the last. The chunk-state kernel loads the rows of kStage
// tokens together first (every thread issuing its column's loads at once), so
// that a token's global loads are off the serial path: 1.98 -> 1.55 ms at
// 30720 tokens, 24 heads, d128 (768 CTAs of 960 tokens; H200, 2026-12-03).
// The query kernel keeps one token a step: staged the same way it took 4.30 ms
// instead of 3.04 (224 registers, 2 CTAs an SM instead of 3, and two barriers
// a causal token). The sums keep their order.
constexpr int kStage = 16;

__device__ __forceinline__ float4 row4(const float* row, int c) {  // row + c 16-byte aligned
  return *reinterpret_cast<const float4*>(row + c);
}
// acc[c] += row[c] * x for every c, in order.
template <int D>
__device__ __forceinline__ void add_scaled_row(float (&acc)[D], const float* row, float x) {
#pragma unroll
  for (int c = 0; c < D; c += 4) {
    const float4 f = row4(row, c);
    acc[c] += f.x * x;
    acc[c + 1] += f.y * x;
    acc[c + 2] += f.z * x;
    acc[c + 3] += f.w * x;
  }
}

// Step 1. One CTA per (b, kv head, chunk), one thread per column e of S
// (D accumulators in registers): S[c][e] and z[e] over the chunk's keys in order.
template <class T, int D>
__global__ void __launch_bounds__(D) chunk_state_kernel(HybridLinear a) {
  static_assert(D % 4 == 0 && D >= kStage);
  __shared__ __align__(16) float fk[kStage][D];
  __shared__ float sv[kStage][D];  // v[j][e], read by thread e alone
  const int e = threadIdx.x;
  const std::int64_t u = blockIdx.x;  // ((b * heads_kv) + hk) * chunks + chunk
  const int chunk = static_cast<int>(u % a.chunks), hk = static_cast<int>(u / a.chunks % a.heads_kv),
            b = static_cast<int>(u / a.chunks / a.heads_kv);
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  float acc[D];
#pragma unroll
  for (int c = 0; c < D; ++c) acc[c] = 0.f;
  float z = 0.f;
  const std::int64_t j0 = static_cast<std::int64_t>(chunk) * a.chunk,
                     j1 = min(static_cast<std::int64_t>(a.seqlen), j0 + a.chunk);
  for (std::int64_t s0 = j0; s0 < j1; s0 += kStage) {
    const int n = static_cast<int>(min(static_cast<std::int64_t>(kStage), j1 - s0));
    __syncthreads();  // the previous stage's reads of fk are done
#pragma unroll
    for (int t = 0; t < kStage; ++t) {
      if (t < n) {
        fk[t][e] = feature(k, a.k_strides, b, s0 + t, hk, e);
        sv[t][e] = element(v, a.v_strides, b, s0 + t, hk, e);
      }
    }
    __syncthreads();
    for (int t = 0; t < n; ++t) {
      add_scaled_row(acc, fk[t], sv[t][e]);
      z += fk[t][e];
    }
  }
  float* s = a.state + u * (D * D + D);
#pragma unroll
  for (int c = 0; c < D; ++c) s[c * D + e] = acc[c];
  s[D * D + e] = z;
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

// Step 3. One CTA per (b, query head, chunk), one thread per column e: the
// chunk's queries in order, causal adding key i to the running state first.
template <class T, int D>
__global__ void __launch_bounds__(D) query_kernel(HybridLinear a) {
  __shared__ __align__(16) float fq[D];
  __shared__ __align__(16) float fk[D];
  __shared__ __align__(16) float z[D];
  const int e = threadIdx.x;
  const std::int64_t u = blockIdx.x;  // ((b * heads_q) + h) * chunks + chunk
  const int chunk = static_cast<int>(u % a.chunks), h = static_cast<int>(u / a.chunks % a.heads_q),
            b = static_cast<int>(u / a.chunks / a.heads_q), hk = h / (a.heads_q / a.heads_kv);
  const float* s =
      a.state + ((static_cast<std::int64_t>(b) * a.heads_kv + hk) * a.chunks + (a.causal ? chunk : 0)) * (D * D + D);
  float acc[D];
#pragma unroll
  for (int c = 0; c < D; ++c) acc[c] = s[c * D + e];
  z[e] = s[D * D + e];
  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  const T* window = static_cast<const T*>(a.window);
  T* out = static_cast<T*>(a.out);
  const std::int64_t i0 = static_cast<std::int64_t>(chunk) * a.chunk,
                     i1 = min(static_cast<std::int64_t>(a.seqlen), i0 + a.chunk);
  for (std::int64_t i = i0; i < i1; ++i) {
    __syncthreads();  // the previous query's reads of fq, fk, z are done
    fq[e] = feature(q, a.q_strides, b, i, h, e);
    if (a.causal) {
      fk[e] = feature(k, a.k_strides, b, i, hk, e);
      z[e] += fk[e];
    }
    __syncthreads();
    if (a.causal) add_scaled_row(acc, fk, element(v, a.v_strides, b, i, hk, e));
    float num = 0.f, den = 0.f;
#pragma unroll
    for (int c = 0; c < D; c += 4) {
      const float4 f = row4(fq, c), w = row4(z, c);
      num += f.x * acc[c];
      den += f.x * w.x;
      num += f.y * acc[c + 1];
      den += f.y * w.y;
      num += f.z * acc[c + 2];
      den += f.z * w.z;
      num += f.w * acc[c + 3];
      den += f.w * w.w;
    }
    const float g = a.gate[gate_offset(a.layout, a.gate_strides, b, h, i, 0)];
    const float soft = element(window, a.window_strides, b, i, h, e);
    out[b * a.out_strides[0] + i * a.out_strides[1] + h * a.out_strides[2] + e] =
        from_float<T>(sparse::hybrid_combine(soft, g, num, den));
  }
}

template <class T, int D>
Diagnostics queue(const HybridLinear& a, cudaStream_t st) {
  const unsigned kv_units = static_cast<unsigned>(static_cast<std::int64_t>(a.batch) * a.heads_kv * a.chunks);
  const unsigned q_units = static_cast<unsigned>(static_cast<std::int64_t>(a.batch) * a.heads_q * a.chunks);
  chunk_state_kernel<T, D><<<kv_units, D, 0, st>>>(a);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "hybrid_window chunk state launch"); !why.ok()) return why;
  const dim3 scan_grid(static_cast<unsigned>(static_cast<std::int64_t>(a.batch) * a.heads_kv),
                       static_cast<unsigned>((D * D + D + kScanThreads - 1) / kScanThreads));
  scan_state_kernel<<<scan_grid, kScanThreads, 0, st>>>(a);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "hybrid_window state scan launch"); !why.ok()) return why;
  query_kernel<T, D><<<q_units, D, 0, st>>>(a);
  return check_cuda(cudaGetLastError(), "hybrid_window linear branch launch");
}

template <class T>
Diagnostics queue_dim(const HybridLinear& a, cudaStream_t st) {
  if (a.head_dim == 64) return queue<T, 64>(a, st);
  return queue<T, 128>(a, st);
}

}  // namespace

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
