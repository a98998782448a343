#include "testing/reference_check.hpp"

#include <gtest/gtest.h>

#include "attnkit/backends/reference.hpp"
#include "testing/error_norms.hpp"

namespace attnkit::testing {

void expect_matches_reference(const HostProblemData& data) {
  const Problem& p = data.problem();
  Problem ref_problem = p;
  ref_problem.out_dtype_override = DType::f64;
  HostTensor ref_out = data.make_output(DType::f64);
  HostTensor ref_lse = p.return_lse ? data.make_lse() : HostTensor();
  const Diagnostics ref_ran =
      reference_attention(ref_problem, data.tensors_with_outputs(ref_out.view(), ref_lse.view()));
  ASSERT_TRUE(ref_ran.ok()) << ref_ran.summary();

  const AttentionTensors t = data.tensors();
  const ErrorStats out_err = compare(t.out, ref_out.view());
  EXPECT_EQ(out_err.not_finite, 0) << "unwritten or non-finite outputs: " << describe(out_err);
  EXPECT_EQ(out_err.mismatched_infinities, 0) << describe(out_err);
  EXPECT_LE(out_err.rel_l2, rel_l2_bound(p)) << p.summary() << ": " << describe(out_err);
  if (p.return_lse) {
    const ErrorStats lse_err = compare(t.lse, ref_lse.view());
    EXPECT_EQ(lse_err.not_finite, 0) << "LSE: " << describe(lse_err);
    EXPECT_EQ(lse_err.mismatched_infinities, 0) << "LSE of fully masked rows must be -inf: " << describe(lse_err);
    EXPECT_LE(lse_err.rel_l2, 1e-4) << "LSE: " << describe(lse_err);
  }
}

}  // namespace attnkit::testing
