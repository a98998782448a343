#pragma once
// Device-side parameters of one attention launch, shared by every CUDA kernel
// of attnkit. Host `Problem` + `AttentionTensors` become `AttnParams` in one
// place (make_attn_params); kernels read only this struct. Plain C++: the host
// glue builds it without CUDA headers.
#include <cmath>
#include <cstdint>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/host_device.hpp"
#include "attnkit/core/mask.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

struct AttnParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;          // null: not requested
  const float* sinks = nullptr;  // null: no sinks
  const std::int32_t* cu_seqlens_q = nullptr;  // THD only
  const std::int32_t* cu_seqlens_k = nullptr;  // THD without paging only
  const std::int32_t* block_table = nullptr;   // paged only
  const std::int32_t* seqlens_k = nullptr;     // paged only
  // Block sparsity (Problem::block_sparse; CSR, core/block_sparse.hpp). Lists
  // in device memory are unchecked: read them through block_list_range().
  const std::int32_t* block_offsets = nullptr;  // [block_rows + 1]; null: dense
  const std::int32_t* block_indices = nullptr;  // [block_nnz]
  const std::uint8_t* custom_mask = nullptr;   // custom only

  std::int64_t q_strides[4]{}, k_strides[4]{}, v_strides[4]{}, out_strides[4]{};
  std::int64_t lse_strides[3]{}, sinks_stride = 0;
  std::int64_t block_table_strides[2]{}, seqlens_k_stride = 0, cu_q_stride = 1, cu_k_stride = 1;
  std::int64_t custom_mask_strides[4]{};
  std::int64_t block_nnz = 0;

  Layout layout = Layout::bshd;
  MaskKind mask = MaskKind::none;
  int batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, gqa_ratio = 1;
  int head_dim_qk = 64, head_dim_v = 64;
  int window_left = -1, window_right = -1;  // effective window (causal included)
  int page_size = 0;                        // > 0: paged KV cache
  int block_table_cols = 0;                 // paged: pages per sequence in the block table
  int block_q = 0, block_k = 0;             // block-sparse block sizes (block_offsets set)
  int block_batch = 1, block_heads = 1;     // distinct lists per sequence / per query head: 1 or batch / heads_q
  int num_q_blocks = 0, num_k_blocks = 0;   // ceil(seqlen_q / block_q), ceil(seqlen_k / block_k)
  int block_k_tiles = 1;                    // fa3bs: block_k / its key tile (set by the launcher, which checks it divides)
  // Request skip-softmax (fa3ss instances): threshold = threshold_scale_factor /
  // (keys of the sequence), so log2(threshold) = skip_log2_factor - log2(keys);
  // skip_counts (optional) gets [decided, skipped] (row, key tile) pairs added.
  float skip_log2_factor = 0.0f;
  unsigned long long* skip_counts = nullptr;
  // fa3's dynamic tile scheduler (sm90/launch.hpp): one counter in the plan's
  // workspace, zeroed by the launcher before each launch; null: a static walk.
  unsigned int* tile_counter = nullptr;
  // Scores in log2 units: s2 = log2(e) * softcap(scale * q.k).
  //   no softcap: s2 = (q.k) * scale_log2
  //   softcap c : s2 = softcap_log2 * tanh((q.k) * softcap_prescale), softcap_log2 = c*log2(e)
  float scale = 1.0f;  // natural units, for kernels that work in them
  float scale_log2 = 1.0f;
  float softcap = 0.0f;
  float softcap_prescale = 0.0f;
  float softcap_log2 = 0.0f;
  // Rows of the q and k/v tensors along the sequence: seqlen for BSHD / BHSD,
  // the packed token count for THD (the TMA tensor maps' extent).
  std::int64_t rows_q = 1, rows_k = 1;
};

// Lengths and packed token offsets of sequence b, read on the device.
struct DeviceSpan {
  int q_len, k_len;
  std::int64_t q_offset, k_offset;
};

AK_HOST_DEVICE DeviceSpan sequence_span(const AttnParams& p, int b) {
  DeviceSpan s{p.seqlen_q, p.seqlen_k, 0, 0};
  if (p.layout == Layout::thd) {
    const std::int32_t q0 = p.cu_seqlens_q[b * p.cu_q_stride], q1 = p.cu_seqlens_q[(b + 1) * p.cu_q_stride];
    s.q_offset = q0;
    s.q_len = q1 - q0;
    if (p.page_size == 0) {
      const std::int32_t k0 = p.cu_seqlens_k[b * p.cu_k_stride], k1 = p.cu_seqlens_k[(b + 1) * p.cu_k_stride];
      s.k_offset = k0;
      s.k_len = k1 - k0;
    }
  }
  if (p.page_size > 0) s.k_len = p.seqlens_k[b * p.seqlens_k_stride];
  return s;
}

