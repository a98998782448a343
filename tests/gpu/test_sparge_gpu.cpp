// sparge_attn's CUDA path: the selection kernels against the host selection
// (the same CSR lists, on inputs whose decisions are far from ties), the
// CUDA plan's output and statistics against the CPU plan's, topk and
// cdfthreshd, non-smooth blocks, odd lengths, batch and heads, BSHD and
// BHSD, dense fallbacks bit-identical to the dense `fa` kernel, a poisoned
// workspace and output, and a CUDA-graph capture of run(). Skips without a GPU.
//
// On the device machine: build-gpu/tests/test_sparse_gpu --gtest_filter='SpargeGpu*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "attnkit/backends/registry.hpp"
#include "attnkit/backends/sparse.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/sparse/sparge.hpp"
#include "backends/sparse/sparge_selection.hpp"
#include "gpu/device_buffers.hpp"
#include "sparse/sparse_test_util.hpp"

namespace attnkit::testing {
namespace {

using sparse::SpargeSettings;

// 5 x 10 x 14 latents (700 tokens: 6 query blocks, the last of 60 rows; 11
// key blocks, the last of 60), 2 sequences, 3 heads, d128.
Problem sparge_gpu_problem(DType dtype = DType::bf16, Layout layout = Layout::bshd) {
  Problem p = video_problem({5, 10, 14}, 0, 2, 3, 3, 128, dtype);
  p.layout = layout;
  return p;
}

struct Setting {
  const char* name;
  select::BackendConfig config;
  SpargeSettings settings;
};
std::vector<Setting> settings() {
  SpargeSettings topk, cdf, rough;
  topk.topk = 0.3;
  cdf.cdfthreshd = 0.9;
  rough.topk = 0.2;
  // The planted rough blocks (0) fall below it; video-like blocks (0.29 to 0.55 here) stay above.
  rough.simthreshd1 = 0.15;
  return {{"topk 0.3", {{"topk", 0.3}}, topk},
          {"cdfthreshd 0.9", {{"cdfthreshd", 0.9}}, cdf},
          {"topk 0.2, simthreshd1 0.15", {{"topk", 0.2}, {"simthreshd1", 0.15}}, rough}};
}

// Video-like q, k, v; for a setting with simthreshd1 > 0, rough blocks too:
// rows v, -v, v', -v', ... (mean 0, self-similarity 0) in query block 1 of
// every (sequence, head) and key block 3 of sequence 1.
void fill_inputs(const Problem& p, const AttentionTensors& t, std::uint64_t seed, const SpargeSettings& s) {
  fill_video_like(p, t, {.seed = seed});
  if (s.simthreshd1 <= 0) return;
  auto roughen = [&](const TensorView& x, int b, int h, int lo, int hi) {
    const HeadRows r = head_rows(p.layout, x.strides.data(), b, h, 0);
    for (int i = lo + 1; i < hi; i += 2)
      for (int c = 0; c < p.head_dim_qk; ++c) {
        const std::int64_t e = r.offset + i * r.row_stride + c;
        store_from_double(x.data, x.dtype, e, -load_as_double(x.data, x.dtype, e - r.row_stride));
      }
  };
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) roughen(t.q, b, h, 128, 256);
  for (int h = 0; h < p.heads_kv; ++h) roughen(t.k, 1, h, 192, 256);
}

// The shapes the tests run (bf16 BSHD, fp16 BHSD) and their inputs for a setting.
std::vector<Problem> problems() { return {sparge_gpu_problem(), sparge_gpu_problem(DType::f16, Layout::bhsd)}; }
Result<HostProblemData> inputs(const Problem& p, std::uint64_t seed, const SpargeSettings& s) {
  auto data = HostProblemData::create(p, {.seed = seed});
  if (data) fill_inputs(p, data->tensors(), seed, s);
  return data;
}

// Mean of block [lo, hi) of (b, h) of x and its self-similarity (pool_block on fp32 rows, as the paths pool).
double pooled(const Problem& p, const TensorView& x, int b, int h, int lo, int hi, std::vector<float>& mean) {
  const int d = p.head_dim_qk;
  std::vector<float> rows(static_cast<std::size_t>(hi - lo) * d);
  std::vector<double> scratch(d);
  mean.assign(d, 0.0f);
  const HeadRows r = head_rows(p.layout, x.strides.data(), b, h, 0);
  for (int i = lo; i < hi; ++i)
    for (int c = 0; c < d; ++c)
      rows[(i - lo) * d + c] = static_cast<float>(load_as_double(x.data, x.dtype, r.offset + i * r.row_stride + c));
  return sparse::pool_block(rows.data(), hi - lo, d, mean.data(), scratch.data());
}

// The smallest distance of any decision of the selection from its tie: a
// self-similarity from simthreshd1, a kept probability from the first one
// dropped (topk), a cumulative sum from cdfthreshd (cdf). The GPU's softmax
// sums in another order (about 1e-16 apart); a margin far above that makes
// "the same lists" a fair demand.
double decision_margin(const Problem& p, const AttentionTensors& t, const SpargeSettings& s) {
  const int nq = num_blocks(p.seqlen_q, 128), nk = num_blocks(p.seqlen_k, 64), d = p.head_dim_qk;
  double margin = INFINITY;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      std::vector<std::vector<float>> km(nk);
      std::vector<bool> k_smooth(nk);
      for (int kb = 0; kb < nk; ++kb) {
        const double sim = pooled(p, t.k, b, h, kb * 64, std::min(p.seqlen_k, kb * 64 + 64), km[kb]);
        margin = std::min(margin, std::abs(sim - s.simthreshd1));
        k_smooth[kb] = sim > s.simthreshd1;
      }
      for (int qb = 0; qb < nq; ++qb) {
        std::vector<float> qm;
        const double sim = pooled(p, t.q, b, h, qb * 128, std::min(p.seqlen_q, qb * 128 + 128), qm);
        margin = std::min(margin, std::abs(sim - s.simthreshd1));
        if (sim <= s.simthreshd1) continue;
        std::vector<double> prob;
        for (int kb = 0; kb < nk; ++kb) {
          if (!k_smooth[kb]) continue;
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += double(qm[c]) * km[kb][c];
          prob.push_back(p.softmax_scale() * dot);
        }
        if (prob.empty()) continue;
        const double m = *std::max_element(prob.begin(), prob.end());
        for (double& x : prob) x = std::exp(x - m);
        const double total = std::accumulate(prob.begin(), prob.end(), 0.0);
        for (double& x : prob) x /= total;
        std::sort(prob.rbegin(), prob.rend());
        if (s.cdfthreshd > 0) {
          double cum = 0;
          for (double x : prob) margin = std::min(margin, std::abs(cum - s.cdfthreshd)), cum += x;
        } else {
          const std::size_t take = std::min<std::size_t>(prob.size(), sparse::sparge_topk_blocks(s.topk, nk));
          if (take < prob.size()) margin = std::min(margin, (prob[take - 1] - prob[take]) / prob[take - 1]);
        }
      }
    }
  return margin;
}

