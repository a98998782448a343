// The sparse video backends on a GPU: sliding_tile_attn's CUDA path (the
// schedule's lists and the tile permutation uploaded at plan time, the token
// gathers, fa3 / fa2 over block-sparse lists) against its CPU path on the
// same inputs, for both window borders, per-head and shared windows and text
// tokens; dense steps run exactly the dense kernel. Skips without a GPU.
//
// On the device machine: build-gpu/tests/test_sparse_gpu
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "attnkit/backends/registry.hpp"
#include "attnkit/backends/sparse.hpp"
#include "attnkit/core/error_stats.hpp"
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

// Device copies of a binding's q, k, v and out; freed with the object.
struct DeviceBinding {
  AttentionTensors t;
  std::vector<void*> buffers;
  explicit DeviceBinding(const AttentionTensors& host) : t(host) {
    for (TensorView* v : {&t.q, &t.k, &t.v, &t.out}) {
      void* ptr = nullptr;
      if (cudaMalloc(&ptr, v->span_bytes()) != cudaSuccess) continue;
      cudaMemcpy(ptr, v->data, v->span_bytes(), cudaMemcpyHostToDevice);
      v->data = ptr;
      v->device = {DeviceKind::cuda, 0};
      buffers.push_back(ptr);
    }
  }
  ~DeviceBinding() {
    for (void* b : buffers) cudaFree(b);
  }
  std::vector<std::byte> out() const {
    std::vector<std::byte> host(t.out.span_bytes());
    cudaMemcpy(host.data(), t.out.data, host.size(), cudaMemcpyDeviceToHost);
    return host;
  }
};

struct DeviceWorkspace {
  void* data = nullptr;
  std::size_t bytes = 0;
  explicit DeviceWorkspace(std::size_t n) : bytes(n) {
    if (n > 0 && cudaMalloc(&data, n) != cudaSuccess) data = nullptr, bytes = 0;
  }
  ~DeviceWorkspace() {
    if (data) cudaFree(data);
  }
  Workspace span() const { return {static_cast<std::byte*>(data), bytes}; }
};

class SlidingTileGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_compiled()) GTEST_SKIP() << "this build has no CUDA";
    gpu_ = detect_cuda_platform();
    if (!gpu_) GTEST_SKIP() << "no CUDA device on this machine (run build-gpu/tests/test_sparse_gpu on the device machine)";
    mask_path_ = temp_file("sta_gpu_mask.json", R"({"2_0_0": [1, 1, 1], "2_0_1": [2, 2, 1],
                                                    "3_0_0": [1, 2, 2], "3_0_1": [1, 2, 2]})");
  }
  select::BackendConfig config(const std::string& border) const {
    return {{"mask_strategy_file_path", mask_path_}, {"skip_time_steps", std::int64_t{2}},
            {"tile_size", std::string("2,8,8")}, {"window_border", border}};
  }
  std::optional<Platform> gpu_;
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
  ASSERT_TRUE((*dense)->run(b.t, {}, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(stats.dense);
  const auto x = a.out(), y = b.out();
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0);
}
#endif

}  // namespace
}  // namespace attnkit::testing
