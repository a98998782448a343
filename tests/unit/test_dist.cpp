// The dist/ layer without MPI: the LSE merge alone, the sharding and the ring
// schedule as pure functions, and whole ring / Ulysses / USP runs on the
// in-process group (ranks as threads) against the single-process reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/backends/registry.hpp"
#include "attnkit/core/lse_merge.hpp"
#include "attnkit/dist/communicator.hpp"
#include "dist/ring_schedule.hpp"
#include "testing/dist_cases.hpp"
#include "testing/parity_cases.hpp"

namespace attnkit {
namespace {

using dist::SequenceParallel;
using testing::DistCase;
using testing::RankResult;

// ---- the LSE merge, alone -------------------------------------------------------

// Rows of softmax(s) . v over a subset of keys, in fp64: (out, lse), lse = -inf
// and out = 0 for an empty subset.
struct Exact {
  std::vector<double> out;
  double lse;
};
Exact exact(const std::vector<double>& s, const std::vector<std::vector<double>>& v, std::size_t lo, std::size_t hi) {
  const int dim = static_cast<int>(v[0].size());
  Exact e{std::vector<double>(dim, 0.0), -INFINITY};
  if (lo >= hi) return e;
  double m = -INFINITY, l = 0.0;
  for (std::size_t j = lo; j < hi; ++j) m = std::max(m, s[j]);
  for (std::size_t j = lo; j < hi; ++j) {
    const double w = std::exp(s[j] - m);
    l += w;
    for (int d = 0; d < dim; ++d) e.out[d] += w * v[j][d];
  }
  for (double& x : e.out) x /= l;
  e.lse = m + std::log(l);
  return e;
}

TEST(LseMerge, TwoPartialsEqualTheWholeIncludingEmptyParts) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  const int dim = 8, keys = 12, rows = 40;
  // Row r splits its keys at r % (keys + 1): split 0 leaves part A empty, split
  // `keys` part B; rows with 0 keys stay -inf on both sides. Logits are shifted
  // by +-80 so e^lse would overflow fp32.
  std::vector<float> acc(rows * dim), acc_lse(rows), part(rows * dim), part_lse(rows);
  std::vector<Exact> whole(rows);
  for (int r = 0; r < rows; ++r) {
    const int n = r % 7 == 6 ? 0 : keys;
    std::vector<double> s(keys);
    std::vector<std::vector<double>> v(keys, std::vector<double>(dim));
    for (int j = 0; j < keys; ++j) {
      s[j] = normal(rng) * 3 + (r % 2 ? 80.0 : -80.0);
      for (double& x : v[j]) x = normal(rng);
    }
    const std::size_t split = std::min<std::size_t>(r % (keys + 1), n);
    const Exact a = exact(s, v, 0, split), b = exact(s, v, split, n);
    whole[r] = exact(s, v, 0, n);
    for (int d = 0; d < dim; ++d) {
      acc[r * dim + d] = static_cast<float>(a.out[d]);
      part[r * dim + d] = static_cast<float>(b.out[d]);
    }
    acc_lse[r] = static_cast<float>(a.lse);
    part_lse[r] = static_cast<float>(b.lse);
  }
  MergeRows m;
  m.acc_out = acc.data();
  m.acc_row_stride = dim;
  m.acc_lse = acc_lse.data();
  m.acc_lse_row_stride = 1;
  m.part_out = part.data();
  m.part_row_stride = dim;
  m.part_lse = part_lse.data();
  m.part_lse_row_stride = 1;
  m.rows = rows;
  m.heads = 1;
  m.dim = dim;
  merge_partial_host(m);
  for (int r = 0; r < rows; ++r) {
    if (std::isinf(whole[r].lse)) {
      EXPECT_TRUE(std::isinf(acc_lse[r]) && acc_lse[r] < 0) << "row " << r << " saw no key: LSE must stay -inf";
      for (int d = 0; d < dim; ++d) EXPECT_EQ(acc[r * dim + d], 0.0f) << "row " << r;
      continue;
    }
    EXPECT_NEAR(acc_lse[r], whole[r].lse, 1e-4 * std::abs(whole[r].lse) + 1e-5) << "row " << r;
    for (int d = 0; d < dim; ++d) EXPECT_NEAR(acc[r * dim + d], whole[r].out[d], 2e-6) << "row " << r << " dim " << d;
  }
}

TEST(LseMerge, Bf16PartialsAndASinkOfZeros) {
  // acc = (1, 2), lse 0; partial bf16 (3, 4), lse 0: the average. Then a sink
  // logit log(2) (no value): outputs scale by e^lse / (e^lse + 2) = 1/2.
  std::vector<float> acc{1, 2}, lse{0};
  const std::vector<std::uint16_t> part{float_to_bf16(3), float_to_bf16(4)};
  const std::vector<float> part_lse{0};
  MergeRows m;
  m.acc_out = acc.data();
  m.acc_lse = lse.data();
  m.part_out = part.data();
  m.part_dtype = DType::bf16;
  m.part_lse = part_lse.data();
  m.rows = 1;
  m.heads = 1;
  m.dim = 2;
  merge_partial_host(m);
  EXPECT_FLOAT_EQ(acc[0], 2.0f);
  EXPECT_FLOAT_EQ(acc[1], 3.0f);
  EXPECT_NEAR(lse[0], std::log(2.0f), 1e-6);
  const float sink = std::log(2.0f);
  m.part_out = nullptr;
  m.part_lse = &sink;
  merge_partial_host(m);
  EXPECT_FLOAT_EQ(acc[0], 1.0f);
  EXPECT_FLOAT_EQ(acc[1], 1.5f);
  EXPECT_NEAR(lse[0], std::log(4.0f), 1e-6);
}

// ---- sharding and the ring schedule ------------------------------------------

TEST(Sharding, EveryTokenOnExactlyOneRank) {
  for (int n : {0, 1, 5, 16, 37, 131})
    for (int R = 1; R <= 4; ++R)
      for (int U = 1; U <= 3; ++U)
        for (bool zigzag : {false, true}) {
          const SequenceParallel sp{R, U, 0};
          std::vector<int> seen(n, 0);
          for (int rank = 0; rank < R * U; ++rank) {
            std::int64_t prev_end = -1;
            for (const dist::TokenRange& r : dist::rank_tokens(n, sp, rank, zigzag)) {
              EXPECT_GT(r.length, 0);
              if (!zigzag) EXPECT_EQ(prev_end < 0 || prev_end == r.start, true);  // contiguous without zigzag
              for (std::int64_t i = r.start; i < r.start + r.length; ++i) ++seen[i];
              prev_end = r.start + r.length;
            }
          }
          for (int i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "n " << n << " R " << R << " U " << U << " token " << i;
        }
}

TEST(Sharding, ZigzagGivesEveryRingRankOneEarlyAndOneLatePart) {
  const auto chunk = dist::ring_chunk(64, 4, 1, true);
  ASSERT_EQ(chunk.size(), 2u);
  EXPECT_EQ(chunk[0], (dist::TokenRange{8, 8}));
  EXPECT_EQ(chunk[1], (dist::TokenRange{48, 8}));
}

// Every (query, key) pair a causal mask keeps is computed exactly once over all
// ranks and hops of the zigzag schedule, and no other pair is.
TEST(RingSchedule, CausalZigzagComputesEveryVisiblePairOnce) {
  for (int R = 1; R <= 6; ++R)
    for (int n : {R, 2 * R, 37, 64}) {
      std::vector<int> count(static_cast<std::size_t>(n) * n, 0);
      for (int rank = 0; rank < R; ++rank)
        for (int hop = 0; hop < R; ++hop) {
          const int src = dist::ring_source(rank, hop, R);
          const auto mine = dist::ring_chunk(n, R, rank, true), theirs = dist::ring_chunk(n, R, src, true);
          for (const dist::HopCall& c : dist::ring_hop_calls(rank, src, true, MaskKind::causal, false)) {
            const dist::TokenRange q = mine[c.q == dist::Segment::first ? 0 : 1];
            const dist::TokenRange k = theirs[c.k == dist::Segment::first ? 0 : 1];
            for (std::int64_t i = 0; i < q.length; ++i)
              for (std::int64_t j = 0; j < k.length; ++j)
                if (c.mask == dist::HopMask::none || j <= i + (k.length - q.length))
                  ++count[(q.start + i) * n + k.start + j];
          }
        }
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          ASSERT_EQ(count[i * n + j], j <= i ? 1 : 0) << "R " << R << " n " << n << " query " << i << " key " << j;
    }
}

TEST(RingSchedule, EveryHopAfterTheFirstIsHalfABlockOnEveryRank) {
  for (int R = 2; R <= 8; ++R)
    for (int rank = 0; rank < R; ++rank)
      for (int hop = 1; hop < R; ++hop) {
        const auto calls = dist::ring_hop_calls(rank, dist::ring_source(rank, hop, R), true, MaskKind::causal, false);
        ASSERT_EQ(calls.size(), 2u);  // two unmasked quarter blocks
        for (const dist::HopCall& c : calls) EXPECT_EQ(c.mask, dist::HopMask::none);
      }
}

// ---- whole calls on the in-process group ---------------------------------------

// Runs fn(rank communicator) on `world` threads and returns each rank's result.
std::vector<RankResult> on_threads(int world, const std::function<RankResult(const Platform&)>& fn) {
  std::vector<RankResult> results(world);
  const auto comms = dist::make_in_process_group(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      Platform platform = detect_cpu_platform();
      platform.communicator = comms[r];
      results[r] = fn(platform);
    });
  for (std::thread& t : threads) t.join();
  return results;
}

const Backend& cpu_flash() { return *default_registry().find("cpu_flash"); }

void expect_matches(const std::vector<RankResult>& results, const DistCase& c, const SequenceParallel& sp) {
  const std::string where = c.name + " ring " + std::to_string(sp.ring_degree) + " ulysses " + std::to_string(sp.ulysses_degree);
  for (std::size_t r = 0; r < results.size(); ++r) {
    const RankResult& x = results[r];
    ASSERT_TRUE(x.diagnostics.ok()) << where << " rank " << r << ": " << x.diagnostics.summary();
    EXPECT_TRUE(x.out.clean()) << where << " rank " << r << ": " << describe(x.out);
    EXPECT_LE(x.out.rel_l2, x.bound) << where << " rank " << r << ": " << describe(x.out);
    if (c.problem.return_lse) {
      EXPECT_TRUE(x.lse.clean()) << where << " rank " << r << " LSE: " << describe(x.lse);
      EXPECT_LE(x.lse.rel_l2, 1e-4) << where << " rank " << r << " LSE: " << describe(x.lse);
    }
  }
}

class InProcess : public ::testing::TestWithParam<DistCase> {};

TEST_P(InProcess, RingUlyssesAndUspEqualTheReference) {
  const DistCase& c = GetParam();
  const testing::DistReference ref = testing::make_reference(c);
  for (int world : {1, 2, 3, 4})
    for (const SequenceParallel& sp : testing::layouts_for(c, world))
      expect_matches(on_threads(world, [&](const Platform& p) { return testing::run_rank(c, ref, sp, cpu_flash(), p); }),
                     c, sp);
}

INSTANTIATE_TEST_SUITE_P(Cases, InProcess, ::testing::ValuesIn(testing::dist_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(InProcessRing, ChunksThatSeeNothingOrHoldNothingAreSkipped) {
  DistCase c = testing::dist_cases()[2];  // window (19, 6) over 128 tokens
  ASSERT_EQ(c.name, "window");
  const testing::DistReference ref = testing::make_reference(c);
  const SequenceParallel sp{4, 1, 0};
  const auto results = on_threads(4, [&](const Platform& p) { return testing::run_rank(c, ref, sp, cpu_flash(), p); });
  expect_matches(results, c, sp);
  // Chunks of 32: the window reaches only the neighbouring chunk, so half of
  // the 4 hops of every rank are skipped.
  for (const RankResult& r : results) {
    EXPECT_EQ(r.stats.hops, 4);
    EXPECT_GE(r.stats.skipped_calls, 1);
  }
  // Three tokens split in 8 zigzag parts: most parts are empty.
  DistCase tiny{"tiny", testing::make_test_problem(3, 3, 4, 4, 32, DType::bf16, MaskKind::causal)};
  const testing::DistReference tiny_ref = testing::make_reference(tiny);
  const auto tiny_results =
      on_threads(4, [&](const Platform& p) { return testing::run_rank(tiny, tiny_ref, sp, cpu_flash(), p); });
  expect_matches(tiny_results, tiny, sp);
  for (const RankResult& r : tiny_results) EXPECT_GE(r.stats.skipped_calls, 1);
}

// ---- refusals: on every rank, and nobody waits ----------------------------------

std::vector<RankResult> plan_only(int world, const Problem& p, const SequenceParallel& sp, const Backend& inner) {
  return on_threads(world, [&](const Platform& platform) {
    RankResult r;
    auto plan = dist::plan_sequence_parallel(p, sp, inner, platform);
    if (!plan) r.diagnostics = plan.diagnostics();
    return r;
  });
}

void expect_code_everywhere(const std::vector<RankResult>& results, const char* code) {
  for (std::size_t r = 0; r < results.size(); ++r)
    EXPECT_TRUE(results[r].diagnostics.has_code(code)) << "rank " << r << ": " << results[r].diagnostics.summary();
}

TEST(InProcessRefusals, BadLayoutsAreCataloguedOnEveryRank) {
  const Problem p = testing::make_test_problem(64, 64, 4, 4, 32, DType::bf16, MaskKind::causal);
  expect_code_everywhere(plan_only(3, p, {1, 3, 0}, cpu_flash()), "AK5002");  // 3 does not divide 4 heads
  expect_code_everywhere(plan_only(4, p, {2, 1, 0}, cpu_flash()), "AK5007");  // 4 ranks, sp 2
  expect_code_everywhere(plan_only(2, p, {0, 2, 0}, cpu_flash()), "AK5005");
  Problem paged = p;
  paged.paged_kv = PagedKv{16};
  expect_code_everywhere(plan_only(2, paged, {2, 1, 0}, cpu_flash()), "AK5008");
  Problem gated = p;  // the gate is not split with the sequence and heads (Ulysses)
  gated.mask = MaskKind::none;
  gated.has_gate = true;
  expect_code_everywhere(plan_only(2, gated, {1, 2, 0}, cpu_flash()), "AK5008");
  EXPECT_TRUE(dist::check_parallel_degrees(2, 2, 3).has_code("AK5001"));
}

// A backend that returns no LSE cannot compute ring hops.
class NoLseBackend final : public Backend {
 public:
  NoLseBackend() : caps_(cpu_flash().capabilities()) { caps_.lse = false; }
  std::string_view name() const override { return "no_lse"; }
  std::string_view description() const override { return "cpu_flash without its LSE"; }
  const Capabilities& capabilities() const override { return caps_; }
  Result<std::unique_ptr<Plan>> plan(const Problem& p, const Platform& platform) const override {
    if (Diagnostics why = check(p, platform); !why.ok()) return why;
    return cpu_flash().plan(p, platform);
  }

 private:
  Capabilities caps_;
};

TEST(InProcessRefusals, RingNeedsABackendThatReturnsTheLse) {
  const NoLseBackend no_lse;
  EXPECT_FALSE(ring_capable(no_lse.capabilities()));
  const Problem p = testing::make_test_problem(64, 64, 4, 4, 32, DType::bf16, MaskKind::none);
  expect_code_everywhere(plan_only(2, p, {2, 1, 0}, no_lse), "AK5003");
  // Ulysses alone needs no LSE.
  for (const RankResult& r : plan_only(2, p, {1, 2, 0}, no_lse)) EXPECT_TRUE(r.diagnostics.ok()) << r.diagnostics.summary();
}

TEST(InProcessRefusals, OneRankWithABadShardStopsEveryRankBeforeAnyTransfer) {
  const DistCase c = testing::dist_cases()[0];
  const testing::DistReference ref = testing::make_reference(c);
  const SequenceParallel sp{2, 2, 0};
  const auto results = on_threads(4, [&](const Platform& platform) {
    RankResult r;
    const dist::Sharding s(c.problem, sp);
    dist::HostShard shard = dist::make_host_shard(ref.data, s, platform.communicator->rank());
    if (platform.communicator->rank() == 1) shard.tensors.q.shape[1] -= 1;  // a wrong local length
    auto plan = dist::plan_sequence_parallel(c.problem, sp, cpu_flash(), platform);
    if (!plan) return RankResult{plan.diagnostics()};
    std::vector<std::byte> ws((*plan)->workspace_bytes());
    r.diagnostics = (*plan)->run(shard.tensors, ws, nullptr);
    return r;
  });
  EXPECT_TRUE(results[1].diagnostics.has_code("AK1103")) << results[1].diagnostics.summary();
  for (int r : {0, 2, 3}) EXPECT_TRUE(results[r].diagnostics.has_code("AK5009")) << results[r].diagnostics.summary();
}

TEST(InProcessRefusals, RanksGivenDifferentLengthsAllRefuse) {
  DistCase c = testing::dist_cases()[5];  // varlen causal
  ASSERT_EQ(c.problem.layout, Layout::thd);
  const testing::DistReference ref = testing::make_reference(c);
  DistCase other = c;
  other.lens = {37, 0, 88, 7};  // same total, different sequences
  const testing::DistReference other_ref = testing::make_reference(other);
  const SequenceParallel sp{2, 1, 0};
  const auto results = on_threads(2, [&](const Platform& platform) {
    const int rank = platform.communicator->rank();
    const testing::DistReference& mine = rank == 1 ? other_ref : ref;
    const dist::Sharding s(c.problem, sp, mine.data.q_lens(), mine.data.k_lens());
    dist::HostShard shard = dist::make_host_shard(mine.data, s, rank);
    auto plan = dist::plan_sequence_parallel(c.problem, sp, cpu_flash(), platform);
    if (!plan) return RankResult{plan.diagnostics()};
    std::vector<std::byte> ws((*plan)->workspace_bytes());
    return RankResult{(*plan)->run(shard.tensors, ws, nullptr)};
  });
  expect_code_everywhere(results, "AK5012");
}

// ---- NCCL, loaded at first use ----------------------------------------------------

// NCCL is not linked (dist/nccl_library.hpp): the first call loads it, with
// no GPU needed for a unique id. Without a network NCCL's own bootstrap may
// refuse (AK5011), but loading it must not (AK5010).
TEST(NcclLibrary, LoadsAtFirstUseWithoutAGpu) {
  if (!dist::nccl_compiled()) GTEST_SKIP() << "this build has no NCCL (nccl.h next to the CUDA toolkit)";
  auto id = dist::nccl_unique_id();
  if (id) {
    EXPECT_TRUE(std::any_of(id->begin(), id->end(), [](auto b) { return b != 0; }));
  } else {
    EXPECT_FALSE(id.diagnostics().has_code("AK5010")) << id.diagnostics().summary();
    EXPECT_TRUE(id.diagnostics().has_code("AK5011")) << id.diagnostics().summary();
  }
}

}  // namespace
}  // namespace attnkit
