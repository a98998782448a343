// video_sparse_attn_h3 on the CPU: the pure rules (keep count, cube pooling,
// top-k) against brute force, the plan against an fp64 oracle of
// docs/sparse.md written from token coordinates, zero gates as the pure fine
// pass, refusals, and the error against dense on video-like inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/backends/sparse.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "attnkit/sparse/video_sparse.hpp"
#include "attnkit/sparse/video_sparse_rule.hpp"
#include "backends/sparse/video_sparse_plans.hpp"
#include "sparse_test_util.hpp"
#include "video_sparse_oracle.hpp"

namespace attnkit::sparse {
namespace {

TEST(VideoSparse, KeepCount) {
  EXPECT_EQ(video_sparse_keep(0.9, 30), 3);    // ceil(0.1 * 30) = 3, not 4 from rounding
  EXPECT_EQ(video_sparse_keep(0.5, 5), 3);     // ceil(2.5)
  EXPECT_EQ(video_sparse_keep(0.0, 7), 7);
  EXPECT_EQ(video_sparse_keep(0.99, 10), 1);   // at least one
  EXPECT_EQ(video_sparse_keep(0.75, 8), 2);
  EXPECT_EQ(video_sparse_keep(0.7, 8), 3);     // ceil(2.4)
}

TEST(VideoSparse, PoolCubesMatchesBruteForce) {
  const VideoGrid grid{4, 8, 12};
  const VideoTiling cubes = video_cubes(grid);
  const int d = 3, n = static_cast<int>(grid.tokens());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<std::size_t>(n) * d * 2);  // row stride 2 * d: a strided slice
  for (float& e : x) e = normal(rng);
  std::vector<float> mean(static_cast<std::size_t>(cubes.tiles()) * d);
  std::vector<double> scratch(d);
  pool_cubes(cubes, x.data(), DType::f32, d, 2 * d, d, mean.data(), scratch.data());
  // Brute force: cube (t / 4, y / 4, x / 4) of raster token (t, y, x), cubes numbered t-major.
  std::vector<double> sum(mean.size(), 0.0);
  for (int t = 0; t < grid.frames; ++t)
    for (int y = 0; y < grid.height; ++y)
      for (int w = 0; w < grid.width; ++w) {
        const int r = (t * grid.height + y) * grid.width + w;
        const int c = ((t / 4) * (grid.height / 4) + y / 4) * (grid.width / 4) + w / 4;
        for (int e = 0; e < d; ++e) sum[c * d + e] += x[static_cast<std::size_t>(r) * 2 * d + d + e] / 64.0;
      }
  for (std::size_t i = 0; i < mean.size(); ++i) EXPECT_NEAR(mean[i], sum[i], 1e-5) << i;
}

TEST(VideoSparse, TopCubesMatchesASortedBruteForce) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> level(0, 6);  // few values: many ties
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + trial % 17, k = 1 + trial % n;
    std::vector<double> scores(n);
    for (double& s : scores) s = level(rng);
    std::vector<int> want(n);
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return scores[a] > scores[b]; });
    want.resize(k);
    std::sort(want.begin(), want.end());
    std::vector<std::int32_t> keep(k);
    std::vector<std::uint32_t> order(n);
    top_cubes(scores, keep, order);
    EXPECT_EQ(std::vector<int>(keep.begin(), keep.end()), want) << "trial " << trial;
  }
}

// The GPU's selection rule (vsa_score_key, the cut found bit by bit, vsa_kept_by_cut,
// as backends/cuda/vsa_select.cu runs them) keeps exactly top_cubes's cubes: scores
// from a normal draw, few levels (ties), +0 / -0 mixed, and extremes, 1 to 200 cubes.
TEST(VideoSparse, CutRuleKeepsTheTopCubes) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  const double extremes[] = {-1e300, -7.5, -1e-300, 0.0, -0.0, 1e-300, 2.0, 1e300};
  for (int trial = 0; trial < 4000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 200), keep = 1 + static_cast<int>(rng() % n);
    std::vector<double> scores(n);
    for (double& x : scores) switch (trial % 4) {
        case 0: x = normal(rng); break;
        case 1: x = static_cast<double>(rng() % 5) - 2.0; break;
        case 2: x = rng() % 2 ? 0.0 : -0.0; break;
        default: x = extremes[rng() % 8];
      }
    std::vector<std::uint64_t> keys(n);
    std::transform(scores.begin(), scores.end(), keys.begin(), vsa_score_key);
    const auto reach = [&](std::uint64_t k) { return std::count_if(keys.begin(), keys.end(), [&](auto x) { return x >= k; }); };
    std::uint64_t cut = 0;
    for (int bit = 63; bit >= 0; --bit)
      if (reach(cut | (std::uint64_t{1} << bit)) >= keep) cut |= std::uint64_t{1} << bit;
    const int above = cut == ~std::uint64_t{0} ? 0 : static_cast<int>(reach(cut + 1));
    std::vector<std::int32_t> got;
    int ties = 0;
    for (int c = 0; c < n; ++c) {
      if (vsa_kept_by_cut(keys[c], cut, ties, keep, above)) got.push_back(c);
      ties += keys[c] == cut;
    }
    std::vector<std::int32_t> want(keep);
    std::vector<std::uint32_t> order(n);
    top_cubes(scores, want, order);
    ASSERT_EQ(got, want) << "trial " << trial << ", " << n << " cubes, keep " << keep;
  }
}

