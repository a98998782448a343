#pragma once
// cuda_sdpa: the generic CUDA attention kernel. Any head dim up to 256 (qk and
// v may differ), fp32 / fp16 / bf16 inputs with fp32 arithmetic, every mask the
// Problem knows (causal, window, block-sparse, custom), paged KV, varlen, GQA,
// softcap, sinks and LSE. It exists so every valid Problem has a CUDA path; it
// favours clarity over speed (fp32 FMA, no tensor cores).
//
// A CTA of kRows warps computes kRows consecutive query rows of one (batch,
// head), one row per warp. Keys stream through shared memory kKeys at a time:
//   s_j = softcap(scale * q.k_j) (or -inf when hidden),
//   m' = max(m, max_j s_j),  l = l e^(m - m') + sum_j e^(s_j - m'),  acc = acc e^(m - m') + sum_j e^(s_j - m') v_j
// and at the end O = acc / (l + e^(sink - m)), LSE = m + ln(l + e^(sink - m)).
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/common/lying_metadata.hpp"
#include "kernels/cuda/cuda_types.hpp"
#include "kernels/cuda/params.hpp"

namespace attnkit::cuda {

struct SdpaShape {
  static constexpr int kRows = 8;   // query rows (= warps) per CTA
  static constexpr int kKeys = 16;  // keys per shared-memory tile; two lanes per key form a score
  static constexpr int kMaxHeadDim = 256;
  static constexpr int kDimsPerLane = kMaxHeadDim / 32;
  static AK_HOST_DEVICE int smem_floats(int dqk, int dv) { return kKeys * (dqk + 1) + kKeys * dv + kRows * dqk; }
};

// Element offset of key j of (batch b, kv head h) in k or v; `bad_page` is
// set when j's block-table entry lies outside the cache (read clamped).
__device__ __forceinline__ std::int64_t kv_row_offset(const AttnParams& p, const std::int64_t* strides, int b,
                                                      int h, const DeviceSpan& span, int j, bool& bad_page) {
  if (p.page_size > 0) {
    const std::int64_t page = cache_page(p, b, j / p.page_size, bad_page);
    return page * strides[0] + (j % p.page_size) * strides[1] + h * strides[2];
  }
  const HeadRows rows = head_rows(p.layout, strides, b, h, span.k_offset);
  return rows.offset + j * rows.row_stride;
}

// True when the block-sparse lists or a custom mask hide key j from query i.
// Lists are read clamped (block_list_range): bad device lists stay in bounds.
__device__ __forceinline__ bool hidden_by_mask(const AttnParams& p, int b, int h, int i, int j) {
  if (p.block_offsets != nullptr) {
    const std::int64_t row = block_sparse_row(p.block_batch, p.block_heads, p.num_q_blocks, b, h, i / p.block_q);
    if (!block_listed(p.block_indices, block_list_range(p.block_offsets, row, p.block_nnz), j / p.block_k)) return true;
  }
  if (p.custom_mask != nullptr) {
    const std::int64_t* s = p.custom_mask_strides;
    return p.custom_mask[b * s[0] + h * s[1] + i * s[2] + j * s[3]] == 0;
  }
  return false;
}

template <class T>
__global__ void __launch_bounds__(SdpaShape::kRows * 32) sdpa_forward_kernel(const __grid_constant__ AttnParams p) {
  constexpr int kRows = SdpaShape::kRows, kKeys = SdpaShape::kKeys, kThreads = kRows * 32;
  extern __shared__ float sdpa_smem[];
  const int dqk = p.head_dim_qk, dv = p.head_dim_v;
  float* sK = sdpa_smem;                 // [kKeys][dqk + 1] (padded: no bank conflicts across keys)
  float* sV = sK + kKeys * (dqk + 1);    // [kKeys][dv]
  float* sQ = sV + kKeys * dv;           // [kRows][dqk]

  const int b = blockIdx.z, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const DeviceSpan span = sequence_span(p, b);
  // Device metadata that disagrees with the problem: NaN everywhere, nothing computed.
  if (call_lies(p, kThreads)) {
    poison_call_part<T>(p, cta_index(), cta_count(), static_cast<int>(threadIdx.x), kThreads);
    return;
  }
  const int row0 = blockIdx.x * kRows;
  if (row0 >= span.q_len) return;
  const int row = row0 + warp;
  const bool active = row < span.q_len;  // warp-uniform
  const int hkv = h / p.gqa_ratio;

  const HeadRows q_rows = head_rows(p.layout, p.q_strides, b, h, span.q_offset);
  if (active)
    for (int d = lane; d < dqk; d += 32)
      sQ[warp * dqk + d] = to_float(static_cast<const T*>(p.q)[q_rows.offset + row * q_rows.row_stride + d]);

  const int last_row = min(row0 + kRows, span.q_len) - 1;
  const KeyRange first = visible_keys(row0, span.q_len, span.k_len, p.window_left, p.window_right);
  const KeyRange last = visible_keys(last_row, span.q_len, span.k_len, p.window_left, p.window_right);
  const KeyRange mine = visible_keys(active ? row : last_row, span.q_len, span.k_len, p.window_left, p.window_right);

  const bool has_sink = p.sinks != nullptr;
  const float sink = has_sink ? p.sinks[h * p.sinks_stride] : 0.0f;
  float m = has_sink ? sink : -INFINITY;
  float l = 0.0f;
  float acc[SdpaShape::kDimsPerLane];
#pragma unroll
  for (int k = 0; k < SdpaShape::kDimsPerLane; ++k) acc[k] = 0.0f;

  const T* kg = static_cast<const T*>(p.k);
  const T* vg = static_cast<const T*>(p.v);
  bool bad_page = false;     // this thread read a block-table entry outside the cache
  bool page_fault = false;   // some thread of the CTA did: its rows are NaN
  for (int j0 = first.lo; j0 < last.hi; j0 += kKeys) {
    __syncthreads();  // the previous tile is consumed (and sQ is visible on the first pass)
    for (int idx = threadIdx.x; idx < kKeys * dqk; idx += kThreads) {
      const int jj = idx / dqk, d = idx % dqk, j = j0 + jj;
      sK[jj * (dqk + 1) + d] = j < last.hi ? to_float(kg[kv_row_offset(p, p.k_strides, b, hkv, span, j, bad_page) + d]) : 0.0f;
    }
    for (int idx = threadIdx.x; idx < kKeys * dv; idx += kThreads) {
      const int jj = idx / dv, d = idx % dv, j = j0 + jj;
      sV[jj * dv + d] = j < last.hi ? to_float(vg[kv_row_offset(p, p.v_strides, b, hkv, span, j, bad_page) + d]) : 0.0f;
    }
    page_fault |= __syncthreads_or(bad_page) != 0;
    if (!active) continue;

    // Lanes l and l + 16 each sum half of q.k_j for key j = j0 + (l % 16).
    const int jj = lane & 15, j = j0 + jj;
    float dot = 0.0f;
    for (int d = lane >> 4; d < dqk; d += 2) dot += sQ[warp * dqk + d] * sK[jj * (dqk + 1) + d];
    dot += __shfl_xor_sync(0xffffffffu, dot, 16);
    float s = dot * p.scale;
    if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
    const bool visible = j >= mine.lo && j < mine.hi && !hidden_by_mask(p, b, h, row, j);
    if (!visible) s = -INFINITY;

    float mx = s;
#pragma unroll
    for (int off = 8; off >= 1; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float m_new = fmaxf(m, mx);
    if (m_new == -INFINITY) continue;  // nothing visible yet (warp-uniform)
    const float alpha = expf(m - m_new);
    const float pj = visible ? expf(s - m_new) : 0.0f;
    float psum = pj;
#pragma unroll
    for (int off = 8; off >= 1; off >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, off);
    l = l * alpha + psum;
    m = m_new;
#pragma unroll
    for (int k = 0; k < SdpaShape::kDimsPerLane; ++k) acc[k] *= alpha;
    for (int t = 0; t < kKeys; ++t) {
      const float pt = __shfl_sync(0xffffffffu, pj, t);
#pragma unroll
      for (int k = 0; k < SdpaShape::kDimsPerLane; ++k) {
        const int d = lane + 32 * k;
        if (d < dv) acc[k] += pt * sV[t * dv + d];
      }
    }
  }
  if (!active) return;

  if (has_sink) l += expf(sink - m);  // m >= sink: m started there
  float inv = l > 0.0f ? 1.0f / l : 0.0f;
  if (page_fault) inv = NAN;  // the CTA read a page outside the cache: its rows' O and LSE are NaN
  const HeadRows o_rows = head_rows(p.layout, p.out_strides, b, h, span.q_offset);
  T* out = static_cast<T*>(p.out) + o_rows.offset + row * o_rows.row_stride;
#pragma unroll
  for (int k = 0; k < SdpaShape::kDimsPerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < dv) out[d] = from_float<T>(acc[k] * inv);
  }
  if (p.lse != nullptr && lane == 0) {
    const std::int64_t off = lse_offset(p.layout, p.lse_strides, b, h, row, span.q_offset);
    p.lse[off] = page_fault ? NAN : l > 0.0f ? m + logf(l) : -INFINITY;
  }
}

template <class T>
cudaError_t sdpa_launch(const AttnParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.seqlen_q + SdpaShape::kRows - 1) / SdpaShape::kRows),
                  static_cast<unsigned>(p.heads_q), static_cast<unsigned>(p.batch));
  const std::size_t smem = sizeof(float) * SdpaShape::smem_floats(p.head_dim_qk, p.head_dim_v);
  sdpa_forward_kernel<T><<<grid, SdpaShape::kRows * 32, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda

// Defines sdpa_launch_<TAG>_0_0 and sdpa_configure_<TAG>_0_0 (declared in
// src/backends/cuda/launchers.hpp) for one instances.def entry (any head dim).
#define AK_DEFINE_LAUNCHER_sdpa(TAG, QK, V)                                                          \
  namespace attnkit::cuda {                                                                          \
  int sdpa_launch_##TAG##_##QK##_##V(const AttnParams& p, void* stream) {                            \
    return static_cast<int>(sdpa_launch<CudaElement<DType::TAG>::type>(p, static_cast<cudaStream_t>(stream))); \
  }                                                                                                  \
  int sdpa_configure_##TAG##_##QK##_##V() { return 0; }                                              \
  }
