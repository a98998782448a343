#pragma once
// What a CUDA kernel does with device metadata that disagrees with the
// problem (params.hpp says how it is detected): the CTAs of a call agree that
// it lies from one barrier at their start, and each writes NaN over its part
// of the output and LSE instead of computing. Shared by fa2, fa3 and
// cuda_sdpa; docs/reliability.md and `attnkit explain AK1108` describe it.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_types.hpp"
#include "kernels/cuda/params.hpp"

namespace attnkit::cuda {

// True on every thread of the CTA when any sequence's metadata breaks the
// host's rules (metadata_share_ok); a barrier of the whole CTA (it replaces a
// kernel's first __syncthreads). The shares are a few loads of cu_seqlens /
// seqlens_k per thread, issued beside the CTA's own sequence_span reads.
__device__ __forceinline__ bool metadata_barrier(const AttnParams& p, int threads) {
  return __syncthreads_or(!metadata_share_ok(p, static_cast<int>(threadIdx.x), threads)) != 0;
}
// The same where no barrier is needed otherwise: problems without such
// metadata (dense BSHD / BHSD) skip it.
__device__ __forceinline__ bool call_lies(const AttnParams& p, int threads) {
  if (p.layout != Layout::thd && p.page_size == 0) return false;  // uniform
  return metadata_barrier(p, threads);
}

// NaN over part `part` of `parts` of every output row the tensors hold (the
// packed rows for THD, batch x seqlen_q otherwise), all heads, O and LSE; the
// CTA's threads share it. The parts of all CTAs cover the whole output, so a
// call that lies returns NaN everywhere, including rows no sequence names.
// The linear number of this CTA in a 3-D grid, and the grid's CTAs.
__device__ __forceinline__ long long cta_index() {
  return blockIdx.x + static_cast<long long>(gridDim.x) * (blockIdx.y + static_cast<long long>(gridDim.y) * blockIdx.z);
}
__device__ __forceinline__ long long cta_count() {
  return static_cast<long long>(gridDim.x) * gridDim.y * gridDim.z;
}

template <class T>
__device__ void poison_call_part(const AttnParams& p, long long part, long long parts, int tid, int threads) {
  const bool packed = p.layout == Layout::thd;
  const std::int64_t rows = packed ? p.rows_q : static_cast<std::int64_t>(p.batch) * p.seqlen_q;
  const std::int64_t r0 = rows * part / parts, r1 = rows * (part + 1) / parts;
  const int dv = p.head_dim_v;
  const std::int64_t per_row = static_cast<std::int64_t>(p.heads_q) * dv;
  const T nan = from_float<T>(NAN);
  for (std::int64_t i = tid; i < (r1 - r0) * per_row; i += threads) {
    const std::int64_t r = r0 + i / per_row;
    const int h = static_cast<int>(i % per_row) / dv, d = static_cast<int>(i % dv);
    const int b = packed ? 0 : static_cast<int>(r / p.seqlen_q);
    const std::int64_t row = packed ? r : r % p.seqlen_q;
    const HeadRows o = head_rows(p.layout, p.out_strides, b, h, 0);
    static_cast<T*>(p.out)[o.offset + row * o.row_stride + d] = nan;
    if (d == 0 && p.lse != nullptr) p.lse[lse_offset(p.layout, p.lse_strides, b, h, row, 0)] = NAN;
  }
}

}  // namespace attnkit::cuda
