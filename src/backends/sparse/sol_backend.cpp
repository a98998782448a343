// sol_attn: dense for dense_steps and dense_layers (exactly the dense kernel),
// Sol-Attn's routed tiles after (sparse/sol.hpp, docs/sparse.md). The CPU path
// routes into CSR lists in the workspace, runs the block-sparse kernel on the
// kept tiles and cpu_flash on the pooled tiles (fp32 outs and LSEs), and
// merges the two by their LSE; the CUDA path (sol_cuda_plan.cpp) does the same
// on the device. Both route with backends/sparse/sol_routing.
#include <cmath>
#include <limits>

#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/backends/sparse.hpp"
#include "attnkit/core/host_memory.hpp"
#include "attnkit/core/lse_merge.hpp"
#include "attnkit/sparse/sol.hpp"
#include "backends/sparse/cpu_sparse_runner.hpp"
#include "backends/sparse/sol_routing.hpp"
#include "backends/sparse/sparse_backend.hpp"
#include "backends/sparse/workspace_front.hpp"

namespace attnkit {
namespace sparse {
namespace {

constexpr int kBlock = SolSettings::kBlock;

// The plan's slices of the workspace front.
struct SolWorkspace {
  std::int64_t rows = 0, tiles = 0;  // CSR rows (batch * heads_q * query blocks), key tiles
  WorkspaceFront front;
  // CSR lists and the routing; q', k', v' and the mask of the pooled problem;
  // the exact and the pooled partial outputs (fp32) and LSEs; the pooled plan's workspace.
  std::size_t offsets = 0, indices = 0, keep = 0, q1 = 0, k1 = 0, v1 = 0, mask = 0, out_e = 0, lse_e = 0,
              out_p = 0, lse_p = 0, pooled_ws = 0, pooled_ws_bytes = 0;

  static SolWorkspace of(const Problem& p, std::size_t pooled_plan_bytes) {
    SolWorkspace w;
    const Problem q = sol_pooled_problem(p);
    const int nq = num_blocks(p.seqlen_q, kBlock);
    w.tiles = q.seqlen_k;
    w.rows = static_cast<std::int64_t>(p.batch) * p.heads_q * nq;
    const std::size_t B = p.batch, S = p.seqlen_q, Hq = p.heads_q, Hkv = p.heads_kv, T = w.tiles;
    w.offsets = w.front.take(sizeof(std::int32_t) * (w.rows + 1));
    w.indices = w.front.take(sizeof(std::int32_t) * w.rows * w.tiles);
    w.keep = w.front.take(static_cast<std::size_t>(w.rows * w.tiles));
    w.q1 = w.front.take(sizeof(float) * B * S * Hq * q.head_dim_qk);
    w.k1 = w.front.take(sizeof(float) * B * T * Hkv * q.head_dim_qk);
    w.v1 = w.front.take(sizeof(float) * B * T * Hkv * q.head_dim_v);
    w.mask = w.front.take(B * Hq * S * T);
    w.out_e = w.front.take(sizeof(float) * B * S * Hq * p.head_dim_v);
    w.lse_e = w.front.take(sizeof(float) * B * Hq * S);
    w.out_p = w.front.take(sizeof(float) * B * S * Hq * p.head_dim_v);
    w.lse_p = w.front.take(sizeof(float) * B * Hq * S);
    w.pooled_ws_bytes = pooled_plan_bytes;
    w.pooled_ws = w.front.take(pooled_plan_bytes);
    return w;
  }
};

class SolPlan final : public Plan {
 public:
  SolPlan(Problem p, SolSettings s, std::unique_ptr<CpuSparseRunner> runner, std::unique_ptr<Plan> pooled)
      : Plan(std::move(p)), settings_(std::move(s)), runner_(std::move(runner)), pooled_(std::move(pooled)),
        ws_(SolWorkspace::of(problem(), pooled_->workspace_bytes())) {
    runner_->reserve_front(ws_.front.size());
  }

  std::size_t workspace_bytes() const override { return runner_->workspace_bytes(); }
  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    return run_at({}, t, ws, stream);
  }
  Diagnostics run_at(const CallContext& where, const AttentionTensors& t, Workspace ws, StreamHandle) const override {
    auto dense = sol_runs_dense(settings_, where);
    if (!dense) return dense.diagnostics();
    if (*dense) return runner_->run_dense(t, ws);
    if (ws.size() < workspace_bytes())
      return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
    if (Diagnostics why = validate_binding(problem(), t, {DeviceKind::cpu, 0}); !why.ok()) return why;
    return routed(t, ws, where.stats);
  }

