// The sparse video backends through a Deployment on this machine's GPU, as an
// engine runs them: the shipped model profiles, the engine flag
// --attention-backend, a request's step, a layer's own plans. Each GPU layer's
// output against the same layer of a CPU Deployment on the same inputs (both
// bf16: the CPU plan is what the backend's CUDA tests hold the CUDA plans to,
// 2e-2 relative L2 at 16 bits); the gated backends with and without their
// gate where the checkpoint allows both (AK2118 where it does not).
// Skips without a GPU.
//
// On the device machine: build-gpu/tests/test_sparse_gpu --gtest_filter='SparseDeploymentGpu*'
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "attnkit/core/error_stats.hpp"
#include "attnkit/runtime/deployment.hpp"
#include "gpu/device_buffers.hpp"
#include "sparse/sparse_test_util.hpp"

namespace attnkit::testing {
namespace {

struct Case {
  const char* name;
  const char* model;
  const char* backend;  // --attention-backend
  const char* config;   // --attention-backend-config ("" : none)
  std::int64_t layer;   // the transformer.self layer run
  std::int64_t step;    // the request's denoising step (-1: no request)
  bool gate;            // the call passes a gate
};

// 8 x 8 x 8 latents (512 tokens: whole 4 x 4 x 4 cubes and 64-token tiles).
// sol_attn at step 20, layer 5 routes (its dense steps are < 10, dense layers 0 and 1);
// at step 3 it runs the dense kernel.
const Case kCases[] = {
    {"sparge", "wan", "sparge_attn", "", 0, -1, false},
    {"sol_routed", "wan", "sol_attn", "", 5, 20, false},
    {"sol_dense_step", "wan", "sol_attn", "", 5, 3, false},
    {"vsa_base_weights", "minimax-h3", "video_sparse_attn_h3", "sparsity=0.75", 0, -1, false},
    {"vsa_gated", "fast-h3", "video_sparse_attn_h3", "", 0, -1, true},
    {"hybrid_gated", "vdn-h3", "", "", 0, -1, true},
};

std::unique_ptr<runtime::Deployment> deploy(const Case& c, const std::string& platform) {
  select::DeploymentConfig config{.model = c.model, .platform = platform, .dtype = "bf16",
                                  .attention_backend = c.backend};
  if (*c.config) config.attention_backend_config = c.config;
  auto dep = runtime::Deployment::create(config, default_registry(), [](std::string_view) {});
  EXPECT_TRUE(dep.ok()) << c.name << " on " << platform << ": " << dep.diagnostics().summary();
  if (!dep.ok()) return nullptr;
  if (c.step >= 0) {
    auto request = (*dep)->prepare({.step = c.step});
    EXPECT_TRUE(request.ok()) << c.name << ": " << request.diagnostics().summary();
    if (request.ok()) (*dep)->apply(*request);
  }
  return std::move(*dep);
}

Problem small(const Problem& representative, bool gate) {
  Problem p = representative;
  p.video = VideoGrid{8, 8, 8};
  p.seqlen_q = p.seqlen_k = 512;
  p.batch = 1;
  p.has_gate = gate;
  return p;
}

class SparseDeploymentGpu : public OnGpu {};

TEST_F(SparseDeploymentGpu, LayersMatchTheCpuDeployment) {
#if defined(ATTNKIT_HAS_CUDA)
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto cpu = deploy(c, "cpu");
    auto gpu = deploy(c, "cuda");
    ASSERT_NE(cpu, nullptr);
    ASSERT_NE(gpu, nullptr);
    runtime::AttentionLayer& on_cpu = **cpu->layer("transformer", "self", c.layer);
    runtime::AttentionLayer& on_gpu = **gpu->layer("transformer", "self", c.layer);
    ASSERT_EQ(on_gpu.backend().name(), on_cpu.backend().name());
    EXPECT_TRUE(on_gpu.backend().capabilities().sparse) << on_gpu.backend().name();
    const Problem p = small(on_gpu.decision().problem, c.gate);
    auto data = video_like_data(p, 17);
    ASSERT_TRUE(data.ok()) << data.diagnostics().summary();

    auto cpu_plan = on_cpu.plan(p);
    ASSERT_TRUE(cpu_plan.ok()) << cpu_plan.diagnostics().summary();
    std::vector<std::byte> cpu_ws((*cpu_plan)->workspace_bytes());
    HostTensor want = data->make_output(p.out_dtype());
    ASSERT_TRUE(on_cpu.run(p, data->tensors_with_outputs(want.view(), {}), cpu_ws, nullptr).ok());

    auto gpu_plan = on_gpu.plan(p);
    ASSERT_TRUE(gpu_plan.ok()) << gpu_plan.diagnostics().summary();
    GatedBinding dev(data->tensors());
    ASSERT_EQ(cudaMemset(dev.dev.t.out.data, 0xFF, dev.dev.t.out.span_bytes()), cudaSuccess);  // NaN bf16: unwritten shows
    DeviceWorkspace ws((*gpu_plan)->workspace_bytes());
    const Diagnostics ran = on_gpu.run(p, dev.dev.t, ws.span(), nullptr);
    ASSERT_TRUE(ran.ok()) << ran.summary();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<std::byte> got = dev.dev.out();
    const ErrorStats e = compare_outputs(host_view_of(got, data->tensors().out), want.view());
    EXPECT_TRUE(e.clean()) << describe(e);
    EXPECT_LT(e.rel_l2, 2e-2) << "GPU layer against the CPU layer: " << describe(e);
  }
#endif
}

// A checkpoint that provides the gate's weights needs the gate on the GPU as
// on the CPU (AK2118), before any device work.
TEST_F(SparseDeploymentGpu, GatedCheckpointsRefuseACallWithoutTheirGate) {
#if defined(ATTNKIT_HAS_CUDA)
  for (const Case& c : kCases) {
    if (!c.gate) continue;
    SCOPED_TRACE(c.name);
    auto gpu = deploy(c, "cuda");
    ASSERT_NE(gpu, nullptr);
    runtime::AttentionLayer& layer = **gpu->layer("transformer", "self", c.layer);
    EXPECT_TRUE(layer.plan(small(layer.decision().problem, false)).diagnostics().has_code("AK2118"));
  }
#endif
}

}  // namespace
}  // namespace attnkit::testing