// Host copies of int32 CSR lists (host or device views; device indices cut to offsets[rows]).
struct HostLists {
  std::vector<std::int32_t> offsets, indices;
};
HostLists to_host(const sparse::SpargeLists& l) {
  HostLists h;
  h.offsets.resize(l.offsets.numel());
  const bool device = l.offsets.device.kind == DeviceKind::cuda;
  auto copy = [&](void* dst, const void* src, std::size_t bytes) {
#if defined(ATTNKIT_HAS_CUDA)
    if (device) {
      cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
      return;
    }
#endif
    (void)device;
    std::memcpy(dst, src, bytes);
  };
  copy(h.offsets.data(), l.offsets.data, h.offsets.size() * sizeof(std::int32_t));
  h.indices.resize(h.offsets.back());
  copy(h.indices.data(), l.indices.data, h.indices.size() * sizeof(std::int32_t));
  return h;
}

// Whether rows of `lists` show the planted rough blocks: a rough query block
// (1) keeps every key block, every other keeps fewer; rough key block 3 of
// sequence 1 is in every row of that sequence.
void expect_rough_blocks_dense(const Problem& p, const HostLists& got) {
  const int nq = num_blocks(p.seqlen_q, 128), nk = num_blocks(p.seqlen_k, 64);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h)
      for (int qb = 0; qb < nq; ++qb) {
        const std::int64_t r = (static_cast<std::int64_t>(b) * p.heads_q + h) * nq + qb;
        const std::vector<std::int32_t> row(got.indices.begin() + got.offsets[r],
                                            got.indices.begin() + got.offsets[r + 1]);
        if (qb == 1) EXPECT_EQ(static_cast<int>(row.size()), nk) << "rough query block, row " << r;
        else EXPECT_LT(static_cast<int>(row.size()), nk) << "row " << r;
        if (b == 1) EXPECT_EQ(std::count(row.begin(), row.end(), 3), 1) << "rough key block 3, row " << r;
      }
}

