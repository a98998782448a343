#pragma once
// The buffers of one attention call, bound to a Problem at run time, and the
// index math that turns (batch, head, row) into addresses for every layout.
#include <cstdint>

#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/host_device.hpp"
#include "attnkit/core/problem.hpp"
#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct AttentionTensors {
  TensorView q, k, v;  // layout per Problem::layout (paged: k, v are [pages, page, hkv, d])
  TensorView out;      // q's layout, head dim = head_dim_v
  TensorView lse;      // fp32 [batch, heads_q, seqlen_q] or [heads_q, total_q] (THD)
  TensorView sinks;    // fp32 [heads_q]
  TensorView gate;     // fp32 [batch, seqlen_q, heads_q] (BSHD), [batch, heads_q, seqlen_q] (BHSD),
                       // [total_q, heads_q] (THD); Problem::has_gate only; any strides
  TensorView cu_seqlens_q, cu_seqlens_k;  // int32 [batch + 1], THD only
  TensorView block_table;                 // int32 [batch, max_pages], paged only
  TensorView seqlens_k;                   // int32 [batch], paged only
  TensorView block_offsets;               // int32 [rows + 1], contiguous; Problem::block_sparse only (core/block_sparse.hpp)
  TensorView block_indices;               // int32 [nnz], contiguous; Problem::block_sparse only
  TensorView custom_mask;                 // uint8 [batch, heads_q, seqlen_q, seqlen_k], custom only
  TensorView diagonal_offsets;            // int32 [batch], host, Problem::diagonal_offsets only
};

// Checks that the tensors match the Problem: presence, rank, shape, dtype,
// device, unit stride on the head dim, 16-byte alignment where asked, outputs
// that do not overlap themselves, and (host-resident index tensors, read only
// once their dtype and shape are right) cu_seqlens monotonic, within the
// packed length and no sequence longer than seqlen_q / seqlen_k; block tables
// naming existing pages, seqlens_k within the table and seqlen_k; block-sparse
// lists well formed.
struct BindingRules {
  DeviceKind device = DeviceKind::cpu;
  int alignment_bytes = 0;      // every tensor's base and strides; 0: no requirement
  int row_alignment_bytes = 0;  // q, k, v and out only (vector loads of rows); 0: none
};
Diagnostics validate_binding(const Problem& p, const AttentionTensors& t, BindingRules rules = {});

// One (batch, head) slice of a q/k/v/out tensor: row r starts at
// base + r * row_stride elements; the head dim is contiguous.
struct HeadRows {
  std::int64_t offset = 0;      // elements from the tensor's data pointer
  std::int64_t row_stride = 0;  // elements between consecutive sequence rows
};

// Element offset of (batch b, head h) for `layout`, given the token offset of
// sequence b in a packed (THD) tensor (0 otherwise).
AK_HOST_DEVICE HeadRows head_rows(Layout layout, const std::int64_t* strides, int b, int h,
                                  std::int64_t token_offset) {
  switch (layout) {
    case Layout::bshd: return {b * strides[0] + h * strides[2], strides[1]};
    case Layout::bhsd: return {b * strides[0] + h * strides[1], strides[2]};
    case Layout::thd: return {token_offset * strides[0] + h * strides[1], strides[0]};
  }
  return {};
}

// Element offset of lse[(b, h, row i)] for `layout`: [batch, heads, seqlen],
// or [heads, total rows] for THD, whose row is token_offset + i.
AK_HOST_DEVICE std::int64_t lse_offset(Layout layout, const std::int64_t* strides, int b, int h, std::int64_t i,
                                       std::int64_t token_offset) {
  return layout == Layout::thd ? h * strides[0] + (token_offset + i) * strides[1]
                               : b * strides[0] + h * strides[1] + i * strides[2];
}

// Element offset of gate[(b, h, row i)] for `layout` (see AttentionTensors::gate).
AK_HOST_DEVICE std::int64_t gate_offset(Layout layout, const std::int64_t* strides, int b, int h, std::int64_t i,
                                        std::int64_t token_offset) {
  switch (layout) {
    case Layout::bshd: return b * strides[0] + i * strides[1] + h * strides[2];
    case Layout::bhsd: return b * strides[0] + h * strides[1] + i * strides[2];
    case Layout::thd: return (token_offset + i) * strides[0] + h * strides[1];
  }
  return 0;
}

// Lengths and packed offsets of sequence b, read from host-resident tensors.
struct SequenceSpan {
  int q_len = 0;
  int k_len = 0;
  std::int64_t q_offset = 0;  // token offset in a packed q (THD)
  std::int64_t k_offset = 0;  // token offset in a packed k (THD)
  int diagonal = 0;           // query 0 is aligned with this key (k_len - q_len unless diagonal_offsets)
};
SequenceSpan host_sequence_span(const Problem& p, const AttentionTensors& t, int b);

}  // namespace attnkit

namespace attnkit {
// Finds the first NaN/Inf in host-resident q, k, v and sinks (AK1109). Costs one
// read of the inputs, O(tokens * dim), small next to attention's O(tokens^2 * dim).
// Of a paged cache only the rows the call reads are scanned (unused pages and
// slots may legitimately hold garbage). Call after validate_binding passed.
Diagnostics scan_nonfinite_inputs(const Problem& p, const AttentionTensors& t);
// After a run from finite inputs: the first NaN/Inf of a host-resident out, or
// NaN/+Inf of the LSE (-inf marks a row that sees no key), as AK1114: a score
// or the output overflowed `backend`'s arithmetic.
Diagnostics scan_nonfinite_outputs(const Problem& p, const AttentionTensors& t, std::string_view backend);
}  // namespace attnkit