 private:
  template <class T>
  static T* at(Workspace ws, std::size_t offset) {
    return WorkspaceFront::at<T>(ws, offset);
  }
  Diagnostics routed(const AttentionTensors& t, Workspace ws, SparsityStats* stats) const {
    const Problem& p = problem();
    const int nq = num_blocks(p.seqlen_q, kBlock), dv = p.head_dim_v, T = static_cast<int>(ws_.tiles);
    auto* offsets = at<std::int32_t>(ws, ws_.offsets);
    auto* indices = at<std::int32_t>(ws, ws_.indices);
    auto* keep = at<std::uint8_t>(ws, ws_.keep);
    auto* q1 = at<float>(ws, ws_.q1);
    auto* k1 = at<float>(ws, ws_.k1);
    auto* v1 = at<float>(ws, ws_.v1);
    auto* mask = at<std::uint8_t>(ws, ws_.mask);
    auto* out_e = at<float>(ws, ws_.out_e);
    auto* lse_e = at<float>(ws, ws_.lse_e);
    auto* out_p = at<float>(ws, ws_.out_p);
    auto* lse_p = at<float>(ws, ws_.lse_p);
    sol_pool_host(p, t, q1, k1, v1);
    sol_route_host(p, settings_, q1, k1, keep);
    sol_lists_host(SolShape::of(p), keep, offsets, indices);
    const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.heads_q * p.seqlen_q;
#pragma omp parallel for num_threads(host_threads()) schedule(static)
    for (std::int64_t u = 0; u < rows; ++u) {  // u = (b * heads_q + h) * seqlen + i: the pooled mask
      const std::int64_t r = u / p.seqlen_q * nq + (u % p.seqlen_q) / kBlock;
      for (int c = 0; c < T; ++c) mask[u * T + c] = !keep[r * T + c];
    }
    // The kept tiles, exactly (fp32 out and LSE).
    AttentionTensors exact = t;
    exact.out = p.layout == Layout::bhsd ? make_view(out_e, DType::f32, {p.batch, p.heads_q, p.seqlen_q, dv})
                                         : make_view(out_e, DType::f32, {p.batch, p.seqlen_q, p.heads_q, dv});
    exact.lse = make_view(lse_e, DType::f32, {p.batch, p.heads_q, p.seqlen_q});
    const BlockSparse layout{kBlock, kBlock, p.batch, p.heads_q};
    if (Diagnostics ran = runner_->run_sparse(exact, layout, make_view(offsets, DType::i32, {ws_.rows + 1}),
                                              make_view(indices, DType::i32, {offsets[ws_.rows]}), ws, nullptr, stats);
        !ran.ok())
      return ran;
    // The pooled tiles: one pseudo-key each, through cpu_flash with the custom mask.
    AttentionTensors pooled;
    pooled.q = make_view(q1, DType::f32, {p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk + 1});
    pooled.k = make_view(k1, DType::f32, {p.batch, T, p.heads_kv, p.head_dim_qk + 1});
    pooled.v = make_view(v1, DType::f32, {p.batch, T, p.heads_kv, dv});
    pooled.out = make_view(out_p, DType::f32, {p.batch, p.seqlen_q, p.heads_q, dv});
    pooled.lse = make_view(lse_p, DType::f32, {p.batch, p.heads_q, p.seqlen_q});
    pooled.custom_mask = make_view(mask, DType::u8, {p.batch, p.heads_q, p.seqlen_q, T});
    if (Diagnostics ran = pooled_->run(pooled, {ws.data() + ws_.pooled_ws, ws_.pooled_ws_bytes}, nullptr); !ran.ok())
      return ran;
    // out = merge(exact, pooled) by their LSE.
#pragma omp parallel for num_threads(host_threads()) schedule(static)
    for (std::int64_t u = 0; u < rows; ++u) {  // u = (b * heads_q + h) * seqlen + i
      const int i = static_cast<int>(u % p.seqlen_q), h = static_cast<int>(u / p.seqlen_q % p.heads_q),
                b = static_cast<int>(u / p.seqlen_q / p.heads_q);
      const LseWeights w = lse_merge_weights(lse_e[u], lse_p[u]);
      const HeadRows e_rows = head_rows(p.layout, exact.out.strides.data(), b, h, 0);
      const float* oe = out_e + e_rows.offset + i * e_rows.row_stride;
      const float* op = out_p + ((static_cast<std::int64_t>(b) * p.seqlen_q + i) * p.heads_q + h) * dv;
      const HeadRows o_rows = head_rows(p.layout, t.out.strides.data(), b, h, 0);
      for (int d = 0; d < dv; ++d)
        store_from_double(t.out.data, t.out.dtype, o_rows.offset + i * o_rows.row_stride + d,
                          w.a * oe[d] + w.b * op[d]);
    }
    return {};
  }