HostLists host_selection(const Problem& p, const AttentionTensors& t, const SpargeSettings& s) {
  auto host = sparse::make_host_sparge_selection(p, s);
  EXPECT_TRUE(host.ok()) << host.diagnostics().summary();
  if (!host.ok()) return {};
  std::vector<std::byte> ws((*host)->bytes());
  auto lists = (*host)->select(t, ws, nullptr);
  EXPECT_TRUE(lists.ok());
  return lists.ok() ? to_host(*lists) : HostLists{};
}

// The GPU tests' inputs, checked on the host (so CI sees it): every decision
// is far from a tie, and the planted rough blocks are what decides them.
TEST(SpargeGpuInputs, DecisionsAreFarFromTies) {
  for (const Problem& p : problems())
    for (const Setting& s : settings()) {
      auto data = inputs(p, 21, s.settings);
      ASSERT_TRUE(data.ok());
      EXPECT_GT(decision_margin(p, data->tensors(), s.settings), 1e-9) << s.name << ", " << layout_name(p.layout);
      const HostLists lists = host_selection(p, data->tensors(), s.settings);
      const std::int64_t rows = static_cast<std::int64_t>(lists.offsets.size()) - 1;
      EXPECT_LT(static_cast<std::int64_t>(lists.indices.size()), rows * num_blocks(p.seqlen_k, 64)) << s.name;
      if (s.settings.simthreshd1 > 0) expect_rough_blocks_dense(p, lists);
    }
}

#if defined(ATTNKIT_HAS_CUDA)
TensorView host_view_of(const std::vector<std::byte>& bytes, TensorView like) {
  like.data = const_cast<std::byte*>(bytes.data());
  like.device = {DeviceKind::cpu, 0};
  return like;
}

// sparge_attn declares its CUDA path (sparge_backend.cpp kSpargeCudaVerified):
// a plan on this GPU must not be AK2111.
class SpargeGpu : public OnGpu {
 protected:
  void SetUp() override {
    OnGpu::SetUp();
    if (IsSkipped()) return;
    Problem p = make_test_problem(256, 256, 1, 1, 128, DType::bf16);
    const Diagnostics why = make_sparge_backend()->check(p, *gpu_);
    ASSERT_FALSE(why.has_code("AK2111")) << why.summary();
  }
};

// The selection kernels write exactly the host selection's lists.
TEST_F(SpargeGpu, SelectionMatchesTheHostSelection) {
  for (const Problem& p : problems())
    for (const Setting& s : settings()) {
      auto data = inputs(p, 21, s.settings);
      ASSERT_TRUE(data.ok());
      const HostLists want = host_selection(p, data->tensors(), s.settings);
      auto device = sparse::make_device_sparge_selection(p, s.settings, *gpu_);
      ASSERT_TRUE(device.ok()) << device.diagnostics().summary();
      DeviceBinding dev(data->tensors());
      ASSERT_EQ(dev.buffers.size(), 4u);
      DeviceWorkspace ws((*device)->bytes());
      ASSERT_EQ(cudaMemset(ws.data, 0xA5, ws.bytes), cudaSuccess);  // stale bytes, not zeros
      auto device_lists = (*device)->select(dev.t, ws.span(), nullptr);
      ASSERT_TRUE(device_lists.ok()) << device_lists.diagnostics().summary();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const HostLists got = to_host(*device_lists);
      EXPECT_EQ(got.offsets, want.offsets) << s.name << ", " << layout_name(p.layout);
      EXPECT_EQ(got.indices, want.indices) << s.name << ", " << layout_name(p.layout);
      const std::int64_t rows = static_cast<std::int64_t>(want.offsets.size()) - 1, nk = num_blocks(p.seqlen_k, 64);
      EXPECT_LT(static_cast<std::int64_t>(want.indices.size()), rows * nk) << s.name << ": nothing was skipped";
      auto listed = (*device)->listed(*device_lists, nullptr);
      ASSERT_TRUE(listed.ok());
      EXPECT_EQ(*listed, static_cast<std::int64_t>(want.indices.size()));
    }
}

