// The sparse video backends on a GPU: sliding_tile_attn's CUDA path (the
// schedule's lists and the tile permutation uploaded at plan time, the token
// gathers, fa3 / fa2 over block-sparse lists) against its CPU path on the
// same inputs, for both window borders, per-head and shared windows and text
// tokens; dense steps run exactly the dense kernel. fa3bsr (tile-ordered
// lists read straight from raster-order tokens) against fa3bs on tile-ordered
// copies. Request skip-softmax on fa3 against cpu_flash's rule. Skips without
// a GPU.
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
#include "attnkit/core/video_tiles.hpp"
#include "backends/cuda/raster_tiles.hpp"
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
      // On sm_90 the lists read the raster-order tokens in place (fa3bsr): no
      // tile-ordered copies of q, k, v, out in the workspace.
      if (gpu_->sm == 90)
        EXPECT_LT((*cuda_plan)->workspace_bytes(), data->tensors().q.span_bytes()) << border;
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

// ---- fa3bsr: tile-ordered block lists on raster-order tokens

// Copies rows of every (batch, head) of `from` into `to` (host views of one
// shape, BSHD / BHSD or LSE's [B, H, S]): row s of the tile order <- raster
// row raster_index(s) (to_tiles), or back.
void permute_rows(const TensorView& from, const TensorView& to, int row_dim, const VideoTiling& g, bool to_tiles) {
  const int head_dim = row_dim == 1 ? 2 : 1;
  const auto elem = static_cast<std::int64_t>(dtype_size(from.dtype));
  const std::int64_t width = from.rank == 4 ? from.shape[3] : 1;
  for (std::int64_t b = 0; b < from.shape[0]; ++b)
    for (std::int64_t h = 0; h < from.shape[head_dim]; ++h)
      for (std::int64_t s = 0; s < from.shape[row_dim]; ++s) {
        const std::int64_t src = to_tiles ? raster_index(g, s) : s, dst = to_tiles ? s : raster_index(g, s);
        auto at = [&](const TensorView& v, std::int64_t row) {
          return static_cast<std::byte*>(v.data) +
                 (b * v.strides[0] + h * v.strides[head_dim] + row * v.strides[row_dim]) * elem;
        };
        std::memcpy(at(to, dst), at(from, src), static_cast<std::size_t>(width * elem));
      }
}

class RasterTokensGpu : public OnGpu {
 protected:
  void SetUp() override {
    OnGpu::SetUp();
    if (!IsSkipped() && gpu_->sm != 90) GTEST_SKIP() << "fa3bsr runs on sm_90 only";
  }
};

struct RasterCase {
  const char* name;
  Problem p;
  VideoTiling g;
  const char* family = "fa3bsr";  // the instance planned
};

std::vector<RasterCase> raster_cases() {
  std::vector<RasterCase> cases;
  Problem a = video_problem({4, 16, 16}, 0, 2, 4, 2, 128, DType::bf16);  // GQA, LSE
  a.block_sparse = BlockSparse{128, 128, 1, 1};
  a.return_lse = true;
  cases.push_back({"BSHD batch 2 (the batch folds into frames), GQA, LSE", a, {4, 16, 16, 2, 8, 8}});
  Problem b = video_problem({4, 16, 16}, 100, 2, 2, 2, 128, DType::bf16);
  b.block_sparse = BlockSparse{128, 128, 2, 2};
  cases.push_back({"BSHD batch 2 with text tokens (one launch a sequence), lists per sequence and head", b,
                   {4, 16, 16, 2, 8, 8}});
  Problem c = video_problem({4, 16, 16}, 100, 2, 3, 1, 128, DType::f16);
  c.layout = Layout::bhsd;
  c.block_sparse = BlockSparse{256, 256, 1, 3};
  c.return_lse = true;
  cases.push_back({"BHSD fp16 batch 2 with text (the batch folds into heads), MQA, 256-token tiles of one plane", c,
                   {4, 16, 16, 2, 8, 16}});
  Problem d = video_problem({2, 32, 32}, 0, 1, 2, 2, 128, DType::bf16);
  d.block_sparse = BlockSparse{256, 128, 1, 1};
  cases.push_back({"half-plane boxes of 16 x 16 tiles", d, {2, 32, 32, 1, 16, 16}});
  Problem e = video_problem({6, 16, 16}, 0, 2, 2, 2, 128, DType::bf16);
  e.block_sparse = BlockSparse{384, 384, 1, 2};
  e.return_lse = true;
  cases.push_back({"STA's 6 x 8 x 8 tiles: 384-token blocks on 192-key tiles", e, {6, 16, 16, 6, 8, 8}, "fa3bsr192"});
  // VSA's 4 x 4 x 4 cubes: 64-query blocks on 64 x 64 tiles, each tile one cube.
  Problem f = video_problem({4, 16, 16}, 0, 2, 4, 2, 128, DType::bf16);
  f.block_sparse = BlockSparse{64, 64, 1, 4};
  f.return_lse = true;
  cases.push_back({"VSA's 4 x 4 x 4 cubes, GQA, LSE: 64 x 64 tiles", f, {4, 16, 16, 4, 4, 4}, "fa3bsrq64"});
  Problem h = video_problem({8, 8, 12}, 0, 2, 2, 1, 128, DType::f16);
  h.layout = Layout::bhsd;
  h.block_sparse = BlockSparse{64, 128, 1, 1};
  cases.push_back({"BHSD fp16 cubes, MQA, two cubes of keys a block", h, {8, 8, 12, 4, 4, 4}, "fa3bsrq64"});
  return cases;
}

