// sparge_attn: SpargeAttn's selection of key blocks from pooled q / k
// similarity (sparse/sparge.hpp, docs/sparse.md), built per call into CSR
// lists in the workspace (backends/sparse/sparge_selection), then the
// block-sparse kernel: cpu_flash's on the CPU, fa2's on CUDA.
#include <algorithm>
#include <cmath>

#include "attnkit/backends/sparse.hpp"
#include "attnkit/sparse/sparge.hpp"
#include "backends/sparse/cpu_sparse_runner.hpp"
#include "backends/sparse/cuda_sparse_runner.hpp"
#include "backends/sparse/sparge_selection.hpp"
#include "backends/sparse/sparse_backend.hpp"

namespace attnkit {
namespace sparse {
namespace {

using S = SpargeSettings;

// Why a call of `p` runs dense ("" when it runs sparse): known at plan time.
std::string dense_reason(const Problem& p) {
  if (p.seqlen_q != p.seqlen_k) return "seqlen_q != seqlen_k";
  if (p.seqlen_q < S::kMinSeqlen) return "fewer than " + std::to_string(S::kMinSeqlen) + " queries";
  return "";
}

// One plan for both paths: a call that runs dense runs the runner's dense
// kernel; otherwise the selection writes the call's lists into the workspace
// front and the runner's block-sparse kernel reads them.
class SpargePlan final : public Plan {
 public:
  SpargePlan(Problem p, std::unique_ptr<SpargeSelection> selection, std::unique_ptr<SparseRunner> runner,
             DeviceKind device)
      : Plan(std::move(p)), selection_(std::move(selection)), runner_(std::move(runner)), device_(device),
        dense_reason_(dense_reason(problem())) {
    if (selection_) runner_->reserve_front(selection_->bytes());
  }

  std::size_t workspace_bytes() const override { return runner_->workspace_bytes(); }
  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    return run_at({}, t, ws, stream);
  }
  // With `where.stats` on the GPU, the listed total is copied back and the
  // stream waited for (after the kernels are queued): a call that asks for
  // statistics synchronises and cannot be captured in a CUDA graph.
  Diagnostics run_at(const CallContext& where, const AttentionTensors& t, Workspace ws,
                     StreamHandle stream) const override {
    const Problem& p = problem();
    if (!selection_) {
      if (where.stats) {
        where.stats->dense = true;
        where.stats->dense_reason = dense_reason_;
      }
      return runner_->run_dense(t, ws, stream);
    }
    if (ws.size() < workspace_bytes())
      return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
    // The selection reads q and k before any kernel checks them.
    if (Diagnostics why = validate_binding(p, t, {device_, 0}); !why.ok()) return why;
    auto lists = selection_->select(t, ws, stream);
    if (!lists) return lists.diagnostics();
    const BlockSparse layout = SpargeSelection::layout(p);
    Diagnostics ran = runner_->run_sparse(t, layout, lists->offsets, lists->indices, ws, stream, nullptr);
    if (!ran.ok() || where.stats == nullptr) return ran;
    auto listed = selection_->listed(*lists, stream);
    if (!listed) return listed.diagnostics();
    Problem inner = p;
    inner.block_sparse = layout;
    count_sparsity(p, inner, layout, *listed, where.stats);
    return ran;
  }

 private:
  std::unique_ptr<SpargeSelection> selection_;  // null: every call runs dense
  std::unique_ptr<SparseRunner> runner_;
  DeviceKind device_;
  std::string dense_reason_;
};

template <class Runner>
Result<std::unique_ptr<SparseRunner>> as_runner(Result<std::unique_ptr<Runner>> made) {
  if (!made) return made.diagnostics();
  return std::unique_ptr<SparseRunner>(std::move(*made));
}

// SpargeAttn's kernel is square self-attention of at least one 128-token
// block, without grouped-query heads; shorter calls run dense.
Capabilities sparge_capabilities() {
  Capabilities c = sparse_video_capabilities({64, 128});
  c.gqa = false;
  c.dense_below_seqlen = S::kMinSeqlen;
  return c;
}

// The CUDA path (sparge_select.cu + fa2's block-sparse kernel) is declared
// since tests/gpu/test_sparge_gpu.cpp passed on the H200 (2026-12-02: the
// selection equal to the host's, the plan equal to the CPU plan, dense
// fallbacks exact, poisoned workspace, CUDA-graph capture; memcheck /
// racecheck / synccheck clean).
constexpr bool kSpargeCudaVerified = true;

class SpargeBackend final : public SparseVideoBackend {
 public:
  SpargeBackend()
      : SparseVideoBackend("sparge_attn",
                           "SpargeAttn: per 128-query block the top-k (or cumulative-probability) 64-key blocks of "
                           "mean-pooled q / k similarity, dissimilar blocks dense",
                           sparge_capabilities()) {}

  // On CUDA, the kernels the plan would run must exist for the call's shape
  // (fa2's block-sparse instances are d128 only): check and plan agree.
  Diagnostics check(const Problem& p, const Platform& platform) const override {
    Diagnostics out = SparseVideoBackend::check(p, platform);
    if (out.ok() && platform.kind == PlatformKind::cuda)
      out.append(CudaSparseRunner::check_kernels(
          p, platform, dense_reason(p).empty() ? std::vector{SpargeSelection::layout(p)} : std::vector<BlockSparse>{}));
    return out;
  }

 protected:
  Result<std::unique_ptr<Plan>> plan_cpu(const Problem& p, const Platform& cpu,
                                         const select::BackendConfig& config) const override {
    return plan_on(p, cpu, config);
  }
  // The selection kernels (backends/cuda/sparge_select.cu), then fa2's
  // block-sparse kernel: 64-key blocks are fa2bs's tiles; fa3bs tiles 128 keys
  // (CudaSparseRunner's rule picks fa2 for the layout on sm_90 too).
  bool has_cuda_path() const override { return kSpargeCudaVerified; }
  Result<std::unique_ptr<Plan>> plan_cuda(const Problem& p, const Platform& gpu,
                                          const select::BackendConfig& config) const override {
    return plan_on(p, gpu, config);
  }

 private:
  // A call that runs dense plans only the dense kernel.
  static Result<std::unique_ptr<Plan>> plan_on(const Problem& p, const Platform& platform,
                                               const select::BackendConfig& config) {
    const bool on_gpu = platform.kind == PlatformKind::cuda;
    const bool sparse = dense_reason(p).empty();
    std::vector<BlockSparse> layouts;
    if (sparse) layouts.push_back(SpargeSelection::layout(p));
    auto runner = on_gpu ? as_runner(CudaSparseRunner::create(p, platform, layouts, {}, std::nullopt))
                         : as_runner(CpuSparseRunner::create(p, platform, layouts, std::nullopt));
    if (!runner) return runner.diagnostics();
    std::unique_ptr<SpargeSelection> selection;
    if (sparse) {
      const SpargeSettings s = sparge_settings(config);
      auto made = on_gpu ? make_device_sparge_selection(p, s, platform) : make_host_sparge_selection(p, s);
      if (!made) return made.diagnostics();
      selection = std::move(*made);
    }
    return std::unique_ptr<Plan>(std::make_unique<SpargePlan>(p, std::move(selection), std::move(*runner),
                                                              on_gpu ? DeviceKind::cuda : DeviceKind::cpu));
  }
};

}  // namespace
}  // namespace sparse

std::unique_ptr<Backend> make_sparge_backend() { return std::make_unique<sparse::SpargeBackend>(); }

}  // namespace attnkit
