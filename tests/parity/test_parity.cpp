// The parity harness: every registered backend, every case, against the exact
// `reference` (fp64 outputs), with fresh random inputs and poisoned outputs.
// A backend may refuse a case only with a declared-capability reason (AK21xx).
#include <gtest/gtest.h>


#include "attnkit/backends/registry.hpp"
#include "testing/backend_runner.hpp"
#include "testing/reference_check.hpp"
#include "testing/parity_cases.hpp"

namespace attnkit::testing {
namespace {

using ParityParam = BackendCase;

std::vector<ParityParam> all_params() {
  std::vector<ParityParam> params;
  const auto cases = parity_cases();
  for (const Backend* b : default_registry().all()) {
    if (b->name() == "reference") continue;  // the oracle itself
    if (!b->capabilities().built) continue;  // modelled for validation only: no kernel to test
    // Sparse backends compute their own sparsity pattern, not dense attention:
    // tests/sparse checks each against the reference under its exact mask.
    if (b->capabilities().sparse) continue;
    for (const ParityCase& c : cases) params.push_back({std::string(b->name()), c});
  }
  return params;
}

class Parity : public ::testing::TestWithParam<ParityParam> {};

TEST_P(Parity, MatchesReference) {
  const ParityParam& param = GetParam();
  const Backend* backend = default_registry().find(param.backend);
  ASSERT_NE(backend, nullptr);
  const TestPlatform tp = test_platform_for(*backend);
  if (!tp.platform) GTEST_SKIP() << param.backend << ": " << tp.skip_reason;

  auto data = HostProblemData::create(param.c.problem, param.c.data);
  ASSERT_TRUE(data.ok()) << data.diagnostics().summary();
  const Problem& p = data->problem();

  const Diagnostics refused = backend->check(p, *tp.platform);
  if (!refused.empty()) {
    for (const Diagnostic& d : refused)
      ASSERT_EQ(d.code.rfind("AK21", 0), 0u) << "refusal must be a declared capability: " << refused.summary();
    GTEST_SKIP() << param.backend << " declares it cannot run " << p.summary() << ": " << refused.summary();
  }

  const Diagnostics ran = run_backend(*backend, *tp.platform, *data);
  ASSERT_TRUE(ran.ok()) << ran.summary();

  expect_matches_reference(*data);
}

std::string param_name(const ::testing::TestParamInfo<ParityParam>& info) {
  return info.param.backend + "_" + info.param.c.name;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, Parity, ::testing::ValuesIn(all_params()), param_name);

// Runs after the parameterised tests of this binary (gtest orders suites by
// registration; this one is registered later). With ctest each test is its own
// process, so this re-runs the coverage check itself rather than trusting counts.
// A backend must not pass the harness by refusing it: of the cases in the
// dtypes it declares (a tensor-core kernel does not declare fp32), it has to
// accept at least half.
TEST(ParityCoverage, EachRunnableBackendRunsMostCasesOfItsDtypes) {
  const auto cases = parity_cases();
  for (const Backend* b : default_registry().all()) {
    const TestPlatform tp = test_platform_for(*b);
    if (!tp.platform || !b->capabilities().built || b->capabilities().sparse) continue;
    int in_dtype = 0, accepted = 0;
    for (const ParityCase& c : cases) {
      if (!b->capabilities().dtypes.contains(c.problem.dtype)) continue;
      ++in_dtype;
      if (b->check(c.problem, *tp.platform).empty()) ++accepted;
    }
    EXPECT_GT(in_dtype, 10) << b->name();
    EXPECT_GE(accepted * 2, in_dtype) << b->name() << " accepts only " << accepted << " of the " << in_dtype
                                      << " parity cases in its dtypes";
  }
}

}  // namespace
}  // namespace attnkit::testing
