#pragma once
// Error measures between a backend's output and the reference's.
#include <cstdint>
#include <string>

#include "attnkit/core/tensor.hpp"

namespace attnkit::testing {

struct ErrorStats {
  double rel_l2 = 0.0;        // ||a - b||_2 / ||b||_2 over finite reference elements
  double max_abs = 0.0;
  std::int64_t not_finite = 0;  // elements of `a` that are NaN/Inf where b is finite (unwritten or broken)
  std::int64_t mismatched_infinities = 0;  // b is +-inf (LSE of an empty row) and a is not the same
  std::int64_t count = 0;
};

// Compares two views of equal shape element by element (any float dtypes).
ErrorStats compare(const TensorView& a, const TensorView& b);

// The relative L2 bound for outputs stored in `dtype` (fp32 ~1e-5, 16-bit ~1e-2).
double rel_l2_bound(DType dtype);

std::string describe(const ErrorStats& e);

}  // namespace attnkit::testing
