#pragma once
// Block-sparse attention lists (Problem::block_sparse), in CSR form over
// query blocks. The index math below is shared by host code and kernels.
//
//   num_q_blocks = ceil(seqlen_q / block_q)      num_k_blocks = ceil(seqlen_k / block_k)
//   rows         = bs.batch * bs.heads * num_q_blocks
//   row r of (sequence b, query head h, query block qb):
//     r = (b_m * bs.heads + h_m) * num_q_blocks + qb,
//     b_m = bs.batch == 1 ? 0 : b,   h_m = bs.heads == 1 ? 0 : h
//   block_offsets: int32 [rows + 1], offsets[0] = 0, non-decreasing
//   block_indices: int32 [nnz], nnz = offsets[rows]
//   row r attends to key blocks block_indices[offsets[r] .. offsets[r + 1]),
//   strictly ascending, each in [0, num_k_blocks).
// THD (varlen): seqlen_q / seqlen_k are the longest sequences; the blocks of a
// shorter sequence past its end are ignored (never read).
//
// Contract. Host-resident lists (CPU tensors) are validated in full by
// validate_binding (AK1115: offsets start at 0, never decrease, end at the
// indices' length; indices strictly ascending per row and in range). Device
// lists are checked for their sizes, dtype and contiguity only (the binding
// cannot read device memory): kernels must clamp what they read, as the
// helpers below do, so that bad lists give wrong numbers but never an
// out-of-bounds access: a row's range is clamped to [0, nnz), and an index
// outside [0, num_k_blocks) is skipped.
#include <cstdint>
#include <vector>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/host_device.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit {

AK_HOST_DEVICE int num_blocks(int length, int block) { return length <= 0 ? 0 : (length + block - 1) / block; }

// CSR row of (sequence b, query head h, query block qb).
AK_HOST_DEVICE std::int64_t block_sparse_row(int bs_batch, int bs_heads, int num_q_blocks, int b, int h, int qb) {
  const std::int64_t bm = bs_batch == 1 ? 0 : b;
  const std::int64_t hm = bs_heads == 1 ? 0 : h;
  return (bm * bs_heads + hm) * num_q_blocks + qb;
}

// [begin, end) of a row's entries in block_indices, clamped to [0, nnz).
struct BlockListRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};
AK_HOST_DEVICE BlockListRange block_list_range(const std::int32_t* offsets, std::int64_t row, std::int64_t nnz) {
  std::int64_t begin = offsets[row], end = offsets[row + 1];
  begin = begin < 0 ? 0 : (begin > nnz ? nnz : begin);
  end = end < begin ? begin : (end > nnz ? nnz : end);
  return {begin, end};
}

// Whether key block kb is in the (ascending) list indices[range): binary search.
AK_HOST_DEVICE bool block_listed(const std::int32_t* indices, BlockListRange range, int kb) {
  std::int64_t lo = range.begin, hi = range.end;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (indices[mid] < kb) lo = mid + 1;
    else hi = mid;
  }
  return lo < range.end && indices[lo] == kb;
}

}  // namespace attnkit

// ---- host side -----------------------------------------------------------------------
namespace attnkit {

struct BlockSparseShape {
  std::int64_t rows = 0;  // entries of block_offsets, minus one
  int num_q_blocks = 0;
  int num_k_blocks = 0;
};
// The list shape of p (which must have block_sparse set and be valid).
BlockSparseShape block_sparse_shape(const Problem& p);

// Owning CSR lists; bind() points a call's tensors at them.
struct BlockSparseLists {
  std::vector<std::int32_t> offsets;  // rows + 1
  std::vector<std::int32_t> indices;  // nnz
  TensorView offsets_view() const;
  TensorView indices_view() const;
  void bind(AttentionTensors& t) const;
  std::int64_t nnz() const { return static_cast<std::int64_t>(indices.size()); }
};

// A dense uint8 block mask [bs.batch, bs.heads, num_q_blocks, num_k_blocks]
// (any strides; non-zero keeps a block) as CSR lists.
Result<BlockSparseLists> block_sparse_from_mask(const Problem& p, const TensorView& mask);
// CSR lists (host) as the dense uint8 mask of block_sparse_from_mask.
Result<HostTensor> block_sparse_dense_mask(const Problem& p, const TensorView& offsets, const TensorView& indices);

// The contents checks of the contract above on host-resident lists (AK1115);
// sizes and dtypes are validate_binding's.
Diagnostics validate_block_sparse_lists(const Problem& p, const TensorView& offsets, const TensorView& indices);

// Problem::flops() over the listed blocks only: each listed (qb, kb) counts
// its block_q x block_k pairs, clipped to seqlen_q / seqlen_k, for every
// sequence and head the row stands for. Masks inside blocks are not subtracted.
double block_sparse_flops(const Problem& p, const BlockSparseLists& lists);
// Listed blocks / all (q block, k block) pairs of the layout: the density.
double block_sparse_density(const Problem& p, const BlockSparseLists& lists);

}  // namespace attnkit
