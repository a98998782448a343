// Request-scoped skip-softmax on the CPU (cpu_flash run_at): an independent
// fp64 oracle of the rule of docs/sparse.md, the statistic, the step gate, the
// block granularity, and the error against dense on video-like inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "sparse_test_util.hpp"

namespace attnkit::sparse {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The rule, row by row over aligned key blocks of `block` keys: a row skips a
// block when it has seen a key and the block's largest logit is below its
// running maximum by more than -ln(factor / sk). Returns (out [b, s, h, dv]
// fp64, rows-blocks decided, skipped). Unmasked BSHD problems only.
struct Oracle {
  std::vector<double> out;
  std::int64_t decided = 0, skipped = 0;
};
Oracle skip_softmax_oracle(const Problem& p, const AttentionTensors& t, double factor, int block) {
  Oracle o;
  o.out.assign(static_cast<std::size_t>(p.batch) * p.seqlen_q * p.heads_q * p.head_dim_v, 0.0);
  const double scale = p.softmax_scale(), log_thr = std::log(factor / p.seqlen_k);
  auto at = [&](const TensorView& x, int b, std::int64_t s, int h, int c) {
    const HeadRows r = head_rows(p.layout, x.strides.data(), b, h, 0);
    return load_as_double(x.data, x.dtype, r.offset + s * r.row_stride + c);
  };
  std::vector<double> sc(p.seqlen_k), acc(p.head_dim_v);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const int g = h / p.gqa_ratio();
      for (int i = 0; i < p.seqlen_q; ++i) {
        for (int j = 0; j < p.seqlen_k; ++j) {
          double dot = 0;
          for (int c = 0; c < p.head_dim_qk; ++c) dot += at(t.q, b, i, h, c) * at(t.k, b, j, g, c);
          sc[j] = dot * scale;
        }
        double m = kNegInf, l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j0 = 0; j0 < p.seqlen_k; j0 += block) {
          const int j1 = std::min(p.seqlen_k, j0 + block);
          double blk = kNegInf;
          for (int j = j0; j < j1; ++j) blk = std::max(blk, sc[j]);
          ++o.decided;
          if (m != kNegInf && blk < m + log_thr) {
            ++o.skipped;
            continue;
          }
          const double m_new = std::max(m, blk), alpha = std::exp(m - m_new);
          l *= alpha;
          for (double& x : acc) x *= alpha;
          for (int j = j0; j < j1; ++j) {
            const double e = std::exp(sc[j] - m_new);
            l += e;
            for (int c = 0; c < p.head_dim_v; ++c) acc[c] += e * at(t.v, b, j, g, c);
          }
          m = m_new;
        }
        for (int c = 0; c < p.head_dim_v; ++c)
          o.out[((static_cast<std::size_t>(b) * p.seqlen_q + i) * p.heads_q + h) * p.head_dim_v + c] = acc[c] / l;
      }
    }
  return o;
}

Problem video_problem(DType dtype) { return testing::video_problem({6, 8, 12}, 0, 1, 4, 2, 64, dtype); }

struct SkipRun {
  HostProblemData data;
  std::vector<double> out;
  SparsityStats stats;
};

// cpu_flash on video-like inputs at step `step` of a request with skip-softmax `factor` (0: none).
SkipRun run(const Problem& p, double factor, int step, int block = 128, std::uint64_t seed = 5) {
  auto data = HostProblemData::create(p, {.seed = seed});
  EXPECT_TRUE(data.ok());
  testing::fill_video_like(p, data->tensors(), {.seed = seed});
  auto plan = make_cpu_flash_backend({CpuIsa::best, 2})->plan(p, detect_cpu_platform());
  EXPECT_TRUE(plan.ok());
  std::vector<std::byte> ws((*plan)->workspace_bytes());
  SkipRun r{std::move(*data), {}, {}};
  CallContext where;
  where.step = step;
  where.stats = &r.stats;
  if (factor > 0) where.skip_softmax = SkipSoftmaxParams{factor, 3, block};
  const Diagnostics ran = (*plan)->run_at(where, r.data.tensors(), ws, nullptr);
  EXPECT_TRUE(ran.ok()) << ran.summary();
  r.out = testing::as_doubles(r.data.tensors().out);
  return r;
}

