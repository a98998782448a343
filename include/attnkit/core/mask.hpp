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
// bottom-right-aligned diagonal j = i + (sk - sq).
AK_HOST_DEVICE KeyRange visible_keys(int i, int sq, int sk, int window_left, int window_right) {
  const int diag = i + (sk - sq);
  int lo = window_left < 0 ? 0 : diag - window_left;
  int hi = window_right < 0 ? sk : diag + window_right + 1;
  lo = lo < 0 ? 0 : lo;
  hi = hi > sk ? sk : hi;
  if (hi < lo) hi = lo;
  return {lo, hi};
}

}  // namespace attnkit
