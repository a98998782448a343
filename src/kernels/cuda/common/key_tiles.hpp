#pragma once
// Which key tiles a block of query rows must visit, shared by the sm_80 and
// sm_90 mainloops: the union of the rows' visible ranges (causal, sliding
// window, sequence ends; core/mask.hpp), in whole tiles of kBlockN keys.
// Visible ranges move monotonically with the row, so the first and the last
// row bound the union.
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/host_device.hpp"
#include "attnkit/core/mask.hpp"
#include "kernels/cuda/params.hpp"

#include <cstdint>

namespace attnkit::cuda {

struct KeyTiles {
  int begin, end;          // tiles [begin, end) hold a key some row sees
  KeyRange first, last;    // the visible keys of the block's first and last row
  AK_HOST_DEVICE int count() const { return end - begin; }
  AK_HOST_DEVICE int tile(int it) const { return begin + it; }  // the it-th tile the block visits
  // Every row of the block sees every key of the tile starting at key0: the
  // tile needs no per-element mask.
  AK_HOST_DEVICE bool interior(int key0, int block_n) const { return last.lo <= key0 && first.hi >= key0 + block_n; }
};

// Rows [row0, row0 + rows) of a sequence of q_len queries over k_len keys.
AK_HOST_DEVICE KeyTiles visible_key_tiles(int row0, int rows, int q_len, int k_len, int window_left, int window_right,
                                          int block_n) {
  const int row_last = (row0 + rows < q_len ? row0 + rows : q_len) - 1;
  KeyTiles t;
  t.first = visible_keys(row0, q_len, k_len, window_left, window_right);
  t.last = visible_keys(row_last, q_len, k_len, window_left, window_right);
  t.begin = t.first.lo / block_n;
  t.end = t.last.hi > t.first.lo ? (t.last.hi + block_n - 1) / block_n : t.begin;
  return t;
}

// The key tiles of a block-sparse query block: the KV blocks listed in its
// CSR row (strictly ascending; core/block_sparse.hpp) clipped to the dense
// range above, each KV block `ratio` kernel tiles wide (block_k = ratio *
// kBlockN). Ascending lists make the blocks that meet [range.begin,
// range.end) one run list[first, last): only its first and last block can be
// cut by the range.
struct SparseKeyTiles {
  KeyTiles range;
  const std::int32_t* list;  // the row's entries, list[first..last)
  int first, last;
  int ratio;
  int skip;  // tiles of list[first]'s block before range.begin
  int n;     // tiles visited
  int block_lo, block_hi;  // the KV blocks that meet the range
  AK_HOST_DEVICE int count() const { return n; }
  // A well-formed (ascending) list only yields blocks in [block_lo, block_hi);
  // an entry outside (a bad device list) visits the tile just past the range
  // instead: in bounds (or zero-filled past the keys) and masked entirely.
  AK_HOST_DEVICE int tile(int it) const {
    const int j = it + skip;
    const int b = list[first + j / ratio];
    return b >= block_lo && b < block_hi ? b * ratio + j % ratio : range.end;
  }
  AK_HOST_DEVICE bool interior(int key0, int block_n) const { return range.interior(key0, block_n); }
};

// First index in list[lo, hi) whose entry is >= value (hi when none).
AK_HOST_DEVICE int lower_bound_i32(const std::int32_t* list, int lo, int hi, int value) {
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (list[mid] < value) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// `range` clipped to the KV blocks list[lo, hi) (one CSR row, already clamped
// to the index buffer by the caller).
AK_HOST_DEVICE SparseKeyTiles sparse_key_tiles(const KeyTiles& range, const std::int32_t* list, int lo, int hi,
                                               int ratio) {
  const int b_begin = range.begin / ratio, b_end = (range.end + ratio - 1) / ratio;
  SparseKeyTiles t{range, list, lo, lo, ratio, 0, 0, b_begin, b_end};
  if (range.count() <= 0 || lo >= hi) return t;
  // The row's first and last entries bound an ascending row: when the range
  // takes the whole row (no window) two independent loads replace the binary
  // searches' chain of dependent ones at the start of every output tile.
  const std::int32_t head = list[lo], tail = list[hi - 1];
  t.first = head >= b_begin ? lo : lower_bound_i32(list, lo, hi, b_begin);
  t.last = tail < b_end ? hi : lower_bound_i32(list, t.first, hi, b_end);
  if (t.last <= t.first) return t;
  t.skip = list[t.first] == b_begin ? range.begin - b_begin * ratio : 0;
  const int cut_back = list[t.last - 1] == b_end - 1 ? b_end * ratio - range.end : 0;
  t.n = (t.last - t.first) * ratio - t.skip - cut_back;
  return t;
}

// The listed key tiles of query block m0 of (batch, head): its CSR row
// (core/block_sparse.hpp) read clamped, so a bad device list computes garbage
// but never reads out of bounds (a tile index past the keys is masked: fa3's
// TMA fills it with zeros, fa2's loader zero-fills rows past the end), within
// the dense `range`. The launcher checked block_q % kBlockM == 0 (a query
// tile lies in one query block) and set block_k_tiles = block_k / kBlockN.
AK_HOST_DEVICE SparseKeyTiles listed_key_tiles(const AttnParams& p, const KeyTiles& range, int batch, int head,
                                               int m0) {
  const std::int64_t row = block_sparse_row(p.block_batch, p.block_heads, p.num_q_blocks, batch, head, m0 / p.block_q);
  const BlockListRange r = block_list_range(p.block_offsets, row, p.block_nnz);
  return sparse_key_tiles(range, p.block_indices, static_cast<int>(r.begin), static_cast<int>(r.end), p.block_k_tiles);
}

// What a launcher of a block-sparse instance checks and derives: the lists
// exist and their blocks are whole kernel tiles (the plan refused anything
// else with AK2115). Returns false when the launch must not happen.
inline bool prepare_listed_launch(AttnParams& a, int block_m, int block_n) {
  if (a.block_offsets == nullptr || a.block_q <= 0 || a.block_k <= 0 || a.block_q % block_m != 0 ||
      a.block_k % block_n != 0)
    return false;
  a.block_k_tiles = a.block_k / block_n;
  return true;
}

}  // namespace attnkit::cuda
