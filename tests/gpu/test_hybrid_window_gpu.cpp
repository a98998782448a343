// hybrid_window_attn_h3's CUDA path (backends/sparse/hybrid_window_cuda_plan.cpp):
// outputs against the CPU plan and the fp64 oracle (docs/sparse.md section
// 5c), causal and full linear branches, a sliding-window call, with and
// without the gate; zero gates bit-identical to no gate and to the dense fa
// kernel under the window alone; two sequences, GQA 4:2, BSHD / BHSD, bf16 /
// fp16, d64 / d128, odd lengths; a poisoned workspace and output; a CUDA-graph
// capture; a workspace one byte short. The plans are made directly
// (make_hybrid_window_cuda_plan / make_hybrid_window_cpu_plan), so these tests
// run whether or not the backend declares its CUDA path
// (hybrid_window_backend.cpp kHybridWindowCudaVerified). Skips without a GPU.
//
// On the device machine: build-gpu/tests/test_sparse_gpu --gtest_filter='HybridWindowGpu*'
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "attnkit/backends/registry.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "attnkit/sparse/hybrid_window.hpp"
#include "backends/cuda/hybrid_linear.hpp"
#include "backends/sparse/hybrid_window_plans.hpp"
#include "gpu/device_buffers.hpp"
#include "sparse/hybrid_window_oracle.hpp"
#include "sparse/sparse_test_util.hpp"
#include "testing/parity_cases.hpp"