using testing::rel_l2;

TEST(SkipSoftmax, MatchesTheRuleAndCountsWhatItSkips) {
  const Problem p = video_problem(DType::f32);
  for (int block : {64, 128})
    for (double factor : {0.5, 5.0, 50.0}) {
      SkipRun r = run(p, factor, 4, block);
      const Oracle o = skip_softmax_oracle(p, r.data.tensors(), factor, block);
      EXPECT_LT(rel_l2(r.out, o.out), 1e-5) << "block " << block << " factor " << factor;
      // Pairs of (row, block) with a visible key: every pair here (no mask).
      EXPECT_EQ(r.stats.blocks, o.decided);
      EXPECT_NEAR(double(r.stats.blocks_skipped), double(o.skipped), 0.002 * o.decided)
          << "block " << block << " factor " << factor;
    }
}

TEST(SkipSoftmax, GranularityIsAParameter) {
  const Problem p = video_problem(DType::f32);
  SkipRun a = run(p, 50.0, 4, 64), b = run(p, 50.0, 4, 128);
  EXPECT_GT(a.stats.blocks_skipped, 0);
  EXPECT_NE(a.out, b.out);  // other blocks, other decisions: kernels agree only at equal block_k
  EXPECT_EQ(a.stats.blocks * 5, b.stats.blocks * 9);  // 576 keys per row: 9 blocks of 64, 5 of 128
}

TEST(SkipSoftmax, BeforeStartStepAndWithoutAStepItIsDense) {
  const Problem p = video_problem(DType::bf16);
  SkipRun dense = run(p, 0.0, 0);
  for (int step : {-1, 2}) {  // start_step is 3
    SkipRun r = run(p, 50.0, step);
    EXPECT_EQ(r.out, dense.out) << step;
    EXPECT_EQ(r.stats.blocks, 0);
  }
  SkipRun on = run(p, 50.0, 3);
  EXPECT_GT(on.stats.blocks_skipped, 0);
}

// Accuracy against dense on video-like inputs, bf16: the bounds the docs state.
TEST(SkipSoftmax, ErrorAgainstDenseStaysSmallAtModerateThresholds) {
  const Problem p = video_problem(DType::bf16);
  const SkipRun dense = run(p, 0.0, 0);
  double last_skip = -1;
  for (auto [factor, bound] : {std::pair{0.5, 0.01}, {5.0, 0.02}, {50.0, 0.05}}) {
    SkipRun r = run(p, factor, 4);
    const double err = rel_l2(r.out, dense.out), skipped = r.stats.skipped_fraction();
    EXPECT_LT(err, bound) << "factor " << factor << ": skipped " << skipped;
    EXPECT_GE(skipped, last_skip);  // a higher threshold skips at least as much
    last_skip = skipped;
  }
  EXPECT_GT(last_skip, 0.1);
}

TEST(SkipSoftmax, RefusedWithBlockSparseLists) {
  Problem p = video_problem(DType::f32);
  p.block_sparse = BlockSparse{64, 64, 1, 1};
  auto data = HostProblemData::create(p);
  ASSERT_TRUE(data.ok());
  auto plan = make_cpu_flash_backend()->plan(p, detect_cpu_platform());
  ASSERT_TRUE(plan.ok());
  std::vector<std::byte> ws((*plan)->workspace_bytes());
  CallContext where;
  where.step = 5;
  where.skip_softmax = SkipSoftmaxParams{2.0, 0};
  EXPECT_TRUE((*plan)->run_at(where, data->tensors(), ws, nullptr).has_code("AK2109"));
}

}  // namespace
}  // namespace attnkit::sparse
