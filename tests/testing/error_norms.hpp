#pragma once
// Test-side names for the library's output comparison (core/error_stats.hpp).
#include "attnkit/core/error_stats.hpp"

namespace attnkit::testing {
using attnkit::describe;
using attnkit::ErrorStats;
using attnkit::rel_l2_bound;
inline ErrorStats compare(const TensorView& got, const TensorView& reference) {
  return compare_outputs(got, reference);
}
}  // namespace attnkit::testing
