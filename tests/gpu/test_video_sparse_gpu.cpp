// video_sparse_attn_h3's CUDA path (backends/sparse/video_sparse_cuda_plan.cpp):
// the device selection against the host selection (the same CSR lists,
// exactly: both run sparse/video_sparse_rule.hpp's arithmetic), outputs and
// statistics against the CPU plan and the fp64 oracle, with and without the
// gate (zero gates bit-identical to no gate), two sequences, GQA, BSHD /
// BHSD, bf16 / fp16, a non-cubic grid; a poisoned workspace and output; an
// out off the combine's vector alignment; a CUDA-graph capture; a workspace
// one byte short. The plans are made directly
// (make_video_sparse_cuda_plan / make_video_sparse_cpu_plan), so these tests
// run whether or not the backend declares its CUDA path
// (video_sparse_backend.cpp kVideoSparseCudaVerified). Skips without a GPU.
//
// On the device machine: build-gpu/tests/test_sparse_gpu --gtest_filter='VideoSparseGpu*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "attnkit/core/error_stats.hpp"
#include "attnkit/sparse/video_sparse.hpp"
#include "attnkit/sparse/video_sparse_rule.hpp"
#include "backends/sparse/video_sparse_plans.hpp"
#include "gpu/device_buffers.hpp"
#include "sparse/sparse_test_util.hpp"
#include "sparse/video_sparse_oracle.hpp"