namespace attnkit::testing {
namespace {

using sparse::HybridWindowSettings;

struct Case {
  Problem p;
  HybridWindowSettings s;
  Window window;       // what the oracle uses
  bool causal_linear;  // the linear branch sums keys j <= i
};

// 517 tokens (odd: a last chunk and last tiles partly filled), 2 sequences, 4
// query heads on 2 kv heads, bf16 BSHD d128, causal (window 64, 0); 333
// tokens, 2 heads, fp16 BHSD d64, full (window 48, 48); 401 tokens, bf16 BSHD
// d128, the call's own sliding window (40, 7): a full linear branch. All gated.
std::vector<Case> cases() {
  Problem a = make_test_problem(517, 517, 4, 2, 128, DType::bf16, MaskKind::causal);
  a.batch = 2;
  Problem b = make_test_problem(333, 333, 2, 2, 64, DType::f16, MaskKind::none);
  b.layout = Layout::bhsd;
  Problem c = make_test_problem(401, 401, 4, 2, 128, DType::bf16, MaskKind::sliding_window);
  c.window = {40, 7};
  a.has_gate = b.has_gate = c.has_gate = true;
  return {{a, {{64, 64}}, {64, 0}, true}, {b, {{48, 48}}, {48, 48}, false}, {c, {}, {40, 7}, false}};
}
std::string name_of(const Problem& p) {
  return std::to_string(p.seqlen_q) + " tokens, " + std::string(mask_kind_name(p.mask)) + ", " +
         std::string(dtype_name(p.dtype)) + " " + std::string(layout_name(p.layout)) + " d" +
         std::to_string(p.head_dim_qk) + (p.has_gate ? ", gate" : "");
}

#if defined(ATTNKIT_HAS_CUDA)
using HybridWindowGpu = OnGpu;

// Runs `plan` on device copies of `t` (out poisoned first) and returns the output's bytes.
std::vector<std::byte> run_on_device(const Plan& plan, const AttentionTensors& t) {
  GatedBinding g(t);
  EXPECT_EQ(cudaMemset(g.dev.t.out.data, 0xFF, g.dev.t.out.span_bytes()), cudaSuccess);  // NaN until written
  DeviceWorkspace ws(plan.workspace_bytes());
  const Diagnostics ran = plan.run(g.dev.t, ws.span(), nullptr);
  EXPECT_TRUE(ran.ok()) << ran.summary();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return g.dev.out();
}

// Case c's CUDA plan and its CPU plan on one seeded input: the GPU output
// within `bound` of the CPU plan's (the GPU rounds the window branch to q's
// dtype before the gated linear branch is added, and its linear branch sums in
// fp32 by sub-blocks and chunks with bf16 operands) and, with `oracle`, within
// 1e-2 of the fp64 oracle (as the CPU path's bf16 bound in docs/sparse.md).
void expect_matches_cpu_plan(const Case& c, const Platform& gpu, ProblemDataOptions data_options, double bound,
                             bool oracle) {
  auto data = HostProblemData::create(c.p, data_options);
  ASSERT_TRUE(data.ok());
  auto plan = sparse::make_hybrid_window_cuda_plan(c.p, gpu, c.s);
  ASSERT_TRUE(plan.ok()) << name_of(c.p) << ": " << plan.diagnostics().summary();
  auto cpu_plan = sparse::make_hybrid_window_cpu_plan(c.p, detect_cpu_platform(), c.s);
  ASSERT_TRUE(cpu_plan.ok()) << cpu_plan.diagnostics().summary();
  const std::vector<std::byte> gpu_out = run_on_device(**plan, data->tensors());
  std::vector<std::byte> cpu_ws((*cpu_plan)->workspace_bytes());
  ASSERT_TRUE((*cpu_plan)->run(data->tensors(), cpu_ws, nullptr).ok());
  const TensorView got = host_view_of(gpu_out, data->tensors().out);
  const ErrorStats e = compare_outputs(got, data->tensors().out);
  EXPECT_TRUE(e.clean()) << name_of(c.p) << ": " << describe(e);
  EXPECT_LT(e.rel_l2, bound) << name_of(c.p) << ": " << describe(e);
  if (oracle)
    EXPECT_LT(rel_l2(bshd_doubles(c.p, got), hybrid_window_oracle(c.p, data->tensors(), c.window, c.causal_linear)), 1e-2)
        << name_of(c.p) << " against the oracle";
}

// The cases with and without the gate, against the CPU plan and the oracle.
TEST_F(HybridWindowGpu, CudaPlanMatchesTheCpuPlanAndTheOracle) {
  for (Case c : cases())
    for (bool gated : {true, false}) {
      c.p.has_gate = gated;
      expect_matches_cpu_plan(c, *gpu_, {.seed = 101}, 2e-2, true);
    }
}

// Past 2048 tokens a chunk is more than one 64-token sub-block, so the query
// kernel walks sub-blocks inside a chunk (causal: S and z grow between them)
// and the last sub-block of each sequence is partial: 2200 tokens (chunks of
// 128, the last of 24 tokens), causal bf16 BSHD d128 GQA 2:1, and full fp16
// BHSD d64, gated, against the CPU plan (the linear branch in double there).
TEST_F(HybridWindowGpu, LongSequencesWalkSubBlocksInsideChunks) {
  Problem causal = make_test_problem(2200, 2200, 2, 1, 128, DType::bf16, MaskKind::causal);
  Problem full = make_test_problem(2200, 2200, 2, 2, 64, DType::f16, MaskKind::none);
  full.layout = Layout::bhsd;
  causal.has_gate = full.has_gate = true;
  for (const Case& c : {Case{causal, {{64, 64}}, {64, 0}, true}, Case{full, {{32, 32}}, {32, 32}, false}}) {
    ASSERT_GT(cuda::hybrid_linear_chunking(c.p.seqlen_q).chunk, 64) << name_of(c.p);
    expect_matches_cpu_plan(c, *gpu_, {.seed = 127}, 1e-2, false);
  }
}

// Zero gates give exactly the output without a gate, which is exactly the
// dense fa kernel (fa3 on sm_90, fa2 else) under the window alone.
TEST_F(HybridWindowGpu, ZeroGatesAreTheWindowBranchAlone) {
  for (Case c : cases()) {
    auto data = HostProblemData::create(c.p, {.seed = 103});
    ASSERT_TRUE(data.ok());
    std::memset(data->tensors().gate.data, 0, data->tensors().gate.span_bytes());
    std::vector<std::vector<std::byte>> outs;
    for (bool gated : {true, false}) {
      Problem p = c.p;
      p.has_gate = gated;
      auto plan = sparse::make_hybrid_window_cuda_plan(p, *gpu_, c.s);
      ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
      AttentionTensors t = data->tensors();
      if (!gated) t.gate = {};
      outs.push_back(run_on_device(**plan, t));
    }
    const Problem window = sparse::hybrid_softmax_problem(c.p, c.s);
    const Backend* flash = nullptr;
    for (const char* name : {"fa3", "fa2"})
      if (const Backend* b = default_registry().find(name); b != nullptr && b->check(window, *gpu_).ok()) {
        flash = b;
        break;
      }
    ASSERT_NE(flash, nullptr) << name_of(c.p);
    auto dense = flash->plan(window, *gpu_);
    ASSERT_TRUE(dense.ok()) << dense.diagnostics().summary();
    AttentionTensors t = data->tensors();
    t.gate = {};
    outs.push_back(run_on_device(**dense, t));
    ASSERT_EQ(outs[0].size(), outs[1].size());
    ASSERT_EQ(outs[0].size(), outs[2].size());
    EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size()), 0) << name_of(c.p) << ": zero gates";
    EXPECT_EQ(std::memcmp(outs[1].data(), outs[2].data(), outs[1].size()), 0) << name_of(c.p) << ": " << flash->name();
  }
}

