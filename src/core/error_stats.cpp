#include "attnkit/core/error_stats.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <fmt/format.h>

#include "attnkit/core/problem.hpp"

namespace attnkit {

void ErrorStats::merge(const ErrorStats& o) {
  diff_sq += o.diff_sq;
  ref_sq += o.ref_sq;
  max_abs = std::max(max_abs, o.max_abs);
  not_finite += o.not_finite;
  mismatched_infinities += o.mismatched_infinities;
  count += o.count;
  rel_l2 = ref_sq > 0.0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
}

ErrorStats compare_outputs(const TensorView& a, const TensorView& b) {
  ErrorStats e;
  if (a.numel() == 0) return e;
  std::array<std::int64_t, kMaxRank> idx{};
  while (true) {
    std::int64_t oa = 0, ob = 0;
    for (int d = 0; d < a.rank; ++d) {
      oa += idx[d] * a.strides[d];
      ob += idx[d] * b.strides[d];
    }
    const double x = load_as_double(a.data, a.dtype, oa);
    const double y = load_as_double(b.data, b.dtype, ob);
    ++e.count;
    if (std::isinf(y)) {
      if (x != y) ++e.mismatched_infinities;
    } else if (!std::isfinite(x)) {
      ++e.not_finite;
    } else {
      e.diff_sq += (x - y) * (x - y);
      e.ref_sq += y * y;
      e.max_abs = std::max(e.max_abs, std::fabs(x - y));
    }
    int d = a.rank - 1;
    while (d >= 0 && ++idx[d] == a.shape[d]) idx[d--] = 0;
    if (d < 0) break;
  }
  e.rel_l2 = e.ref_sq > 0.0 ? std::sqrt(e.diff_sq / e.ref_sq) : std::sqrt(e.diff_sq);
  return e;
}

double rel_l2_bound(DType dtype) {
  switch (dtype) {
    case DType::f64:
    case DType::f32: return 1e-5;
    case DType::f16:
    case DType::bf16: return 1e-2;
    default: return 5e-2;
  }
}

double rel_l2_bound(const Problem& p) {
  const double out = rel_l2_bound(p.out_dtype());
  return p.dtype == DType::f16 || p.dtype == DType::bf16 ? std::max(out, rel_l2_bound(p.dtype)) : out;
}

std::string describe(const ErrorStats& e) {
  return fmt::format("rel_l2={:.3g} max_abs={:.3g} not_finite={} mismatched_inf={} of {}", e.rel_l2, e.max_abs,
                     e.not_finite, e.mismatched_infinities, e.count);
}

}  // namespace attnkit
