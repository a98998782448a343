// The sparse video backends on a GPU: sliding_tile_attn's CUDA path (the
// schedule's lists and the tile permutation uploaded at plan time, the token
// gathers, fa3 / fa2 over block-sparse lists) against its CPU path on the
// same inputs, for both window borders, per-head and shared windows and text
// tokens; dense steps run exactly the dense kernel. Request skip-softmax on
// fa3 against cpu_flash's rule. Skips without a GPU.
//
// On the device machine: build-gpu/tests/test_sparse_gpu
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "attnkit/backends/cuda.hpp"
#include "attnkit/backends/registry.hpp"
#include "attnkit/backends/sparse.hpp"
#include "attnkit/core/error_stats.hpp"
#include "gpu/device_buffers.hpp"
#include "sparse/sparse_test_util.hpp"
#include "testing/backend_runner.hpp"

#if defined(ATTNKIT_HAS_CUDA)
#include <cuda_runtime.h>
#endif

namespace attnkit::testing {
namespace {

#if defined(ATTNKIT_HAS_CUDA)
// 4 x 16 x 16 latents in 2 x 8 x 8 tiles (8 tiles of 128 tokens: the sm_90 and
// sm_80 kernels' tiles) plus 100 text tokens, two heads.
Problem gpu_video() {
  Problem p;
  p.batch = 2;
  p.seqlen_q = p.seqlen_k = 4 * 16 * 16 + 100;
  p.heads_q = p.heads_kv = 2;
  p.head_dim_qk = p.head_dim_v = 128;
  p.dtype = DType::bf16;
  p.video = VideoGrid{4, 16, 16};
  return p;
}

class SlidingTileGpu : public OnGpu {
 protected:
  void SetUp() override {
    OnGpu::SetUp();
    if (IsSkipped()) return;
    mask_path_ = temp_file("sta_gpu_mask.json", R"({"2_0_0": [1, 1, 1], "2_0_1": [2, 2, 1],
                                                    "3_0_0": [1, 2, 2], "3_0_1": [1, 2, 2]})");
  }
  select::BackendConfig config(const std::string& border) const {
    return {{"mask_strategy_file_path", mask_path_}, {"skip_time_steps", std::int64_t{2}},
            {"tile_size", std::string("2,8,8")}, {"window_border", border}};
  }
  std::string mask_path_;
};

TEST_F(SlidingTileGpu, CudaPathMatchesTheCpuPath) {
  const auto backend = make_sliding_tile_backend();
  const Platform cpu = detect_cpu_platform();
  const Problem p = gpu_video();
  for (const std::string border : {"shift", "cut"})
    for (int step : {2, 3}) {  // per-head windows, then one window shared by the heads
      auto cuda_plan = backend->plan_configured(p, *gpu_, config(border));
      ASSERT_TRUE(cuda_plan.ok()) << cuda_plan.diagnostics().summary();
      auto cpu_plan = backend->plan_configured(p, cpu, config(border));
      ASSERT_TRUE(cpu_plan.ok()) << cpu_plan.diagnostics().summary();
      auto data = HostProblemData::create(p, {.seed = 11});
      ASSERT_TRUE(data.ok());
      fill_video_like(p, data->tensors());
      DeviceBinding dev(data->tensors());
      ASSERT_EQ(dev.buffers.size(), 4u);
      DeviceWorkspace ws((*cuda_plan)->workspace_bytes());
      SparsityStats gpu_stats, cpu_stats;
      ASSERT_TRUE((*cuda_plan)->run_at({step, 0, std::nullopt, &gpu_stats}, dev.t, ws.span(), nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::byte> cpu_ws((*cpu_plan)->workspace_bytes());
      ASSERT_TRUE((*cpu_plan)->run_at({step, 0, std::nullopt, &cpu_stats}, data->tensors(), cpu_ws, nullptr).ok());
      const std::vector<std::byte> gpu_out = dev.out();
      TensorView gpu_view = data->tensors().out;
      gpu_view.data = const_cast<std::byte*>(gpu_out.data());
      const ErrorStats e = compare_outputs(gpu_view, data->tensors().out);
      EXPECT_TRUE(e.clean()) << describe(e);
      EXPECT_LT(e.rel_l2, 2e-2) << border << " step " << step << ": " << describe(e);
      EXPECT_EQ(gpu_stats.blocks, cpu_stats.blocks);
      EXPECT_EQ(gpu_stats.blocks_skipped, cpu_stats.blocks_skipped);
      EXPECT_GT(gpu_stats.blocks_skipped, 0);
    }
}

// A dense step (before skip_time_steps) runs exactly the dense `fa` kernel.
TEST_F(SlidingTileGpu, DenseStepsRunTheDenseKernelExactly) {
  const Problem p = gpu_video();
  auto plan = make_sliding_tile_backend()->plan_configured(p, *gpu_, config("shift"));
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
  const Backend* fa = default_registry().find(gpu_->sm == 90 ? "fa3" : "fa2");
  auto dense = fa->plan(p, *gpu_);
  ASSERT_TRUE(dense.ok()) << dense.diagnostics().summary();
  auto data = HostProblemData::create(p, {.seed = 5});
  ASSERT_TRUE(data.ok());
  DeviceBinding a(data->tensors()), b(data->tensors());
  DeviceWorkspace ws((*plan)->workspace_bytes());
  SparsityStats stats;
  ASSERT_TRUE((*plan)->run_at({1, 0, std::nullopt, &stats}, a.t, ws.span(), nullptr).ok());
  DeviceWorkspace dense_ws((*dense)->workspace_bytes());
  ASSERT_TRUE((*dense)->run(b.t, dense_ws.span(), nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(stats.dense);
  const auto x = a.out(), y = b.out();
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0);
}

// ---- request skip-softmax on fa3 (the fa3ss instances) against cpu_flash's rule

// The key tile fa3's skip-softmax instance decides on for `p` (0: none).
int fa3_skip_tile(const Problem& p) {
  for (const CudaKernelInstance& i : cuda_kernel_instances())
    if (i.family == "fa3ss" && i.dtype == p.dtype && i.head_dim_qk == p.head_dim_qk && i.built) return i.block_n;
  return 0;
}

class SkipSoftmaxGpu : public OnGpu {
 protected:
  void SetUp() override {
    OnGpu::SetUp();
    if (!IsSkipped() && gpu_->sm != 90) GTEST_SKIP() << "fa3 runs on sm_90 only";
  }

  struct Ran {
    std::vector<std::byte> out;
    SparsityStats stats;
  };
  // fa3 at `where` on device copies of `data`.
  Ran on_gpu(const Problem& p, const HostProblemData& data, const CallContext& where) const {
    Ran r;
    auto plan = default_registry().find("fa3")->plan(p, *gpu_);
    EXPECT_TRUE(plan.ok()) << plan.diagnostics().summary();
    if (!plan.ok()) return r;
    DeviceBinding dev(data.tensors());
    CallContext at = where;
    at.stats = &r.stats;
    DeviceWorkspace ws((*plan)->workspace_bytes());
    const Diagnostics ran = (*plan)->run_at(at, dev.t, ws.span(), nullptr);
    EXPECT_TRUE(ran.ok()) << ran.summary();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    r.out = dev.out();
    return r;
  }
  // cpu_flash at `where` on `data` (its outputs overwritten).
  static SparsityStats on_cpu(const Problem& p, HostProblemData& data, const CallContext& where) {
    SparsityStats stats;
    auto plan = default_registry().find("cpu_flash")->plan(p, detect_cpu_platform());
    EXPECT_TRUE(plan.ok()) << plan.diagnostics().summary();
    if (!plan.ok()) return stats;
    std::vector<std::byte> ws((*plan)->workspace_bytes());
    CallContext at = where;
    at.stats = &stats;
    const Diagnostics ran = (*plan)->run_at(at, data.tensors(), ws, nullptr);
    EXPECT_TRUE(ran.ok()) << ran.summary();
    return stats;
  }
  static ErrorStats compare(const HostProblemData& data, const std::vector<std::byte>& gpu_out) {
    TensorView view = data.tensors().out;
    view.data = const_cast<std::byte*>(gpu_out.data());
    return compare_outputs(view, data.tensors().out);
  }
};

struct SkipCase {
  const char* name;
  Problem p;
  double factor;
};

std::vector<SkipCase> skip_cases() {
  std::vector<SkipCase> cases;
  // Video-like inputs (concentrated attention: most tiles fall far below the max).
  Problem video = video_problem({8, 16, 24}, 0, 1, 2, 2, 128, DType::bf16);
  cases.push_back({"video d128 bf16", video, 100.0});
  cases.push_back({"video d128 bf16, factor 20", video, 20.0});
  Problem f16 = video;
  f16.dtype = DType::f16;
  f16.mask = MaskKind::causal;
  f16.has_sinks = true;
  f16.heads_kv = 1;  // GQA
  cases.push_back({"video d128 fp16 causal, sinks, GQA", f16, 100.0});
  Problem d256 = video_problem({4, 16, 24}, 100, 2, 2, 2, 256, DType::bf16);  // key tiles of 80; text tokens
  d256.softcap = 20.0f;
  cases.push_back({"video d256 bf16 softcap, batch 2", d256, 100.0});
  return cases;
}

TEST_F(SkipSoftmaxGpu, Fa3FollowsTheCpuRule) {
  for (const SkipCase& c : skip_cases()) {
    const Problem& p = c.p;
    const int tile = fa3_skip_tile(p);
    ASSERT_GT(tile, 0) << c.name << ": no fa3ss instance";
    auto data = HostProblemData::create(p, {.seed = 21});
    ASSERT_TRUE(data.ok());
    fill_video_like(p, data->tensors(), {.seed = 21});
    const CallContext where{4, 0, SkipSoftmaxParams{c.factor, 2, tile}, nullptr};
    const Ran gpu = on_gpu(p, *data, where);
    const Ran dense = on_gpu(p, *data, {});
    const SparsityStats cpu = on_cpu(p, *data, where);  // data's out: cpu_flash with skip-softmax
    ASSERT_FALSE(gpu.out.empty()) << c.name;
    // The case discriminates: skipping moves the result well past the bound.
    const ErrorStats moved = compare(*data, dense.out);
    EXPECT_GT(moved.rel_l2, 1e-2) << c.name << ": skipping changes too little here to test it";
    const ErrorStats e = compare(*data, gpu.out);
    std::printf("%s: gpu vs cpu skip rel_l2 %.4f (dense vs skip %.4f), pairs %lld / %lld skipped (cpu %lld)\n", c.name,
                e.rel_l2, moved.rel_l2, static_cast<long long>(gpu.stats.blocks_skipped),
                static_cast<long long>(gpu.stats.blocks), static_cast<long long>(cpu.blocks_skipped));
    EXPECT_TRUE(e.clean()) << c.name << ": " << describe(e);
    // The same rule on the same bf16 / fp16 inputs: measured 1e-4 to 2e-4 (the
    // output rounding), against 2.4e-2 to 6.8e-2 between dense and skipped.
    EXPECT_LT(e.rel_l2, 5e-3) << c.name << ": " << describe(e);
    // Same (row, tile) pairs decided; skips could differ only where rounding meets the threshold.
    EXPECT_EQ(gpu.stats.blocks, cpu.blocks) << c.name;
    EXPECT_NEAR(double(gpu.stats.blocks_skipped), double(cpu.blocks_skipped), 0.005 * cpu.blocks) << c.name;
    EXPECT_GT(gpu.stats.blocks_skipped, cpu.blocks / 10) << c.name;
    EXPECT_FALSE(gpu.stats.dense);
  }
}

// Packed sequences of 700, 0 and 1500 tokens (iid inputs, a large factor:
// each sequence's own threshold), and the dense kernel before start_step.
TEST_F(SkipSoftmaxGpu, VarlenSequencesAndDenseSteps) {
  Problem p = make_test_problem(1500, 1500, 4, 2, 128, DType::bf16);
  p.layout = Layout::thd;
  p.batch = 3;
  auto data = HostProblemData::create(p, {.seed = 3, .q_lens = {700, 0, 1500}, .k_lens = {700, 0, 1500}});
  ASSERT_TRUE(data.ok()) << data.diagnostics().summary();
  const int tile = fa3_skip_tile(p);
  const CallContext where{7, 0, SkipSoftmaxParams{3000.0, 0, tile}, nullptr};
  const Ran gpu = on_gpu(p, *data, where);
  const SparsityStats cpu = on_cpu(p, *data, where);
  const ErrorStats e = compare(*data, gpu.out);
  EXPECT_LT(e.rel_l2, 5e-3) << describe(e);
  EXPECT_EQ(gpu.stats.blocks, cpu.blocks);
  EXPECT_NEAR(double(gpu.stats.blocks_skipped), double(cpu.blocks_skipped), 0.005 * cpu.blocks);
  EXPECT_GT(gpu.stats.blocks_skipped, 0);
  // Before start_step, and without a step: exactly the dense kernel.
  const Ran dense = on_gpu(p, *data, {});
  for (std::int64_t step : {std::int64_t{-1}, std::int64_t{2}}) {
    const Ran r = on_gpu(p, *data, {step, 0, SkipSoftmaxParams{3000.0, 3, tile}, nullptr});
    EXPECT_EQ(r.out, dense.out) << "step " << step;
    EXPECT_EQ(r.stats.blocks, 0);
  }
}

// What fa3 cannot skip is refused with a code, never run dense silently.
TEST_F(SkipSoftmaxGpu, RefusesWhatItCannotSkip) {
  const CallContext where{4, 0, SkipSoftmaxParams{10.0, 0, 128}, nullptr};
  Problem d64 = make_test_problem(512, 512, 2, 2, 64, DType::bf16);
  auto plan = default_registry().find("fa3")->plan(d64, *gpu_);
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
  auto data = HostProblemData::create(d64, {.seed = 1});
  ASSERT_TRUE(data.ok());
  DeviceBinding dev(data->tensors());
  EXPECT_TRUE((*plan)->run_at(where, dev.t, {}, nullptr).has_code("AK3016"));
  Problem bs = make_test_problem(512, 512, 2, 2, 128, DType::bf16);
  bs.block_sparse = BlockSparse{128, 128, 1, 1};
  auto sparse_plan = default_registry().find("fa3")->plan(bs, *gpu_);
  ASSERT_TRUE(sparse_plan.ok()) << sparse_plan.diagnostics().summary();
  EXPECT_TRUE((*sparse_plan)->run_at(where, {}, {}, nullptr).has_code("AK2109"));
}
#endif

}  // namespace
}  // namespace attnkit::testing
