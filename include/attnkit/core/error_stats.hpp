#pragma once
// Error of an output against the reference: relative L2 and max-abs over the
// finite reference elements, plus counts of outputs that should have been
// finite (unwritten / broken) and of infinities (the -inf LSE of empty rows)
// that were not reproduced exactly.
#include <cstdint>
#include <string>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct ErrorStats {
  double rel_l2 = 0.0;
  double max_abs = 0.0;
  std::int64_t not_finite = 0;
  std::int64_t mismatched_infinities = 0;
  std::int64_t count = 0;
  double diff_sq = 0.0;  // sum (a - b)^2, for merging partial comparisons
  double ref_sq = 0.0;   // sum b^2

  // Adds another comparison's counts (e.g. of another sampled head).
  void merge(const ErrorStats& other);
  bool clean() const { return not_finite == 0 && mismatched_infinities == 0; }
};

// Element-by-element comparison of two views of equal shape (any float dtypes).
ErrorStats compare_outputs(const TensorView& got, const TensorView& reference);

// The relative L2 bound for outputs stored in `dtype`: fp32 1e-5, 16-bit 1e-2.
double rel_l2_bound(DType dtype);
struct Problem;
// The bound a backend's output for `p` is held to: its output dtype's, or the
// 16-bit inputs' when the output is wider (an fp32 output of bf16 / fp16
// inputs: P is rounded to 16 bits for P V on cpu_flash's bf16 path and in the
// flash kernels, docs/perf/cpu.md).
double rel_l2_bound(const Problem& p);

std::string describe(const ErrorStats& e);

}  // namespace attnkit