// The same tiles land in shared memory either way, so the outputs (and LSE)
// are the same bits at each row's raster position (fa3bsr against fa3bs,
// fa3bsr192 against fa3bs192).
TEST_F(RasterTokensGpu, MatchesTheTileOrderedKernelBitForBit) {
  for (const RasterCase& c : raster_cases()) {
    const Problem& p = c.p;
    const ProblemDataOptions options{.seed = 31, .mask_density = 0.35, .empty_block_rows = 0.1};
    auto data = HostProblemData::create(p, options);
    auto tiled = HostProblemData::create(p, options);  // the same lists, poison and shapes
    ASSERT_TRUE(data.ok() && tiled.ok()) << c.name;
    fill_video_like(p, data->tensors());
    const int row_dim = p.layout == Layout::bshd ? 1 : 2;
    for (auto role : {&AttentionTensors::q, &AttentionTensors::k, &AttentionTensors::v})
      permute_rows(data->tensors().*role, tiled->tensors().*role, row_dim, c.g, /*to_tiles=*/true);

    const auto raster_backend = make_fa3_raster_block_sparse_backend(c.g);
    ASSERT_TRUE(raster_backend->check(p, *gpu_).ok()) << c.name << ": " << raster_backend->check(p, *gpu_).summary();
    const auto instance = cuda_planned_instance(*raster_backend, p);
    ASSERT_TRUE(instance.has_value()) << c.name;
    EXPECT_EQ(instance->family, c.family) << c.name;
    const auto tiled_instance = cuda_planned_instance(*default_registry().find("fa3"), p);
    ASSERT_TRUE(tiled_instance.has_value()) << c.name;
    ASSERT_EQ(tiled_instance->block_n, instance->block_n) << c.name << ": " << tiled_instance->family;
    auto raster = raster_backend->plan(p, *gpu_);
    auto fa3 = default_registry().find("fa3")->plan(p, *gpu_);
    ASSERT_TRUE(raster.ok() && fa3.ok()) << c.name;
    DeviceBinding a(data->tensors()), b(tiled->tensors());
    DeviceWorkspace wa((*raster)->workspace_bytes()), wb((*fa3)->workspace_bytes());
    const Diagnostics ran = (*raster)->run(a.t, wa.span(), nullptr);
    ASSERT_TRUE(ran.ok()) << c.name << ": " << ran.summary();
    ASSERT_TRUE((*fa3)->run(b.t, wb.span(), nullptr).ok()) << c.name;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.name;

    std::vector<std::byte> got = a.out(), tiled_out = b.out(), want(got.size());
    TensorView want_view = host_view_of(want, data->tensors().out);
    permute_rows(host_view_of(tiled_out, data->tensors().out), want_view, row_dim, c.g, /*to_tiles=*/false);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << c.name;
    const ErrorStats e = compare_outputs(host_view_of(got, data->tensors().out), want_view);
    EXPECT_TRUE(e.clean()) << c.name << ": " << describe(e);
    if (p.return_lse) {
      const TensorView& lse = data->tensors().lse;
      std::vector<std::byte> got_lse(lse.span_bytes()), tiled_lse(lse.span_bytes()), want_lse(lse.span_bytes());
      ASSERT_EQ(cudaMemcpy(got_lse.data(), a.t.lse.data, got_lse.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(tiled_lse.data(), b.t.lse.data, tiled_lse.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      permute_rows(host_view_of(tiled_lse, lse), host_view_of(want_lse, lse), 2, c.g, /*to_tiles=*/false);
      EXPECT_EQ(std::memcmp(got_lse.data(), want_lse.data(), got_lse.size()), 0) << c.name << ": LSE";
    }
  }
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
