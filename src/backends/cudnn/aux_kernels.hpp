#pragma once
// The two small kernels around a cuDNN SDPA graph, for problems whose lengths
// come from tensors (packed, paged, or rows that see no key):
//   prepare   before the graph: per-sequence lengths, ragged element offsets,
//             a page table with every unused entry set to page 0 (cuDNN may
//             read a whole row of the table), fp8 scale scalars;
//   finish    after the graph: attnkit's semantics for rows that see no key
//             (output 0, LSE -inf, or the sink logit with sinks) and the LSE of
//             packed problems from cuDNN's [total, h] stats into [h, total].
// Device metadata that breaks the host's rules (AK1108 / AK1111: cu_seqlens
// decreasing or past the packed rows, a sequence longer than seqlen_q /
// seqlen_k, seqlens_k past the block table): prepare clamps what it hands
// cuDNN, and finish writes NaN over the call's whole output and LSE (every
// batch x seqlen_q row; THD: every packed row). A
// block-table entry outside the cache, among the pages a sequence reads, is
// handed to cuDNN as page 0 and makes that sequence's rows NaN.
// Plain declarations (no CUDA types); each returns a cudaError_t as int.
#include <cstdint>

#include "attnkit/core/problem.hpp"

namespace attnkit::cudnn {

// Where sequence b's lengths and packed offsets come from.
struct SequenceSource {
  const std::int32_t* cu_q = nullptr;  // THD: cu_seqlens_q (nullptr: seqlen_q each)
  std::int64_t cu_q_stride = 1;
  const std::int32_t* cu_k = nullptr;  // THD without paging: cu_seqlens_k
  std::int64_t cu_k_stride = 1;
  const std::int32_t* seqlens_k = nullptr;  // paged: seqlens_k
  std::int64_t seqlens_k_stride = 1;
  int seqlen_q = 0, seqlen_k = 0;  // the Problem's (longest) lengths: constants and clamps
  // THD: the packed rows of q (and out) and of k / v (q.shape[0], k.shape[0]).
  // Device cu_seqlens are not read on the host: the kernels clamp every offset
  // and length into these rows, so cuDNN, which takes seq_q / seq_kv / ragged
  // offsets / the page table as given, never addresses past the tensors.
  std::int64_t rows_q = 0, rows_k = 0;
};

struct PrepareParams {
  int batch = 0;        // the call's sequences
  int graph_batch = 0;  // the graph's (>= batch: the sequences past batch are empty)
  SequenceSource seq;
  std::int32_t* seq_q = nullptr;  // [graph_batch] outputs (nullptr: no padding mask)
  std::int32_t* seq_kv = nullptr;
  // Ragged element offsets [graph_batch + 1] of q, k, v, o, stats: cu[b] * token_stride.
  void* ragged[5] = {};
  std::int64_t token_stride[5] = {};
  bool offsets_int64 = false;
  // Paged: the caller's block table [batch, table_cols] -> page_table [graph_batch, max_pages].
  const std::int32_t* block_table = nullptr;
  std::int64_t block_table_strides[2] = {};
  int table_cols = 0, max_pages = 0, page_size = 0;
  int num_pages = -1;  // pages in the cache (k.shape[0]); -1: not given (entries are then copied as they are)
  std::int32_t* page_table = nullptr;
  // [graph_batch]: 1 where a page the sequence reads lies outside the cache (its
  // entry is handed to cuDNN as page 0); zeroed by launch_prepare, read by finish.
  std::int32_t* bad_pages = nullptr;
  // fp8: descale_q, descale_k, descale_v, descale_s, scale_s, scale_o.
  float* scalars = nullptr;
  float scalar_values[6] = {};
};
int launch_prepare(const PrepareParams& p, void* stream);

struct FinishParams {
  int batch = 0, heads_q = 0, head_dim_v = 0;
  Layout layout = Layout::bshd;
  SequenceSource seq;
  int window_left = -1, window_right = -1;  // attnkit's effective window
  void* out = nullptr;                      // 2-byte elements (fp16 / bf16)
  std::int64_t out_strides[4] = {};         // TensorView strides of out
  float* lse = nullptr;                     // nullptr: no LSE
  std::int64_t lse_strides[3] = {};         // TensorView strides of lse
  const float* stats = nullptr;             // THD: cuDNN's stats to copy into lse
  std::int64_t stats_strides[3] = {};       // (b, h, s) of stats; ragged: b unused, rows at cu_q[b]
  bool stats_ragged = false;
  const float* sinks = nullptr;
  std::int64_t sinks_stride = 1;
  const std::int32_t* bad_pages = nullptr;  // paged: PrepareParams::bad_pages; those sequences' rows become NaN
};
int launch_finish(const FinishParams& p, void* stream);

}  // namespace attnkit::cudnn