// The rough blocks decide: a rough query block keeps every key block, a rough key block is kept by every row.
TEST_F(SpargeGpu, RoughBlocksAreAttendedDensely) {
  const Problem p = sparge_gpu_problem();
  const Setting s = settings()[2];
  auto data = inputs(p, 21, s.settings);
  ASSERT_TRUE(data.ok());
  auto device = sparse::make_device_sparge_selection(p, s.settings, *gpu_);
  ASSERT_TRUE(device.ok()) << device.diagnostics().summary();
  DeviceBinding dev(data->tensors());
  DeviceWorkspace ws((*device)->bytes());
  auto lists = (*device)->select(dev.t, ws.span(), nullptr);
  ASSERT_TRUE(lists.ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_rough_blocks_dense(p, to_host(*lists));
}

// Outputs and statistics of the CUDA plan against the CPU plan (bf16 / fp16 bounds).
TEST_F(SpargeGpu, CudaPlanMatchesTheCpuPlan) {
  const auto backend = make_sparge_backend();
  const Platform cpu = detect_cpu_platform();
  for (const Problem& p : problems())
    for (const Setting& s : settings()) {
      auto cuda_plan = backend->plan_configured(p, *gpu_, s.config);
      ASSERT_TRUE(cuda_plan.ok()) << cuda_plan.diagnostics().summary();
      auto cpu_plan = backend->plan_configured(p, cpu, s.config);
      ASSERT_TRUE(cpu_plan.ok()) << cpu_plan.diagnostics().summary();
      auto data = inputs(p, 23, s.settings);
      ASSERT_TRUE(data.ok());
      DeviceBinding dev(data->tensors());
      ASSERT_EQ(dev.buffers.size(), 4u);
      DeviceWorkspace ws((*cuda_plan)->workspace_bytes());
      SparsityStats gpu_stats, cpu_stats;
      ASSERT_TRUE((*cuda_plan)->run_at({-1, -1, std::nullopt, &gpu_stats}, dev.t, ws.span(), nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::byte> cpu_ws((*cpu_plan)->workspace_bytes());
      ASSERT_TRUE((*cpu_plan)->run_at({-1, -1, std::nullopt, &cpu_stats}, data->tensors(), cpu_ws, nullptr).ok());
      const std::vector<std::byte> gpu_out = dev.out();
      const ErrorStats e = compare_outputs(host_view_of(gpu_out, data->tensors().out), data->tensors().out);
      EXPECT_TRUE(e.clean()) << describe(e);
      EXPECT_LT(e.rel_l2, 2e-2) << s.name << ", " << layout_name(p.layout) << ": " << describe(e);
      EXPECT_FALSE(gpu_stats.dense);
      EXPECT_EQ(gpu_stats.blocks, cpu_stats.blocks);
      EXPECT_EQ(gpu_stats.blocks_skipped, cpu_stats.blocks_skipped) << s.name;
      EXPECT_GT(gpu_stats.blocks_skipped, 0) << s.name;
    }
}

// Short calls and seqlen_q != seqlen_k run exactly the dense `fa` kernel (fa3 on sm_90, else fa2).
TEST_F(SpargeGpu, DenseFallbacksRunTheDenseKernelExactly) {
  const Backend* fa = default_registry().find(gpu_->sm == 90 ? "fa3" : "fa2");
  ASSERT_NE(fa, nullptr);
  Problem short_call = sparge_gpu_problem();
  short_call.video.reset();
  short_call.seqlen_q = short_call.seqlen_k = 100;
  Problem cross = short_call;
  cross.seqlen_q = 256;
  cross.seqlen_k = 320;
  Problem short_d64 = short_call;  // dense d64 exists; fa2's block-sparse d64 does not, and is not needed
  short_d64.head_dim_qk = short_d64.head_dim_v = 64;
  for (const Problem& p : {short_call, cross, short_d64}) {
    auto plan = make_sparge_backend()->plan_configured(p, *gpu_, {});
    ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
    auto dense = fa->plan(p, *gpu_);
    ASSERT_TRUE(dense.ok()) << dense.diagnostics().summary();
    auto data = HostProblemData::create(p, {.seed = 5});
    ASSERT_TRUE(data.ok());
    DeviceBinding a(data->tensors()), b(data->tensors());
    DeviceWorkspace ws((*plan)->workspace_bytes()), dense_ws((*dense)->workspace_bytes());
    SparsityStats stats;
    ASSERT_TRUE((*plan)->run_at({-1, -1, std::nullopt, &stats}, a.t, ws.span(), nullptr).ok());
    ASSERT_TRUE((*dense)->run(b.t, dense_ws.span(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(stats.dense);
    EXPECT_EQ(stats.dense_reason, p.seqlen_q != p.seqlen_k ? "seqlen_q != seqlen_k" : "fewer than 128 queries");
    const auto x = a.out(), y = b.out();
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0) << p.seqlen_q << " x " << p.seqlen_k;
  }
}

// A workspace and an output full of garbage (NaN bit patterns) give the
// clean run's output, bit for bit: every byte the selection reads it wrote.
TEST_F(SpargeGpu, PoisonedWorkspaceAndOutput) {
  const Problem p = sparge_gpu_problem();
  for (const Setting& s : settings()) {
    auto plan = make_sparge_backend()->plan_configured(p, *gpu_, s.config);
    ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
    auto data = inputs(p, 29, s.settings);
    ASSERT_TRUE(data.ok());
    DeviceBinding dev(data->tensors());
    DeviceWorkspace ws((*plan)->workspace_bytes());
    ASSERT_EQ(cudaMemset(ws.data, 0, ws.bytes), cudaSuccess);
    ASSERT_TRUE((*plan)->run(dev.t, ws.span(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<std::byte> clean = dev.out();
    for (int poison : {0xFF, 0x7F, 0x01}) {
      ASSERT_EQ(cudaMemset(ws.data, poison, ws.bytes), cudaSuccess);
      ASSERT_EQ(cudaMemset(dev.t.out.data, 0xFF, dev.t.out.span_bytes()), cudaSuccess);
      ASSERT_TRUE((*plan)->run(dev.t, ws.span(), nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<std::byte> again = dev.out();
      EXPECT_EQ(std::memcmp(again.data(), clean.data(), clean.size()), 0) << s.name << ", poison 0x" << std::hex << poison;
    }
  }
}

// Plans share the selection kernels and so their shared memory limit: a later
// plan of a smaller shape must not lower it under an earlier, larger one
// (33 280 tokens: 520 key blocks, 54 KB a CTA, above the default 48 KB; the
// small plan's 22 KB once left the large plan's launch failing, AK6001).
TEST_F(SpargeGpu, ASmallerLaterPlanKeepsTheLargerPlansSharedMemory) {
  const Problem big = make_test_problem(33280, 33280, 1, 1, 128, DType::bf16);
  const SpargeSettings s = settings()[0].settings;
  auto large = sparse::make_device_sparge_selection(big, s, *gpu_);
  ASSERT_TRUE(large.ok()) << large.diagnostics().summary();
  auto small = sparse::make_device_sparge_selection(sparge_gpu_problem(), s, *gpu_);
  ASSERT_TRUE(small.ok()) << small.diagnostics().summary();
  auto data = HostProblemData::create(big, {.seed = 37});
  ASSERT_TRUE(data.ok());
  DeviceBinding dev(data->tensors());
  DeviceWorkspace ws((*large)->bytes());
  auto lists = (*large)->select(dev.t, ws.span(), nullptr);
  ASSERT_TRUE(lists.ok()) << lists.diagnostics().summary();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto listed = (*large)->listed(*lists, nullptr);
  ASSERT_TRUE(listed.ok());
  EXPECT_GT(*listed, 0);
}

// run() without statistics allocates nothing and waits for nothing: it
// captures into a CUDA graph whose replay matches the eager run.
TEST_F(SpargeGpu, RunCapturesIntoACudaGraph) {
  const Problem p = sparge_gpu_problem();
  auto plan = make_sparge_backend()->plan_configured(p, *gpu_, {{"topk", 0.3}});
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
  auto data = inputs(p, 31, settings()[0].settings);
  ASSERT_TRUE(data.ok());
  DeviceBinding dev(data->tensors());
  DeviceWorkspace ws((*plan)->workspace_bytes());
  EXPECT_TRUE(replay_matches_eager(dev, ws, [&](cudaStream_t stream) { return (*plan)->run(dev.t, ws.span(), stream); }));
}

#endif

}  // namespace
}  // namespace attnkit::testing