// 8 x 8 x 12 latents: 2 x 2 x 3 = 12 cubes of 64 tokens (768 tokens), 2 sequences,
// 4 query heads over 2 kv heads, d64.
Problem vsa_problem(Layout layout = Layout::bshd, DType dtype = DType::f32, bool gate = true) {
  Problem p = testing::video_problem({8, 8, 12}, 0, 2, 4, 2, 64, dtype);
  p.layout = layout;
  p.has_gate = gate;
  return p;
}

// docs/sparse.md section 5b in fp64 (video_sparse_oracle.hpp); gate_scale multiplies the gate (0: the pure fine pass).
std::vector<double> oracle(const Problem& p, const AttentionTensors& t, double sparsity, double gate_scale) {
  return testing::video_sparse_oracle(p, t, sparsity, gate_scale);
}

testing::SparseRun run_vsa(const Problem& p, const select::BackendConfig& c, const AttentionTensors& t) {
  return testing::run_on_cpu(*make_video_sparse_backend(), p, c, {}, t);
}

TEST(VideoSparse, MatchesAnFp64Oracle) {
  for (const auto& [layout, sparsity] : {std::pair{Layout::bshd, 0.5}, std::pair{Layout::bhsd, 0.8}}) {
      const Problem p = vsa_problem(layout);
      auto data = HostProblemData::create(p, {.seed = 7});
      ASSERT_TRUE(data.ok());
      testing::fill_video_like(p, data->tensors(), {.seed = 7});
      const testing::SparseRun r = run_vsa(p, {{"sparsity", sparsity}}, data->tensors());
      ASSERT_TRUE(r.ran.ok()) << r.ran.summary();
      const double err = testing::rel_l2(testing::bshd_doubles(p, data->tensors().out), oracle(p, data->tensors(), sparsity, 1.0));
      EXPECT_LT(err, 1e-5) << layout_name(layout) << " sparsity " << sparsity;
      if (layout == Layout::bshd)  // and the gate matters: the oracle without it is far
        EXPECT_GT(testing::rel_l2(testing::bshd_doubles(p, data->tensors().out), oracle(p, data->tensors(), sparsity, 0.0)), 1e-2);
      const int keep = video_sparse_keep(sparsity, 12);
      EXPECT_NEAR(r.stats.skipped_fraction(), 1.0 - keep / 12.0, 1e-12);
    }
}

TEST(VideoSparse, Bf16MatchesTheOracle) {
  const Problem p = vsa_problem(Layout::bshd, DType::bf16);
  auto data = HostProblemData::create(p, {.seed = 8});
  ASSERT_TRUE(data.ok());
  testing::fill_video_like(p, data->tensors(), {.seed = 8});
  ASSERT_TRUE(run_vsa(p, {{"sparsity", 0.75}}, data->tensors()).ran.ok());
  EXPECT_LT(testing::rel_l2(testing::bshd_doubles(p, data->tensors().out), oracle(p, data->tensors(), 0.75, 1.0)), 1e-2);
}

TEST(VideoSparse, ZeroGatesArePureBlockSparse) {
  const Problem gated = vsa_problem();
  auto data = HostProblemData::create(gated, {.seed = 9});
  ASSERT_TRUE(data.ok());
  testing::fill_video_like(gated, data->tensors(), {.seed = 9});
  std::memset(data->tensors().gate.data, 0, data->tensors().gate.numel() * sizeof(float));
  ASSERT_TRUE(run_vsa(gated, {{"sparsity", 0.6}}, data->tensors()).ran.ok());
  const std::vector<double> zero_gates = testing::bshd_doubles(gated, data->tensors().out);
  // No gate input: the same numbers, and the oracle's fine pass.
  const Problem plain = vsa_problem(Layout::bshd, DType::f32, false);
  ASSERT_TRUE(run_vsa(plain, {{"sparsity", 0.6}}, data->tensors()).ran.ok());
  EXPECT_EQ(testing::bshd_doubles(plain, data->tensors().out), zero_gates);
  EXPECT_LT(testing::rel_l2(zero_gates, oracle(plain, data->tensors(), 0.6, 0.0)), 1e-5);
}