namespace attnkit::testing {
namespace {

using sparse::VideoSparseSettings;

// 8 x 8 x 8 latents (8 cubes, 512 tokens), 2 sequences, 4 query heads on 2
// kv heads, bf16 BSHD; 4 x 8 x 12 latents (6 cubes, 384 tokens), 2 heads,
// fp16 BHSD. d128, with the gate input.
std::vector<Problem> problems() {
  Problem a = video_problem({8, 8, 8}, 0, 2, 4, 2, 128, DType::bf16);
  Problem b = video_problem({4, 8, 12}, 0, 1, 2, 2, 128, DType::f16);
  b.layout = Layout::bhsd;
  a.has_gate = b.has_gate = true;
  return {a, b};
}
std::string name_of(const Problem& p) {
  return std::to_string(p.seqlen_q) + " tokens, " + std::string(dtype_name(p.dtype)) + " " +
         std::string(layout_name(p.layout)) + (p.has_gate ? ", gate" : "");
}
std::vector<VideoSparseSettings> settings() { return {{0.5}, {0.75}}; }

struct HostLists {
  std::vector<std::int32_t> offsets, indices;
  double margin = INFINITY;  // the smallest gap between a kept cube's score and a dropped one's
};
// The CPU path's selection of `t` (pool_cubes, vsa_cube_score, top_cubes: what VideoSparsePlan runs).
HostLists host_selection(const Problem& p, const VideoSparseSettings& s, const AttentionTensors& t) {
  const VideoTiling cubes = sparse::video_cubes(*p.video);
  const int nc = cubes.tiles(), d = p.head_dim_qk, keep = sparse::video_sparse_keep(s.sparsity, nc);
  std::vector<double> sum(d), scores(nc);
  std::vector<float> qm(static_cast<std::size_t>(nc) * d), km(qm.size());
  std::vector<std::int32_t> kept(keep);
  std::vector<std::uint32_t> order(nc);
  HostLists h;
  h.offsets.push_back(0);
  for (int b = 0; b < p.batch; ++b)
    for (int hq = 0; hq < p.heads_q; ++hq) {
      const HeadRows qr = head_rows(p.layout, t.q.strides.data(), b, hq, 0);
      const HeadRows kr = head_rows(p.layout, t.k.strides.data(), b, hq / p.gqa_ratio(), 0);
      sparse::pool_cubes(cubes, t.q.data, t.q.dtype, qr.offset, qr.row_stride, d, qm.data(), sum.data());
      sparse::pool_cubes(cubes, t.k.data, t.k.dtype, kr.offset, kr.row_stride, d, km.data(), sum.data());
      for (int a = 0; a < nc; ++a) {
        for (int c = 0; c < nc; ++c)
          scores[c] = sparse::vsa_cube_score(qm.data() + a * d, km.data() + c * d, d, p.softmax_scale());
        sparse::top_cubes(scores, kept, order);
        h.indices.insert(h.indices.end(), kept.begin(), kept.end());
        h.offsets.push_back(static_cast<std::int32_t>(h.indices.size()));
        std::vector<double> sorted = scores;
        std::sort(sorted.rbegin(), sorted.rend());
        if (keep < nc) h.margin = std::min(h.margin, sorted[keep - 1] - sorted[keep]);
      }
    }
  return h;
}

// The GPU tests' inputs, checked on the host (so CI sees it): the kept cubes
// are far from a tie with the first dropped one.
TEST(VideoSparseGpuInputs, DecisionsAreFarFromTies) {
  for (const Problem& p : problems())
    for (const VideoSparseSettings& s : settings()) {
      auto data = video_like_data(p, 71);
      ASSERT_TRUE(data.ok());
      EXPECT_GT(host_selection(p, s, data->tensors()).margin, 1e-9) << name_of(p) << ", sparsity " << s.sparsity;
    }
}

#if defined(ATTNKIT_HAS_CUDA)
using VideoSparseGpu = OnGpu;

// The CSR lists a CUDA plan's last run wrote into `ws`, on the host (empty on a failure, which is reported).
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> device_lists(const Plan& plan, DeviceWorkspace& ws) {
  auto lists = sparse::video_sparse_cuda_lists(plan, ws.span());
  EXPECT_TRUE(lists.ok());
  if (!lists.ok()) return {};
  std::vector<std::int32_t> offsets(lists->offsets.numel());
  cudaMemcpy(offsets.data(), lists->offsets.data, offsets.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost);
  const std::int64_t listed = offsets.empty() ? 0 : offsets.back();
  std::vector<std::int32_t> indices(std::clamp<std::int64_t>(listed, 0, lists->indices.numel()));
  cudaMemcpy(indices.data(), lists->indices.data, indices.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost);
  return {offsets, indices};
}

// The device selection writes exactly the host selection's lists.
TEST_F(VideoSparseGpu, SelectionMatchesTheCpuSelection) {
  for (const Problem& p : problems())
    for (const VideoSparseSettings& s : settings()) {
      auto data = video_like_data(p, 71);
      ASSERT_TRUE(data.ok());
      auto plan = sparse::make_video_sparse_cuda_plan(p, *gpu_, s);
      ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
      GatedBinding g(data->tensors());
      DeviceWorkspace ws((*plan)->workspace_bytes());
      ASSERT_EQ(cudaMemset(ws.data, 0xA5, ws.bytes), cudaSuccess);  // stale bytes, not zeros
      const Diagnostics ran = (*plan)->run(g.dev.t, ws.span(), nullptr);
      ASSERT_TRUE(ran.ok()) << ran.summary();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto [offsets, indices] = device_lists(**plan, ws);
      const HostLists want = host_selection(p, s, data->tensors());
      EXPECT_EQ(offsets, want.offsets) << name_of(p) << ", sparsity " << s.sparsity;
      EXPECT_EQ(indices, want.indices) << name_of(p) << ", sparsity " << s.sparsity;
    }
}

// The same with more cubes than one staged chunk, one warp's ballot and one
// CTA's 8 query cubes (72 cubes: 2 x 4 x 9, a partial chunk, ballot and CTA),
// and with exact ties: keys constant over the video, so every key cube of a
// row scores alike and the lowest cubes are kept (the host's tie rule).
TEST_F(VideoSparseGpu, SelectionMatchesTheCpuSelectionPastOneChunkAndOnTies) {
  const Problem p = video_problem({8, 16, 36}, 0, 1, 2, 1, 128, DType::bf16);
  for (const bool ties : {false, true})
    for (const VideoSparseSettings& s : settings()) {
      auto data = video_like_data(p, 72);
      ASSERT_TRUE(data.ok());
      AttentionTensors host = data->tensors();
      if (ties)
        for (std::int64_t x = 0; x < host.k.numel(); ++x) store_from_double(host.k.data, host.k.dtype, x, 0.25);
      auto plan = sparse::make_video_sparse_cuda_plan(p, *gpu_, s);
      ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
      GatedBinding g(host);
      DeviceWorkspace ws((*plan)->workspace_bytes());
      ASSERT_EQ(cudaMemset(ws.data, 0xA5, ws.bytes), cudaSuccess);
      ASSERT_TRUE((*plan)->run(g.dev.t, ws.span(), nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto [offsets, indices] = device_lists(**plan, ws);
      const HostLists want = host_selection(p, s, host);
      if (ties) EXPECT_EQ(want.margin, 0.0);  // the case is the tie it is meant to be
      EXPECT_EQ(offsets, want.offsets) << name_of(p) << (ties ? ", ties" : "") << ", sparsity " << s.sparsity;
      EXPECT_EQ(indices, want.indices) << name_of(p) << (ties ? ", ties" : "") << ", sparsity " << s.sparsity;
    }
}

// Outputs against the CPU plan (the GPU's fine pass rounds to q's dtype
// before the gated coarse output is added) and the fp64 oracle (1e-2 at 16
// bits, docs/sparse.md), with and without the gate; statistics equal.
TEST_F(VideoSparseGpu, CudaPlanMatchesTheCpuPlanAndTheOracle) {
  const Platform cpu = detect_cpu_platform();
  for (Problem p : problems())
    for (bool gated : {true, false})
      for (const VideoSparseSettings& s : settings()) {
        p.has_gate = gated;
        auto data = video_like_data(p, 73);
        ASSERT_TRUE(data.ok());
        auto plan = sparse::make_video_sparse_cuda_plan(p, *gpu_, s);
        ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
        auto cpu_plan = sparse::make_video_sparse_cpu_plan(p, cpu, s);
        ASSERT_TRUE(cpu_plan.ok()) << cpu_plan.diagnostics().summary();
        GatedBinding g(data->tensors());
        ASSERT_EQ(cudaMemset(g.dev.t.out.data, 0xFF, g.dev.t.out.span_bytes()), cudaSuccess);  // NaN until written
        DeviceWorkspace ws((*plan)->workspace_bytes());
        SparsityStats gpu_stats, cpu_stats;
        ASSERT_TRUE((*plan)->run_at({-1, -1, std::nullopt, &gpu_stats}, g.dev.t, ws.span(), nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<std::byte> cpu_ws((*cpu_plan)->workspace_bytes());
        ASSERT_TRUE((*cpu_plan)->run_at({-1, -1, std::nullopt, &cpu_stats}, data->tensors(), cpu_ws, nullptr).ok());
        const std::vector<std::byte> gpu_out = g.dev.out();
        const TensorView got = host_view_of(gpu_out, data->tensors().out);
        const ErrorStats e = compare_outputs(got, data->tensors().out);
        EXPECT_TRUE(e.clean()) << describe(e);
        EXPECT_LT(e.rel_l2, 2e-2) << name_of(p) << ", sparsity " << s.sparsity << ": " << describe(e);
        EXPECT_LT(rel_l2(bshd_doubles(p, got), video_sparse_oracle(p, data->tensors(), s.sparsity, 1.0)), 1e-2)
            << name_of(p) << ", sparsity " << s.sparsity << " against the oracle";
        EXPECT_EQ(gpu_stats.blocks, cpu_stats.blocks);
        EXPECT_EQ(gpu_stats.blocks_skipped, cpu_stats.blocks_skipped);
        EXPECT_GT(gpu_stats.blocks_skipped, 0);
      }
}

// Zero gates give exactly the output without a gate (the pure fine pass).
TEST_F(VideoSparseGpu, ZeroGatesArePureSparse) {
  Problem p = problems()[0];
  auto data = video_like_data(p, 79);
  ASSERT_TRUE(data.ok());
  std::memset(data->tensors().gate.data, 0, data->tensors().gate.span_bytes());
  std::vector<std::vector<std::byte>> outs;
  for (bool gated : {true, false}) {
    p.has_gate = gated;
    auto plan = sparse::make_video_sparse_cuda_plan(p, *gpu_, settings()[1]);
    ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
    AttentionTensors t = data->tensors();
    if (!gated) t.gate = {};
    GatedBinding g(t);
    DeviceWorkspace ws((*plan)->workspace_bytes());
    ASSERT_TRUE((*plan)->run(g.dev.t, ws.span(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    outs.push_back(g.dev.out());
  }
  ASSERT_EQ(outs[0].size(), outs[1].size());
  EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size()), 0);
}

// A workspace and an output full of garbage (NaN bit patterns) give the
// clean run's output, bit for bit: every byte the path reads it wrote.
TEST_F(VideoSparseGpu, PoisonedWorkspaceAndOutput) {
  for (const Problem& p : problems()) {
    auto plan = sparse::make_video_sparse_cuda_plan(p, *gpu_, settings()[1]);
    ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
    auto data = video_like_data(p, 83);
    ASSERT_TRUE(data.ok());
    GatedBinding g(data->tensors());
    DeviceWorkspace ws((*plan)->workspace_bytes());
    ASSERT_EQ(cudaMemset(ws.data, 0, ws.bytes), cudaSuccess);
    ASSERT_TRUE((*plan)->run(g.dev.t, ws.span(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<std::byte> clean = g.dev.out();
    for (int poison : {0xFF, 0x7F, 0x01}) {
      ASSERT_EQ(cudaMemset(ws.data, poison, ws.bytes), cudaSuccess);
      ASSERT_EQ(cudaMemset(g.dev.t.out.data, 0xFF, g.dev.t.out.span_bytes()), cudaSuccess);
      ASSERT_TRUE((*plan)->run(g.dev.t, ws.span(), nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<std::byte> again = g.dev.out();
      EXPECT_EQ(std::memcmp(again.data(), clean.data(), clean.size()), 0)
          << name_of(p) << ", poison 0x" << std::hex << poison;
    }
  }
}

// The combine writes the caller's out in 16-byte vectors where it can; an out
// one element off that alignment, or with rows padded to head_dim + 1
// elements (no stride a multiple of 8), takes the element stores and the same bits.
TEST_F(VideoSparseGpu, OutputOffTheVectorAlignmentHasTheSameBits) {
  for (const Problem& p : problems()) {
    auto plan = sparse::make_video_sparse_cuda_plan(p, *gpu_, settings()[1]);
    ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
    auto data = video_like_data(p, 101);
    ASSERT_TRUE(data.ok());
    GatedBinding g(data->tensors());
    DeviceWorkspace ws((*plan)->workspace_bytes());
    ASSERT_TRUE((*plan)->run(g.dev.t, ws.span(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<std::byte> aligned = g.dev.out();
    const TensorView dense = g.dev.t.out;
    const std::size_t elem = dtype_size(dense.dtype);
    for (const bool padded : {false, true}) {
      TensorView out = dense;
      if (padded) {  // strides of the dense shape with the last dim's rows one element longer
        out.strides[out.rank - 2] = out.shape[out.rank - 1] + 1;
        for (int i = out.rank - 3; i >= 0; --i) out.strides[i] = out.strides[i + 1] * out.shape[i + 1];
      }
      DeviceWorkspace buffer(static_cast<std::size_t>(out.span_bytes()) + 16);
      ASSERT_EQ(cudaMemset(buffer.data, 0xFF, buffer.bytes), cudaSuccess);
      out.data = static_cast<std::byte*>(buffer.data) + (padded ? 0 : elem);
      AttentionTensors t = g.dev.t;
      t.out = out;
      ASSERT_TRUE((*plan)->run(t, ws.span(), nullptr).ok());
      std::vector<std::byte> span(static_cast<std::size_t>(out.span_bytes()));
      ASSERT_EQ(cudaMemcpy(span.data(), out.data, span.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      std::vector<std::byte> got(aligned.size());  // out's elements in the dense order
      for (std::int64_t x = 0; x < dense.numel(); ++x) {
        std::int64_t at = 0, rest = x;
        for (int i = out.rank - 1; i >= 0; --i) at += rest % out.shape[i] * out.strides[i], rest /= out.shape[i];
        std::memcpy(got.data() + x * elem, span.data() + at * elem, elem);
      }
      EXPECT_EQ(std::memcmp(got.data(), aligned.data(), got.size()), 0)
          << name_of(p) << (padded ? ", rows padded" : ", one element off");
    }
  }
}

// run() allocates nothing and waits for nothing (statistics included: the
// kept count is known on the host): it captures into a CUDA graph whose
// replay matches the eager run.
TEST_F(VideoSparseGpu, RunCapturesIntoACudaGraph) {
  const Problem p = problems()[0];
  auto plan = sparse::make_video_sparse_cuda_plan(p, *gpu_, settings()[0]);
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
  auto data = video_like_data(p, 89);
  ASSERT_TRUE(data.ok());
  GatedBinding g(data->tensors());
  DeviceWorkspace ws((*plan)->workspace_bytes());
  SparsityStats stats;
  EXPECT_TRUE(replay_matches_eager(g.dev, ws, [&](cudaStream_t stream) {
    return (*plan)->run_at({-1, -1, std::nullopt, &stats}, g.dev.t, ws.span(), stream);
  }));
  EXPECT_GT(stats.blocks_skipped, 0);  // the captured call's
}

// A workspace one byte short (or none) is AK1110 before anything is queued.
TEST_F(VideoSparseGpu, WorkspaceTooSmallIsAK1110) {
  const Problem p = problems()[0];
  auto plan = sparse::make_video_sparse_cuda_plan(p, *gpu_, settings()[0]);
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
  auto data = video_like_data(p, 97);
  ASSERT_TRUE(data.ok());
  GatedBinding g(data->tensors());
  expect_short_workspace_refused(**plan, g.dev.t);
}
#endif

}  // namespace
}  // namespace attnkit::testing
