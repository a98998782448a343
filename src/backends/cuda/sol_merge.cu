// sol_attn's merge of its two parts into the caller's out (sol_merge.hpp).
// Memory-bound: each thread merges kVec consecutive elements of one (token,
// head) row, with 16-byte loads and stores where the rows allow them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "attnkit/core/lse_merge.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/sol_merge.hpp"
#include "kernels/cuda/cuda_types.hpp"

namespace attnkit::cuda {
namespace {

constexpr int kThreads = 256;

// kVec elements a thread: 8 (one 16-byte load of each part) when the rows are
// whole vectors, else 1.
template <class T, int kVec, bool kVecOut>
__global__ void __launch_bounds__(kThreads) merge_kernel(SolMerge m) {
  const int per_row = m.dim / kVec;
  const std::int64_t rows = static_cast<std::int64_t>(m.batch) * m.seqlen * m.heads;
  const std::int64_t work = rows * per_row;
  for (std::int64_t u = blockIdx.x * static_cast<std::int64_t>(kThreads) + threadIdx.x; u < work;
       u += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t row = u / per_row;  // (b * seqlen + i) * heads + h
    const int d0 = static_cast<int>(u % per_row) * kVec;
    const LseWeights w = lse_merge_weights(m.lse_pooled[row], m.lse_exact[row]);
    const std::int64_t src = row * m.dim + d0;
    T e[kVec], p[kVec];
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(e) = *reinterpret_cast<const uint4*>(static_cast<const T*>(m.exact) + src);
      *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(static_cast<const T*>(m.pooled) + src);
    } else {
      e[0] = static_cast<const T*>(m.exact)[src];
      p[0] = static_cast<const T*>(m.pooled)[src];
    }
    const std::int64_t h = row % m.heads, bi = row / m.heads, i = bi % m.seqlen, b = bi / m.seqlen;
    const std::int64_t dst = b * m.out_strides[0] + i * m.out_strides[1] + h * m.out_strides[2] + d0;
    float r[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) r[j] = w.a * to_float(p[j]) + w.b * to_float(e[j]);
    if constexpr (kVecOut) {  // 16-bit out, 16-byte aligned: one store
      T o[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) o[j] = from_float<T>(r[j]);
      *reinterpret_cast<uint4*>(static_cast<T*>(m.out) + dst) = *reinterpret_cast<const uint4*>(o);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) store_float(m.out, m.out_dtype, dst + j, r[j]);
    }
  }
}

template <class T>
Diagnostics queue(const SolMerge& m, cudaStream_t st) {
  const std::int64_t rows = static_cast<std::int64_t>(m.batch) * m.seqlen * m.heads;
  const bool vec_rows = m.dim % 8 == 0 && aligned_16(m.exact) && aligned_16(m.pooled);
  const bool vec_out = vec_rows && m.out_dtype == m.dtype && rows_aligned_16(m.out, m.out_strides);
  if (vec_out)
    merge_kernel<T, 8, true><<<stride_loop_grid((rows * (m.dim / 8) + kThreads - 1) / kThreads), kThreads, 0, st>>>(m);
  else if (vec_rows)
    merge_kernel<T, 8, false><<<stride_loop_grid((rows * (m.dim / 8) + kThreads - 1) / kThreads), kThreads, 0, st>>>(m);
  else
    merge_kernel<T, 1, false><<<stride_loop_grid((rows * m.dim + kThreads - 1) / kThreads), kThreads, 0, st>>>(m);
  return check_cuda(cudaGetLastError(), "sol merge launch");
}

}  // namespace

Diagnostics sol_merge(const SolMerge& m, StreamHandle stream) {
  if (m.batch == 0 || m.seqlen == 0 || m.heads == 0 || m.dim == 0) return {};
  auto st = static_cast<cudaStream_t>(stream);
  if (m.dtype == DType::bf16) return queue<__nv_bfloat16>(m, st);
  return queue<__half>(m, st);
}

}  // namespace attnkit::cuda
