// sol_attn's CUDA path (backends/sparse/sol_cuda_plan.cpp): the device
// routing against the host routing (the same CSR lists, exactly: both run
// sparse/sol_rule.hpp's arithmetic) and the fp64 oracle's kept tiles; routed
// outputs and statistics against the CPU plan and the fp64 oracle; dense
// steps and layers bit-identical to the dense `fa` kernel; odd lengths, text
// tokens, two sequences, GQA, BSHD / BHSD, bf16 / fp16, sink tokens; a
// poisoned workspace and output; a CUDA-graph capture; a workspace one byte
// short. The plans are made directly (make_sol_cuda_plan / make_sol_cpu_plan),
// so these tests run whether or not sol_attn declares its CUDA path
// (sol_backend.cpp kSolCudaVerified) and at fp16, which the backend does not
// declare (bf16 only): the kernels take both. Skips without a GPU.
//
// On the device machine: build-gpu/tests/test_sparse_gpu --gtest_filter='SolGpu*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "attnkit/backends/registry.hpp"
#include "attnkit/core/error_stats.hpp"
#include "backends/sparse/sol_routing.hpp"
#include "gpu/device_buffers.hpp"
#include "sparse/sol_oracle.hpp"
#include "sparse/sparse_test_util.hpp"

namespace attnkit::testing {
namespace {

using sparse::SolSettings;

// 5 x 10 x 14 latents (700 tokens: 11 tiles, the last of 60), 2 sequences,
// 4 query heads on 2 kv heads, bf16 BSHD; 4 x 8 x 12 latents and 37 text
// tokens (421 tokens: 7 tiles, the last of 37), 2 heads, fp16 BHSD. d128.
std::vector<Problem> problems() {
  Problem a = video_problem({5, 10, 14}, 0, 2, 4, 2, 128, DType::bf16);
  Problem b = video_problem({4, 8, 12}, 37, 1, 2, 2, 128, DType::f16);
  b.layout = Layout::bhsd;
  return {a, b};
}
std::string name_of(const Problem& p) {
  return std::to_string(p.seqlen_q) + " tokens, " + std::string(dtype_name(p.dtype)) + " " +
         std::string(layout_name(p.layout));
}

struct Setting {
  const char* name;
  SolSettings settings;
};
std::vector<Setting> settings() {
  SolSettings loose, tight, sinks;
  loose.tau = 0.5;
  tight.tau = 1.0;
  sinks.tau = 1.0;
  sinks.sink_start = 100, sinks.sink_tokens = 70;  // tiles 1 to 2
  for (SolSettings* s : {&loose, &tight, &sinks}) s->dense_steps = 2, s->dense_layers = {0, 7};
  return {{"tau 0.5", loose}, {"tau 1", tight}, {"tau 1, sinks [100, 170)", sinks}};
}

struct HostLists {
  std::vector<std::int32_t> offsets, indices;
};
// The CPU path's routing of `t` (sol_routing.hpp: what SolPlan runs).
HostLists host_lists(const Problem& p, const SolSettings& s, const AttentionTensors& t) {
  const sparse::SolShape shape = sparse::SolShape::of(p);
  const std::size_t d1 = p.head_dim_qk + 1;
  std::vector<float> q1(static_cast<std::size_t>(p.batch) * p.seqlen_q * p.heads_q * d1),
      k1(static_cast<std::size_t>(p.batch) * shape.tiles * p.heads_kv * d1),
      v1(static_cast<std::size_t>(p.batch) * shape.tiles * p.heads_kv * p.head_dim_v);
  std::vector<std::uint8_t> keep(static_cast<std::size_t>(shape.rows) * shape.tiles);
  HostLists h;
  h.offsets.resize(shape.rows + 1);
  h.indices.resize(keep.size());
  sparse::sol_pool_host(p, t, q1.data(), k1.data(), v1.data());
  sparse::sol_route_host(p, s, q1.data(), k1.data(), keep.data());
  h.indices.resize(sparse::sol_lists_host(shape, keep.data(), h.offsets.data(), h.indices.data()));
  return h;
}
// The oracle's kept tiles as CSR lists.
HostLists oracle_lists(const Problem& p, const SolOracle& o) {
  const sparse::SolShape shape = sparse::SolShape::of(p);
  HostLists h;
  h.offsets.push_back(0);
  for (std::int64_t r = 0; r < shape.rows; ++r) {
    for (int c = 0; c < shape.tiles; ++c)
      if (o.keep[r * shape.tiles + c]) h.indices.push_back(c);
    h.offsets.push_back(static_cast<std::int32_t>(h.indices.size()));
  }
  return h;
}

// The GPU tests' inputs, checked on the host (so CI sees it): every decision
// the scores make is far from a tie, and each setting keeps some tiles past
// the diagonal and pools others.
TEST(SolGpuInputs, DecisionsAreFarFromTies) {
  for (const Problem& p : problems())
    for (const Setting& s : settings()) {
      auto data = video_like_data(p, 41);
      ASSERT_TRUE(data.ok());
      const SolOracle o = sol_oracle(p, data->tensors(), s.settings.tau, s.settings.sink_tokens, s.settings.sink_start);
      EXPECT_GT(o.margin, 1e-9) << s.name << ", " << name_of(p);
      EXPECT_GT(o.pooled_fraction, 0.2) << s.name << ", " << name_of(p);
      const sparse::SolShape shape = sparse::SolShape::of(p);
      EXPECT_GT(1.0 - o.pooled_fraction, 1.0 / shape.tiles + 1e-9) << s.name << ": only the diagonal kept";
      // The host routing (the CPU path's) keeps the oracle's tiles.
      const HostLists host = host_lists(p, s.settings, data->tensors()), want = oracle_lists(p, o);
      EXPECT_EQ(host.offsets, want.offsets) << s.name << ", " << name_of(p);
      EXPECT_EQ(host.indices, want.indices) << s.name << ", " << name_of(p);
    }
}

#if defined(ATTNKIT_HAS_CUDA)
const CallContext kRouted{5, 3, std::nullopt, nullptr};  // step >= dense_steps, layer not in dense_layers

TensorView host_view_of(const std::vector<std::byte>& bytes, TensorView like) {
  like.data = const_cast<std::byte*>(bytes.data());
  like.device = {DeviceKind::cpu, 0};
  return like;
}

HostLists device_lists(const sparse::SolDeviceLists& l) {
  HostLists h;
  h.offsets.resize(l.offsets.numel());
  cudaMemcpy(h.offsets.data(), l.offsets.data, h.offsets.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost);
  h.indices.resize(std::clamp<std::int64_t>(h.offsets.back(), 0, l.indices.numel()));
  cudaMemcpy(h.indices.data(), l.indices.data, h.indices.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost);
  return h;
}

class SolGpu : public OnGpu {
 protected:
  Result<std::unique_ptr<Plan>> cuda_plan(const Problem& p, const SolSettings& s) const {
    return sparse::make_sol_cuda_plan(p, *gpu_, s);
  }
};

// The device routing writes exactly the host routing's lists (and the oracle's kept tiles).
TEST_F(SolGpu, RoutingMatchesTheCpuRouting) {
  for (const Problem& p : problems())
    for (const Setting& s : settings()) {
      auto data = video_like_data(p, 41);
      ASSERT_TRUE(data.ok());
      auto plan = cuda_plan(p, s.settings);
      ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
      DeviceBinding dev(data->tensors());
      ASSERT_EQ(dev.buffers.size(), 4u);
      DeviceWorkspace ws((*plan)->workspace_bytes());
      ASSERT_EQ(cudaMemset(ws.data, 0xA5, ws.bytes), cudaSuccess);  // stale bytes, not zeros
      const Diagnostics ran = (*plan)->run_at(kRouted, dev.t, ws.span(), nullptr);
      ASSERT_TRUE(ran.ok()) << ran.summary();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      auto lists = sparse::sol_cuda_lists(**plan, ws.span());
      ASSERT_TRUE(lists.ok());
      const HostLists got = device_lists(*lists), want = host_lists(p, s.settings, data->tensors());
      EXPECT_EQ(got.offsets, want.offsets) << s.name << ", " << name_of(p);
      EXPECT_EQ(got.indices, want.indices) << s.name << ", " << name_of(p);
      const SolOracle o = sol_oracle(p, data->tensors(), s.settings.tau, s.settings.sink_tokens, s.settings.sink_start);
      EXPECT_EQ(got.indices, oracle_lists(p, o).indices) << s.name << ", " << name_of(p);
    }
}

// Routed outputs against the CPU plan (both round the exact part's output
// once more on the GPU: fa2 writes q's dtype) and against the fp64 oracle
// with the bound docs/sparse.md states for sol (1e-2 at 16 bits); the
// statistics equal the CPU's.
TEST_F(SolGpu, RoutedCallsMatchTheCpuPlanAndTheOracle) {
  const Platform cpu = detect_cpu_platform();
  for (const Problem& p : problems())
    for (const Setting& s : settings()) {
      auto data = video_like_data(p, 43);
      ASSERT_TRUE(data.ok());
      auto plan = cuda_plan(p, s.settings);
      ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
      auto cpu_plan = sparse::make_sol_cpu_plan(p, cpu, s.settings);
      ASSERT_TRUE(cpu_plan.ok()) << cpu_plan.diagnostics().summary();
      DeviceBinding dev(data->tensors());
      ASSERT_EQ(dev.buffers.size(), 4u);
      ASSERT_EQ(cudaMemset(dev.t.out.data, 0xFF, dev.t.out.span_bytes()), cudaSuccess);  // NaN until written
      DeviceWorkspace ws((*plan)->workspace_bytes());
      SparsityStats gpu_stats, cpu_stats;
      CallContext where = kRouted;
      where.stats = &gpu_stats;
      const Diagnostics ran = (*plan)->run_at(where, dev.t, ws.span(), nullptr);
      ASSERT_TRUE(ran.ok()) << ran.summary();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::byte> cpu_ws((*cpu_plan)->workspace_bytes());
      where.stats = &cpu_stats;
      ASSERT_TRUE((*cpu_plan)->run_at(where, data->tensors(), cpu_ws, nullptr).ok());
      const std::vector<std::byte> gpu_out = dev.out();
      const TensorView got = host_view_of(gpu_out, data->tensors().out);
      const ErrorStats e = compare_outputs(got, data->tensors().out);
      EXPECT_TRUE(e.clean()) << describe(e);
      EXPECT_LT(e.rel_l2, 2e-2) << s.name << ", " << name_of(p) << ": " << describe(e);
      const SolOracle o = sol_oracle(p, data->tensors(), s.settings.tau, s.settings.sink_tokens, s.settings.sink_start);
      EXPECT_LT(rel_l2(bshd_doubles(p, got), o.out), 1e-2) << s.name << ", " << name_of(p) << " against the oracle";
      EXPECT_FALSE(gpu_stats.dense);
      EXPECT_EQ(gpu_stats.blocks, cpu_stats.blocks);
      EXPECT_EQ(gpu_stats.blocks_skipped, cpu_stats.blocks_skipped) << s.name;
      EXPECT_NEAR(gpu_stats.skipped_fraction(), o.pooled_fraction, 1e-12) << s.name;
    }
}

// Dense steps and dense layers run exactly the dense `fa` kernel (fa3 on sm_90, else fa2).
TEST_F(SolGpu, DenseStepsAndLayersRunTheDenseKernelExactly) {
  const Backend* fa = default_registry().find(gpu_->sm == 90 ? "fa3" : "fa2");
  ASSERT_NE(fa, nullptr);
  for (const Problem& p : problems()) {
    auto plan = cuda_plan(p, settings()[0].settings);
    ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
    auto dense = fa->plan(p, *gpu_);
    ASSERT_TRUE(dense.ok()) << dense.diagnostics().summary();
    auto data = video_like_data(p, 47);
    ASSERT_TRUE(data.ok());
    DeviceBinding b(data->tensors());
    DeviceWorkspace dense_ws((*dense)->workspace_bytes());
    ASSERT_TRUE((*dense)->run(b.t, dense_ws.span(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<std::byte> want = b.out();
    for (auto [step, layer, why] : {std::tuple{1, 5, "dense_steps"}, {4, 0, "dense_layers"}, {9, 7, "dense_layers"}}) {
      DeviceBinding a(data->tensors());
      ASSERT_EQ(cudaMemset(a.t.out.data, 0xFF, a.t.out.span_bytes()), cudaSuccess);
      DeviceWorkspace ws((*plan)->workspace_bytes());
      SparsityStats stats;
      ASSERT_TRUE((*plan)->run_at({step, layer, std::nullopt, &stats}, a.t, ws.span(), nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_TRUE(stats.dense);
      EXPECT_NE(stats.dense_reason.find(why), std::string::npos) << stats.dense_reason;
      const std::vector<std::byte> got = a.out();
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << name_of(p) << ", step " << step;
    }
  }
}

// A workspace and an output full of garbage (NaN bit patterns) give the
// clean run's output, bit for bit: every byte the routed path reads it wrote.
TEST_F(SolGpu, PoisonedWorkspaceAndOutput) {
  for (const Problem& p : problems()) {
    const Setting s = settings()[2];
    auto plan = cuda_plan(p, s.settings);
    ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
    auto data = video_like_data(p, 53);
    ASSERT_TRUE(data.ok());
    DeviceBinding dev(data->tensors());
    DeviceWorkspace ws((*plan)->workspace_bytes());
    ASSERT_EQ(cudaMemset(ws.data, 0, ws.bytes), cudaSuccess);
    ASSERT_TRUE((*plan)->run_at(kRouted, dev.t, ws.span(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<std::byte> clean = dev.out();
    for (int poison : {0xFF, 0x7F, 0x01}) {
      ASSERT_EQ(cudaMemset(ws.data, poison, ws.bytes), cudaSuccess);
      ASSERT_EQ(cudaMemset(dev.t.out.data, 0xFF, dev.t.out.span_bytes()), cudaSuccess);
      ASSERT_TRUE((*plan)->run_at(kRouted, dev.t, ws.span(), nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<std::byte> again = dev.out();
      EXPECT_EQ(std::memcmp(again.data(), clean.data(), clean.size()), 0)
          << name_of(p) << ", poison 0x" << std::hex << poison;
    }
  }
}

// The merge writes the caller's out in 16-byte vectors where it can; an out
// one element off that alignment (which the attention kernels never write:
// they write the workspace) takes the element stores and the same bits.
TEST_F(SolGpu, OutputOffTheVectorAlignmentHasTheSameBits) {
  for (const Problem& p : problems()) {
    auto plan = cuda_plan(p, settings()[1].settings);
    ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
    auto data = video_like_data(p, 67);
    ASSERT_TRUE(data.ok());
    DeviceBinding dev(data->tensors());
    DeviceWorkspace ws((*plan)->workspace_bytes());
    ASSERT_TRUE((*plan)->run_at(kRouted, dev.t, ws.span(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<std::byte> aligned = dev.out();
    const std::size_t elem = dtype_size(dev.t.out.dtype);
    DeviceWorkspace shifted(aligned.size() + 16);
    ASSERT_EQ(cudaMemset(shifted.data, 0xFF, shifted.bytes), cudaSuccess);
    AttentionTensors t = dev.t;
    t.out.data = static_cast<std::byte*>(shifted.data) + elem;
    ASSERT_TRUE((*plan)->run_at(kRouted, t, ws.span(), nullptr).ok());
    std::vector<std::byte> got(aligned.size());
    ASSERT_EQ(cudaMemcpy(got.data(), t.out.data, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(got.data(), aligned.data(), got.size()), 0) << name_of(p);
  }
}

// A routed call without statistics allocates nothing and waits for nothing:
// it captures into a CUDA graph whose replay matches the eager run.
TEST_F(SolGpu, RoutedCallCapturesIntoACudaGraph) {
  const Problem p = problems()[0];
  auto plan = cuda_plan(p, settings()[1].settings);
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
  auto data = video_like_data(p, 59);
  ASSERT_TRUE(data.ok());
  DeviceBinding dev(data->tensors());
  DeviceWorkspace ws((*plan)->workspace_bytes());
  EXPECT_TRUE(replay_matches_eager(dev, ws, [&](cudaStream_t stream) { return (*plan)->run_at(kRouted, dev.t, ws.span(), stream); }));
}

// A workspace one byte short (or none) is AK1110 before anything is queued.
TEST_F(SolGpu, WorkspaceTooSmallIsAK1110) {
  const Problem p = problems()[0];
  auto plan = cuda_plan(p, settings()[0].settings);
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
  auto data = video_like_data(p, 61);
  ASSERT_TRUE(data.ok());
  DeviceBinding dev(data->tensors());
  const std::size_t need = (*plan)->workspace_bytes();
  ASSERT_GT(need, 0u);
  DeviceWorkspace ws(need);
  EXPECT_TRUE((*plan)->run_at(kRouted, dev.t, ws.span().first(need - 1), nullptr).has_code("AK1110"));
  EXPECT_TRUE((*plan)->run_at(kRouted, dev.t, Workspace{}, nullptr).has_code("AK1110"));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}
#endif

}  // namespace
}  // namespace attnkit::testing