  SolSettings settings_;
  std::unique_ptr<CpuSparseRunner> runner_;
  std::unique_ptr<Plan> pooled_;
  SolWorkspace ws_;
};

// The CUDA path (sol_cuda_plan.cpp: the routing kernels of
// backends/cuda/sol_route.cu, the 64 x 64 block-sparse instances on the kept
// tiles, fa3bsq64 on sm_90 and fa2bsq64 else, fa2solpool on the pooled tiles, the
// LSE merge of dist/)
// is declared since tests/gpu/test_sol_gpu.cpp passed on the H200
// (2026-12-02: routing equal to the CPU's, routed calls equal to the CPU plan
// and the oracle, dense steps and layers exact, poisoned workspace, CUDA-graph
// capture, AK1110; memcheck / racecheck / synccheck clean).
constexpr bool kSolCudaVerified = true;

class SolBackend final : public SparseVideoBackend {
 public:
  SolBackend()
      : SparseVideoBackend("sol_attn",
                           "Sol-Attn: dense for the first steps and layers, then per query block the key tiles a "
                           "pooled proxy ranks above mean + tau std exactly and the rest as pooled keys (bf16, d128)",
                           [] {
                             Capabilities c = sparse_video_capabilities({128});
                             c.dtypes = {DType::bf16};
                             return c;
                           }()) {}

  // On CUDA, the kernels the plan would run must exist for the call's shape: check and plan agree.
  Diagnostics check(const Problem& p, const Platform& platform) const override {
    Diagnostics out = SparseVideoBackend::check(p, platform);
    if (out.ok() && platform.kind == PlatformKind::cuda) out.append(sol_cuda_kernel_refusals(p, platform));
    return out;
  }

 protected:
  // Self-attention; the dense backend `fa` (cpu_flash on the CPU, fa3 / fa2
  // on this machine's GPU: sage_attn is modelled only) and, on the CPU, the
  // sizes its router takes. A named CUDA platform validates any dense_backend.
  Diagnostics call_refusals(const Problem& p, const Platform& platform,
                            const select::BackendConfig& config) const override {
    if (p.seqlen_q != p.seqlen_k)
      return diagnose("AK2116", {{"backend", "sol_attn"},
                                 {"reason", "it routes self-attention (seqlen_q " + std::to_string(p.seqlen_q) +
                                                " != seqlen_k " + std::to_string(p.seqlen_k) + ")"}});
    const SolSettings s = sol_settings(config);
    if (platform.kind == PlatformKind::cuda) {
      if (platform.detected && s.dense_backend != "fa")
        return diagnose("AK2111", {{"backend", s.dense_backend},
                                   {"detail", " (sol_attn's dense_backend) on this GPU: use dense_backend=fa, "
                                              "the GPU's flash kernel (fa3 on sm_90, fa2 on sm_80+)"}});
      return {};
    }
    if (platform.kind != PlatformKind::cpu) return {};
    if (s.dense_backend != "fa")
      return diagnose("AK2111", {{"backend", s.dense_backend},
                                 {"detail", " (sol_attn's dense_backend) on the CPU: use dense_backend=fa, "
                                            "the CPU's flash kernel (cpu_flash)"}});
    if (p.head_dim_qk > SolSettings::kMaxHeadDim || num_blocks(p.seqlen_k, kBlock) > SolSettings::kMaxTiles)
      return diagnose("AK2116", {{"backend", "sol_attn"},
                                 {"reason", "the CPU path routes up to " + std::to_string(SolSettings::kMaxTiles * kBlock) +
                                                " tokens of head dim up to " + std::to_string(SolSettings::kMaxHeadDim)}});
    return {};
  }
  Result<std::unique_ptr<Plan>> plan_cpu(const Problem& p, const Platform& cpu,
                                         const select::BackendConfig& config) const override {
    return make_sol_cpu_plan(p, cpu, sol_settings(config));
  }
  bool has_cuda_path() const override { return kSolCudaVerified; }
  Result<std::unique_ptr<Plan>> plan_cuda(const Problem& p, const Platform& gpu,
                                          const select::BackendConfig& config) const override {
    return make_sol_cuda_plan(p, gpu, sol_settings(config));
  }
};

}  // namespace

Result<std::unique_ptr<Plan>> make_sol_cpu_plan(const Problem& p, const Platform& cpu, const SolSettings& s) {
  auto runner = CpuSparseRunner::create(p, cpu, {SolShape::layout(p)}, std::nullopt, /*partial=*/true);
  if (!runner) return runner.diagnostics();
  auto pooled = make_cpu_flash_backend()->plan(sol_pooled_problem(p), cpu);
  if (!pooled) return pooled.diagnostics();
  return std::unique_ptr<Plan>(std::make_unique<SolPlan>(p, s, std::move(*runner), std::move(*pooled)));
}

}  // namespace sparse

std::unique_ptr<Backend> make_sol_backend() { return std::make_unique<sparse::SolBackend>(); }

}  // namespace attnkit
