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
// Any side is exact, INT_MAX included: diag - left is formed only when it is
// positive and diag + right + 1 only when it is below sk, so neither can
// overflow (callers keep i, |diagonal| and sk within kMaxSeqlen = 2^30).
AK_HOST_DEVICE KeyRange visible_keys_on_diagonal(int i, int diagonal, int sk, int window_left, int window_right) {
  const int diag = i + diagonal;
  int lo = window_left < 0 || window_left >= diag ? 0 : diag - window_left;
  int hi = window_right < 0 || diag >= sk - window_right - 1 ? sk : diag + window_right + 1;
  lo = lo > sk ? sk : lo;  // a shard's diagonal may lie past its last key
  if (hi < lo) hi = lo;
  return {lo, hi};
}

// The bottom-right-aligned diagonal j = i + (sk - sq) of every whole sequence.
AK_HOST_DEVICE KeyRange visible_keys(int i, int sq, int sk, int window_left, int window_right) {
  return visible_keys_on_diagonal(i, sk - sq, sk, window_left, window_right);
}

}  // namespace attnkit
