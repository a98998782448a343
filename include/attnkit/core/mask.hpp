#pragma once
// Which keys a query row may see, shared by every backend (host and device) so
// that "causal" means the same thing everywhere.
#include "attnkit/core/host_device.hpp"

namespace attnkit {

// Keys j with lo <= j < hi are visible to query i (before block/custom masks).
struct KeyRange {
  int lo;
  int hi;
};

// window_left / window_right < 0 mean unbounded; the window is centred on the
// diagonal j = i + diagonal: query 0 is aligned with key `diagonal`.
AK_HOST_DEVICE KeyRange visible_keys_on_diagonal(int i, int diagonal, int sk, int window_left, int window_right) {
  const int diag = i + diagonal;
  int lo = window_left < 0 ? 0 : diag - window_left;
  int hi = window_right < 0 ? sk : diag + window_right + 1;
  lo = lo < 0 ? 0 : (lo > sk ? sk : lo);  // a shard's diagonal may lie past its last key
  hi = hi > sk ? sk : hi;
  if (hi < lo) hi = lo;
  return {lo, hi};
}

// The bottom-right-aligned diagonal j = i + (sk - sq) of every whole sequence.
AK_HOST_DEVICE KeyRange visible_keys(int i, int sq, int sk, int window_left, int window_right) {
  return visible_keys_on_diagonal(i, sk - sq, sk, window_left, window_right);
}

}  // namespace attnkit