TEST(VideoSparse, Refusals) {
  const Platform cpu = detect_cpu_platform();
  const auto vsa = make_video_sparse_backend();
  Problem p = vsa_problem();
  p.video.reset();
  EXPECT_TRUE(vsa->plan(p, cpu).diagnostics().has_code("AK2115"));
  EXPECT_TRUE(vsa->check_configured(p, cpu, {}).has_code("AK2115"));  // `check` refuses what the plan refuses
  p = testing::video_problem({6, 8, 12}, 0, 1, 2, 2, 64, DType::f32);  // 6 frames: not whole cubes
  EXPECT_TRUE(vsa->plan(p, cpu).diagnostics().has_code("AK2116"));
  EXPECT_TRUE(vsa->check_configured(p, cpu, {}).has_code("AK2116"));
  const Problem odd_bf16 = testing::video_problem({6, 8, 12}, 0, 1, 2, 2, 128, DType::bf16);
  EXPECT_TRUE(vsa->check_configured(odd_bf16, *parse_platform("cuda:sm90"), {}).has_code("AK2116"));
  p = testing::video_problem({8, 8, 12}, 16, 1, 2, 2, 64, DType::f32);  // text tokens
  EXPECT_TRUE(vsa->plan(p, cpu).diagnostics().has_code("AK2116"));
  EXPECT_TRUE(vsa->check_configured(p, cpu, {}).has_code("AK2116"));
  EXPECT_TRUE(vsa->check_configured(vsa_problem(), cpu, {}).ok());
  p = vsa_problem();
  EXPECT_TRUE(run_vsa(p, {{"sparsity", 1.0}}, {}).ran.has_code("AK3103"));  // sparsity in [0, 1)
  // The gate's binding: missing, wrong dtype, wrong shape.
  auto data = HostProblemData::create(p, {.seed = 1});
  ASSERT_TRUE(data.ok());
  AttentionTensors t = data->tensors();
  t.gate = {};
  EXPECT_TRUE(run_vsa(p, {}, t).ran.has_code("AK1101"));
  HostTensor wrong_shape(DType::f32, {p.batch, p.heads_q, p.seqlen_q});  // BHSD order for a BSHD call
  t.gate = wrong_shape.view();
  EXPECT_TRUE(run_vsa(p, {}, t).ran.has_code("AK1103"));
  HostTensor wrong_dtype(DType::bf16, {p.batch, p.seqlen_q, p.heads_q});
  t.gate = wrong_dtype.view();
  EXPECT_TRUE(run_vsa(p, {}, t).ran.has_code("AK1104"));
  // Dense backends refuse a gate: they would ignore it.
  EXPECT_TRUE(make_cpu_flash_backend()->check(p, cpu).has_code("AK2109"));
  // On CUDA its fine pass has d128 kernels only (fa2bsq64): d64 is AK2105 in `check` as in the plan.
  EXPECT_TRUE(vsa->check(vsa_problem(Layout::bshd, DType::bf16), *parse_platform("cuda:sm90")).has_code("AK2105"));
}

// The kernels its CUDA path would plan (fa3 / fa2 dense, fa2bsq64 on the
// cube-ordered copies) exist at d128 on named sm_90 / sm_80, not at d64:
// check says so (video_sparse_backend.cpp).
TEST(VideoSparse, CudaPathKernelsExistAtD128) {
  for (const char* name : {"cuda:sm90", "cuda:sm80"}) {
    auto gpu = parse_platform(name);
    ASSERT_TRUE(gpu.ok());
    Problem p = testing::video_problem({8, 8, 12}, 0, 2, 4, 2, 128, DType::bf16);
    p.has_gate = true;
    EXPECT_TRUE(video_sparse_cuda_kernel_refusals(p, *gpu).ok()) << name << ": "
                                                                 << video_sparse_cuda_kernel_refusals(p, *gpu).summary();
    p.dtype = DType::f16;
    EXPECT_TRUE(video_sparse_cuda_kernel_refusals(p, *gpu).ok()) << name;
    p.head_dim_qk = p.head_dim_v = 64;
    EXPECT_TRUE(video_sparse_cuda_kernel_refusals(p, *gpu).has_code("AK2105")) << name;
  }
}

// Accuracy against dense on video-like inputs, zero gates (base H3 weights):
// the bounds docs/sparse.md states.
TEST(VideoSparse, ErrorAgainstDenseOnVideoLikeInputs) {
  Problem p = testing::video_problem({8, 16, 16}, 0, 1, 2, 2, 64, DType::f32);
  auto data = HostProblemData::create(p, {.seed = 11});
  ASSERT_TRUE(data.ok());
  testing::fill_video_like(p, data->tensors(), {.seed = 11});
  auto dense = make_cpu_flash_backend()->plan(p, detect_cpu_platform());
  ASSERT_TRUE(dense.ok());
  HostTensor dense_out = data->make_output(p.out_dtype());
  std::vector<std::byte> ws((*dense)->workspace_bytes());
  ASSERT_TRUE((*dense)->run(data->tensors_with_outputs(dense_out.view(), {}), ws, nullptr).ok());
  // Bounds: the measured 0.039 / 0.107 / 0.229 with margin.
  const std::pair<double, double> bounds[] = {{0.5, 0.06}, {0.75, 0.15}, {0.9, 0.3}};
  double last = 0;
  for (const auto& [sparsity, bound] : bounds) {
    ASSERT_TRUE(run_vsa(p, {{"sparsity", sparsity}}, data->tensors()).ran.ok());
    const double err = compare_outputs(data->tensors().out, dense_out.view()).rel_l2;
    EXPECT_LT(err, bound) << sparsity;
    EXPECT_GT(err, last) << sparsity;  // more skipped, more error
    last = err;
  }
}

}  // namespace
}  // namespace attnkit::sparse
