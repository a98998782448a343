#pragma once
// Which key tiles a block of query rows must visit, shared by the sm_80 and
// sm_90 mainloops: the union of the rows' visible ranges (causal, sliding
// window, sequence ends; core/mask.hpp), in whole tiles of kBlockN keys.
// Visible ranges move monotonically with the row, so the first and the last
// row bound the union.
#include "attnkit/core/host_device.hpp"
#include "attnkit/core/mask.hpp"

namespace attnkit::cuda {

struct KeyTiles {
  int begin, end;          // tiles [begin, end) hold a key some row sees
  KeyRange first, last;    // the visible keys of the block's first and last row
  AK_HOST_DEVICE int count() const { return end - begin; }
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

}  // namespace attnkit::cuda
