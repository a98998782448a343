// Run under mpirun (CTest does, at 2 and 4 ranks): every rank runs every case
// on every (ring, Ulysses) layout of the world size with the MPI communicator
// and compares its rows with the single-process reference; refusals must be
// catalogued on every rank without a hang (CTest's and mpirun's timeouts).
#include <gtest/gtest.h>

#include <iostream>

#include "attnkit/backends/registry.hpp"
#include "testing/dist_cases.hpp"
#include "testing/parity_cases.hpp"

namespace attnkit {
namespace {

using dist::SequenceParallel;
using testing::DistCase;
using testing::RankResult;

std::shared_ptr<dist::Communicator> g_world;

Platform world_platform() {
  Platform p = detect_cpu_platform();
  p.communicator = g_world;
  return p;
}

const Backend& cpu_flash() { return *default_registry().find("cpu_flash"); }

std::string where(const DistCase& c, const SequenceParallel& sp) {
  return c.name + " ring " + std::to_string(sp.ring_degree) + " ulysses " + std::to_string(sp.ulysses_degree) + " rank " +
         std::to_string(g_world->rank());
}

class Mpi : public ::testing::TestWithParam<DistCase> {};

TEST_P(Mpi, RingUlyssesAndUspEqualTheReference) {
  const DistCase& c = GetParam();
  const testing::DistReference ref = testing::make_reference(c);  // the same data on every rank (one seed)
  const auto layouts = testing::layouts_for(c, g_world->size());
  ASSERT_FALSE(layouts.empty());
  for (const SequenceParallel& sp : layouts) {
    const RankResult r = testing::run_rank(c, ref, sp, cpu_flash(), world_platform());
    // No ASSERT between collectives: every rank must reach the next one.
    EXPECT_TRUE(r.diagnostics.ok()) << where(c, sp) << ": " << r.diagnostics.summary();
    if (!r.diagnostics.ok()) continue;
    EXPECT_TRUE(r.out.clean()) << where(c, sp) << ": " << describe(r.out);
    EXPECT_LE(r.out.rel_l2, r.bound) << where(c, sp) << ": " << describe(r.out);
    if (c.problem.return_lse) EXPECT_LE(r.lse.rel_l2, 1e-4) << where(c, sp) << " LSE: " << describe(r.lse);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Mpi, ::testing::ValuesIn(testing::dist_cases()),
                         [](const auto& info) { return info.param.name; });

Diagnostics plan_only(const Problem& p, const SequenceParallel& sp) {
  auto plan = dist::plan_sequence_parallel(p, sp, cpu_flash(), world_platform());
  return plan ? Diagnostics{} : plan.diagnostics();
}

TEST(MpiRefusals, BadLayoutsAreCataloguedOnEveryRank) {
  const int n = g_world->size();
  const Problem p = testing::make_test_problem(64, 64, n + 1, n + 1, 32, DType::bf16, MaskKind::causal);
  EXPECT_TRUE(plan_only(p, {1, n, 0}).has_code("AK5002")) << "ulysses " << n << " does not divide " << n + 1 << " heads";
  const Problem q = testing::make_test_problem(64, 64, 4, 4, 32, DType::bf16, MaskKind::causal);
  EXPECT_TRUE(plan_only(q, {n, 2, 0}).has_code("AK5007")) << "sp = 2 * world";
  EXPECT_TRUE(plan_only(q, {1, 1, 0}).has_code("AK5007")) << "sp 1 on " << n << " ranks";
  EXPECT_TRUE(dist::check_parallel_degrees(2, 2, 2).has_code("AK5001"));
}

TEST(MpiRefusals, OneRankWithABadShardStopsEveryRank) {
  const DistCase c = testing::dist_cases()[0];
  const testing::DistReference ref = testing::make_reference(c);
  const SequenceParallel sp{g_world->size(), 1, 0};
  const dist::Sharding s(c.problem, sp);
  dist::HostShard shard = dist::make_host_shard(ref.data, s, g_world->rank());
  const int bad = g_world->size() - 1;
  if (g_world->rank() == bad) shard.tensors.k.shape[1] += 1;
  auto plan = dist::plan_sequence_parallel(c.problem, sp, cpu_flash(), world_platform());
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();  // the same verdict on every rank
  std::vector<std::byte> ws((*plan)->workspace_bytes());
  const Diagnostics ran = (*plan)->run(shard.tensors, ws, nullptr);
  EXPECT_TRUE(ran.has_code(g_world->rank() == bad ? "AK1103" : "AK5009")) << ran.summary();
}

// Failures of every rank are printed; the rest only by rank 0.
class FailuresOnly : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::cerr << "[rank " << g_world->rank() << "] " << r.file_name() << ":" << r.line_number() << ": " << r.summary()
                << "\n";
  }
};

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = attnkit::dist::mpi_world();
  if (!world) {
    std::cerr << world.diagnostics().summary() << "\n";
    return 1;
  }
  attnkit::g_world = *world;
  if (attnkit::g_world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new attnkit::FailuresOnly);
  }
  return RUN_ALL_TESTS();
}