// A workspace and an output full of garbage (NaN bit patterns), and a
// workspace that does not start 256-byte aligned, give the clean run's
// output, bit for bit: every byte the path reads it wrote.
TEST_F(HybridWindowGpu, PoisonedWorkspaceAndOutput) {
  for (const Case& c : cases()) {
    auto plan = sparse::make_hybrid_window_cuda_plan(c.p, *gpu_, c.s);
    ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
    auto data = HostProblemData::create(c.p, {.seed = 107});
    ASSERT_TRUE(data.ok());
    GatedBinding g(data->tensors());
    const std::size_t need = (*plan)->workspace_bytes();
    DeviceWorkspace ws(need + 256);
    ASSERT_EQ(cudaMemset(ws.data, 0, ws.bytes), cudaSuccess);
    ASSERT_TRUE((*plan)->run(g.dev.t, ws.span().first(need), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<std::byte> clean = g.dev.out();
    for (int poison : {0xFF, 0x7F, 0x01})
      for (std::size_t skew : {std::size_t{0}, std::size_t{16}}) {
        ASSERT_EQ(cudaMemset(ws.data, poison, ws.bytes), cudaSuccess);
        ASSERT_EQ(cudaMemset(g.dev.t.out.data, 0xFF, g.dev.t.out.span_bytes()), cudaSuccess);
        ASSERT_TRUE((*plan)->run(g.dev.t, ws.span().subspan(skew, need), nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<std::byte> again = g.dev.out();
        EXPECT_EQ(std::memcmp(again.data(), clean.data(), clean.size()), 0)
            << name_of(c.p) << ", poison 0x" << std::hex << poison << ", skew " << std::dec << skew;
      }
  }
}

// run() allocates nothing and waits for nothing: it captures into a CUDA
// graph whose replay matches the eager run.
TEST_F(HybridWindowGpu, RunCapturesIntoACudaGraph) {
  for (const Case& c : cases()) {
    auto plan = sparse::make_hybrid_window_cuda_plan(c.p, *gpu_, c.s);
    ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
    auto data = HostProblemData::create(c.p, {.seed = 109});
    ASSERT_TRUE(data.ok());
    GatedBinding g(data->tensors());
    DeviceWorkspace ws((*plan)->workspace_bytes());
    EXPECT_TRUE(replay_matches_eager(g.dev, ws, [&](cudaStream_t stream) { return (*plan)->run(g.dev.t, ws.span(), stream); }))
        << name_of(c.p);
  }
}

// A workspace one byte short (or none) is AK1110 before anything is queued.
TEST_F(HybridWindowGpu, WorkspaceTooSmallIsAK1110) {
  const Case c = cases()[0];
  auto plan = sparse::make_hybrid_window_cuda_plan(c.p, *gpu_, c.s);
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
  auto data = HostProblemData::create(c.p, {.seed = 113});
  ASSERT_TRUE(data.ok());
  GatedBinding g(data->tensors());
  expect_short_workspace_refused(**plan, g.dev.t);
}
#endif

// The cases plan on this build's named platforms (so CI sees a plan refusal
// before the device machine does).
TEST(HybridWindowGpuInputs, CasesAreCudaShapes) {
  for (const char* name : {"cuda:sm90", "cuda:sm80"}) {
    auto gpu = parse_platform(name);
    ASSERT_TRUE(gpu.ok());
    for (const Case& c : cases()) {
      const Diagnostics why = sparse::hybrid_window_cuda_kernel_refusals(c.p, *gpu, c.s);
      EXPECT_TRUE(why.ok()) << name << ", " << name_of(c.p) << ": " << why.summary();
    }
  }
}

}  // namespace
}  // namespace attnkit::testing
