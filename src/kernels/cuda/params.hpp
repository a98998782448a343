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
#include "attnkit/core/video_tiles.hpp"

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
  int num_pages = 0;                        // paged: pages in the cache (k's first extent)
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
  // fa3's persistent walk over unequal tiles: heads a group (tile_scheduler.hpp grouped_tile);
  // 0: the launch's rule. Set only by `bench_fa2 --variants --walk-groups`, to time the rule.
  int walk_group = 0;
  // sol_attn's pooled pass (fa2solpool instances, fa2/sol_pooled.hpp): k and v
  // hold one mean key / value per 64-token tile; the 64-query tile of query
  // block qb of (b, h) hides the tiles kept exactly, sol_keep[((b * heads_q + h)
  // * sol_q_blocks + qb) * seqlen_k + c] != 0, and adds ln(tokens of c) / scale
  // to the raw score of the others (sol_bias_full; sol_bias_last for the last tile).
  const std::uint8_t* sol_keep = nullptr;
  int sol_q_blocks = 0;
  float sol_bias_full = 0.0f, sol_bias_last = 0.0f;
  // fa3bsr (sm90/raster_tokens.hpp): q, k, v and out hold video tokens in
  // raster order, the block-sparse lists index them in tile order (the
  // kernel reads and writes tile-order row s at raster_index(raster, s));
  // frames == 0: rows are read as they are.
  VideoTiling raster{};
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

// Device-resident metadata is not read on the host (validate_binding checks
// only its size), so it may disagree with the problem. Two things keep that
// safe and loud (docs/reliability.md, AK1108):
//  - every kernel addresses sequences only through sequence_span() and pages
//    only through cache_page(), which clamp what they return into the tensors
//    (no out-of-bounds access, whatever the values);
//  - every CTA checks the whole call first (metadata_share_ok, one share per
//    thread, reduced by the CTA's first barrier): when any value breaks the
//    host's rules the CTA writes NaN over its part of out and LSE and
//    computes nothing (poison_call_part, kernels/cuda/common/lying_metadata.hpp),
//    so the call's whole output is NaN. Block-table entries are checked where
//    they are read: the tile that reads an entry outside the cache is NaN.

// Rows [lo, hi) of packed sequence b per cu_seqlens, clamped into [0, rows].
struct PackedRows {
  std::int64_t offset;
  int len;
};
AK_HOST_DEVICE PackedRows packed_rows(const std::int32_t* cu, std::int64_t stride, int b, std::int64_t rows) {
  const std::int64_t lo_raw = cu[b * stride], hi_raw = cu[(b + 1) * stride];
  const std::int64_t lo = lo_raw < 0 ? 0 : lo_raw > rows ? rows : lo_raw;
  const std::int64_t hi = hi_raw < lo ? lo : hi_raw > rows ? rows : hi_raw;
  return {lo, static_cast<int>(hi - lo)};  // cu values are int32: hi - lo < 2^31
}

// Keys a paged cache can hold per sequence: the block table's columns x page_size.
AK_HOST_DEVICE std::int64_t cache_capacity(const AttnParams& p) {
  return static_cast<std::int64_t>(p.block_table_cols) * p.page_size;
}

AK_HOST_DEVICE DeviceSpan sequence_span(const AttnParams& p, int b) {
  DeviceSpan s{p.seqlen_q, p.seqlen_k, 0, 0};
  if (p.layout == Layout::thd) {
    const PackedRows q = packed_rows(p.cu_seqlens_q, p.cu_q_stride, b, p.rows_q);
    s.q_offset = q.offset;
    s.q_len = q.len;
    if (p.page_size == 0) {
      const PackedRows k = packed_rows(p.cu_seqlens_k, p.cu_k_stride, b, p.rows_k);
      s.k_offset = k.offset;
      s.k_len = k.len;
    }
  }
  if (p.page_size > 0) {
    const std::int64_t k = p.seqlens_k[b * p.seqlens_k_stride], cap = cache_capacity(p);
    s.k_len = static_cast<int>(k < 0 ? 0 : k > cap ? cap : k);
  }
  return s;
}

// Page number of logical page j (< block_table_cols) of sequence b, clamped
// into [0, num_pages); `bad` is set when the entry lies outside the cache.
// (fa3 reads entries through its TMA map of the cache, whose bounds are the
// clamp: a box outside is zeros; it uses page_outside() for the flag.)
// (One unsigned compare: a negative entry wraps past num_pages.)
AK_HOST_DEVICE bool page_outside(const AttnParams& p, std::int32_t page) {
  return static_cast<std::uint32_t>(page) >= static_cast<std::uint32_t>(p.num_pages);
}
AK_HOST_DEVICE int cache_page(const AttnParams& p, int b, int j, bool& bad) {
  const std::int32_t page = p.block_table[b * p.block_table_strides[0] + j * p.block_table_strides[1]];
  const bool outside = page_outside(p, page);
  bad = bad || outside;
  return outside ? (page < 0 ? 0 : p.num_pages - 1) : page;
}

// Whether sequence b's packed rows keep the host's rules (AK1108): cu_seqlens
// starts at 0, never decreases, ends within the rows, no sequence longer than
// the problem's (max) length.
AK_HOST_DEVICE bool packed_sequence_ok(const std::int32_t* cu, std::int64_t stride, int b, std::int64_t rows,
                                       int longest) {
  const std::int64_t lo = cu[b * stride], hi = cu[(b + 1) * stride];
  return (b > 0 || lo == 0) & (lo >= 0) & (lo <= hi) & (hi <= rows) & (hi - lo <= longest);
}

// Whether the call's device metadata for sequences tid, tid + threads, ...
// keeps the host's rules (AK1108 for cu_seqlens, AK1111 for seqlens_k: within
// [0, seqlen_k] and the block table's capacity). The CTA ORs the shares of its
// threads (call_lies); a problem without such metadata is always fine.
AK_HOST_DEVICE bool metadata_share_ok(const AttnParams& p, int tid, int threads) {
  bool ok = true;
  const bool packed = p.layout == Layout::thd, paged = p.page_size > 0;
  if (!packed && !paged) return true;
  const std::int64_t cap = paged ? cache_capacity(p) : 0;
  for (int b = tid; b < p.batch; b += threads) {
    if (packed) {
      ok = ok & packed_sequence_ok(p.cu_seqlens_q, p.cu_q_stride, b, p.rows_q, p.seqlen_q);
      if (!paged) ok = ok & packed_sequence_ok(p.cu_seqlens_k, p.cu_k_stride, b, p.rows_k, p.seqlen_k);
    }
    if (paged) {
      const std::int64_t k = p.seqlens_k[b * p.seqlens_k_stride];
      ok = ok & (k >= 0) & (k <= p.seqlen_k) & (k <= cap);
    }
  }
  return ok;
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
    a.num_pages = static_cast<int>(t.k.shape[0]);
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