inline void copy_strides(std::int64_t* dst, const TensorView& t, int n) {
  for (int i = 0; i < n; ++i) dst[i] = i < t.rank ? t.strides[i] : 0;
}

// The one place host arguments become device parameters.
inline AttnParams make_attn_params(const Problem& p, const AttentionTensors& t) {
  AttnParams a;
  a.q = t.q.data;
  a.k = t.k.data;
  a.v = t.v.data;
  a.out = t.out.data;
  a.lse = p.return_lse ? static_cast<float*>(t.lse.data) : nullptr;
  a.sinks = p.has_sinks ? static_cast<const float*>(t.sinks.data) : nullptr;
  copy_strides(a.q_strides, t.q, 4);
  copy_strides(a.k_strides, t.k, 4);
  copy_strides(a.v_strides, t.v, 4);
  copy_strides(a.out_strides, t.out, 4);
  if (p.return_lse) copy_strides(a.lse_strides, t.lse, 3);
  if (p.has_sinks) a.sinks_stride = t.sinks.strides[0];
  if (p.layout == Layout::thd) {
    a.cu_seqlens_q = static_cast<const std::int32_t*>(t.cu_seqlens_q.data);
    a.cu_q_stride = t.cu_seqlens_q.strides[0];
    if (!p.paged_kv) {
      a.cu_seqlens_k = static_cast<const std::int32_t*>(t.cu_seqlens_k.data);
      a.cu_k_stride = t.cu_seqlens_k.strides[0];
    }
  }
  if (p.paged_kv) {
    a.page_size = p.paged_kv->page_size;
    a.block_table = static_cast<const std::int32_t*>(t.block_table.data);
    copy_strides(a.block_table_strides, t.block_table, 2);
    a.block_table_cols = static_cast<int>(t.block_table.shape[1]);
    a.seqlens_k = static_cast<const std::int32_t*>(t.seqlens_k.data);
    a.seqlens_k_stride = t.seqlens_k.strides[0];
  }
  if (p.block_sparse) {
    const BlockSparse& bs = *p.block_sparse;
    a.block_offsets = static_cast<const std::int32_t*>(t.block_offsets.data);
    a.block_indices = static_cast<const std::int32_t*>(t.block_indices.data);
    a.block_nnz = t.block_indices.numel();
    a.block_q = bs.block_q;
    a.block_k = bs.block_k;
    a.block_batch = bs.batch;
    a.block_heads = bs.heads;
    a.num_q_blocks = num_blocks(p.seqlen_q, bs.block_q);
    a.num_k_blocks = num_blocks(p.seqlen_k, bs.block_k);
  }
  if (p.mask == MaskKind::custom) {
    a.custom_mask = static_cast<const std::uint8_t*>(t.custom_mask.data);
    copy_strides(a.custom_mask_strides, t.custom_mask, 4);
  }
  a.layout = p.layout;
  a.rows_q = p.layout == Layout::thd ? t.q.shape[0] : p.seqlen_q;
  a.rows_k = p.paged_kv ? t.k.shape[0] * t.k.shape[1] : p.layout == Layout::thd ? t.k.shape[0] : p.seqlen_k;
  a.mask = p.mask;
  a.batch = p.batch;
  a.seqlen_q = p.seqlen_q;
  a.seqlen_k = p.seqlen_k;
  a.heads_q = p.heads_q;
  a.heads_kv = p.heads_kv;
  a.gqa_ratio = p.gqa_ratio();
  a.head_dim_qk = p.head_dim_qk;
  a.head_dim_v = p.head_dim_v;
  const Window w = p.effective_window();
  a.window_left = w.left;
  a.window_right = w.right;
  a.scale = p.softmax_scale();
  a.scale_log2 = a.scale * kLog2e;
  if (p.softcap > 0.0f) {
    a.softcap = p.softcap;
    a.softcap_prescale = a.scale / p.softcap;
    a.softcap_log2 = p.softcap * kLog2e;
  }
  return a;
}

}  // namespace attnkit::cuda
