// hybrid_window_attn_h3: window softmax attention (cpu_flash's sliding-window
// kernel, fp32 out) plus gate * the linear-attention branch with phi = elu + 1
// (sparse/hybrid_window.hpp, docs/sparse.md).
#include <algorithm>

#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/backends/sparse.hpp"
#include "attnkit/core/host_memory.hpp"
#include "attnkit/sparse/hybrid_window.hpp"
#include "backends/sparse/hybrid_window_plans.hpp"
#include "backends/sparse/sparse_backend.hpp"
#include "backends/sparse/workspace_front.hpp"

namespace attnkit {
namespace sparse {
namespace {

// The softmax branch as a cpu_flash problem: the call's, with the window and an fp32 out.
Problem window_problem(const Problem& p, const HybridWindowSettings& s) {
  Problem w = hybrid_softmax_problem(p, s);
  w.out_dtype_override = DType::f32;
  return w;
}

class HybridWindowPlan final : public Plan {
 public:
  HybridWindowPlan(Problem p, std::unique_ptr<Plan> window)
      : Plan(std::move(p)), window_(std::move(window)), threads_(host_threads()),
        causal_(window_->problem().window.right == 0) {
    const Problem& q = problem();
    const std::size_t d = q.head_dim_qk, dv = q.head_dim_v;
    soft_ = front_.take(sizeof(float) * q.batch * q.seqlen_q * q.heads_q * dv);
    // Full (non-causal) branch: S and z per (sequence, kv head), shared by its query heads.
    state_ = front_.take(sizeof(double) * q.batch * q.heads_kv * (d * dv + d));
    // Per thread: a running S and z (causal), phi(q_i) and phi(k_j).
    scratch_ = front_.take_per_thread(sizeof(double) * (d * dv + 3 * d), threads_);
    window_at_ = front_.take(window_->workspace_bytes());
  }

  std::size_t workspace_bytes() const override { return front_.size(); }
  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle) const override {
    const Problem& p = problem();
    if (ws.size() < workspace_bytes())
      return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
    if (Diagnostics why = validate_gated_call(p, t); !why.ok()) return why;
    auto* soft = WorkspaceFront::at<float>(ws, soft_);
    AttentionTensors w = t;
    w.gate = {};
    w.out = p.layout == Layout::bhsd ? make_view(soft, DType::f32, {p.batch, p.heads_q, p.seqlen_q, p.head_dim_v})
                                     : make_view(soft, DType::f32, {p.batch, p.seqlen_q, p.heads_q, p.head_dim_v});
    if (Diagnostics ran = window_->run(w, ws.subspan(window_at_, window_->workspace_bytes()), nullptr); !ran.ok())
      return ran;
    if (!causal_ && p.has_gate) key_state(t, ws);
    combine(t, w.out, ws);
    return {};
  }

 private:
  double load(const TensorView& x, int b, int h, std::int64_t row, int c) const {
    const HeadRows r = head_rows(problem().layout, x.strides.data(), b, h, 0);
    return load_as_double(x.data, x.dtype, r.offset + row * r.row_stride + c);
  }

  // S = sum_j phi(k_j) v_j^T, z = sum_j phi(k_j) over every key of (b, kv head).
  void key_state(const AttentionTensors& t, Workspace ws) const {
    const Problem& p = problem();
    const int d = p.head_dim_qk, dv = p.head_dim_v;
    auto* state = WorkspaceFront::at<double>(ws, state_);
    const std::int64_t units = static_cast<std::int64_t>(p.batch) * p.heads_kv;
#pragma omp parallel num_threads(threads_)
    {
      double* phi = front_.mine<double>(ws, scratch_);
#pragma omp for schedule(static)
      for (std::int64_t u = 0; u < units; ++u) {  // u = b * heads_kv + h
        const int b = static_cast<int>(u / p.heads_kv), h = static_cast<int>(u % p.heads_kv);
        double* S = state + u * (static_cast<std::int64_t>(d) * dv + d);
        double* z = S + static_cast<std::int64_t>(d) * dv;
        std::fill(S, S + static_cast<std::int64_t>(d) * dv + d, 0.0);
        for (std::int64_t j = 0; j < p.seqlen_k; ++j) accumulate(t, b, h, j, S, z, phi);
      }
    }
  }

  // S += phi(k_j) v_j^T, z += phi(k_j).
  void accumulate(const AttentionTensors& t, int b, int hk, std::int64_t j, double* S, double* z, double* phi) const {
    const Problem& p = problem();
    const int d = p.head_dim_qk, dv = p.head_dim_v;
    for (int c = 0; c < d; ++c) phi[c] = linear_feature(load(t.k, b, hk, j, c));
    for (int c = 0; c < d; ++c) z[c] += phi[c];
    for (int e = 0; e < dv; ++e) {
      const double v = load(t.v, b, hk, j, e);
      for (int c = 0; c < d; ++c) S[c * dv + e] += phi[c] * v;
    }
  }

  // out[i] = soft[i] + gate[i] * phi(q_i) . S_i / (phi(q_i) . z_i), per (b, query head),
  // with S_i, z_i over every key (key_state) or, causal (a window without later keys),
  // the keys j <= i (a running sum).
  void combine(const AttentionTensors& t, const TensorView& soft, Workspace ws) const {
    const Problem& p = problem();
    const int d = p.head_dim_qk, dv = p.head_dim_v;
    const bool causal = causal_;
    const auto* state = WorkspaceFront::at<const double>(ws, state_);
    const auto* s = soft.ptr<const float>();
    const std::int64_t units = static_cast<std::int64_t>(p.batch) * p.heads_q;
#pragma omp parallel num_threads(threads_)
    {
      double* running = front_.mine<double>(ws, scratch_);  // causal S then z
      double* phi = running + static_cast<std::int64_t>(d) * dv + d;
      double* phi_k = phi + d;
#pragma omp for schedule(static)
      for (std::int64_t u = 0; u < units; ++u) {  // u = b * heads_q + h
        const int b = static_cast<int>(u / p.heads_q), h = static_cast<int>(u % p.heads_q), hk = h / p.gqa_ratio();
        const double* S = causal ? running : state + (static_cast<std::int64_t>(b) * p.heads_kv + hk) * (static_cast<std::int64_t>(d) * dv + d);
        const double* z = S + static_cast<std::int64_t>(d) * dv;
        if (causal) std::fill(running, running + static_cast<std::int64_t>(d) * dv + d, 0.0);
        const HeadRows sr = head_rows(p.layout, soft.strides.data(), b, h, 0);
        const HeadRows orow = head_rows(p.layout, t.out.strides.data(), b, h, 0);
        for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
          const double g = p.has_gate ? t.gate.ptr<const float>()[gate_offset(p.layout, t.gate.strides.data(), b, h, i, 0)] : 0.0;
          if (causal && p.has_gate) accumulate(t, b, hk, i, running, running + static_cast<std::int64_t>(d) * dv, phi_k);
          double den = 0;
          if (p.has_gate)
            for (int c = 0; c < d; ++c) {
              phi[c] = linear_feature(load(t.q, b, h, i, c));
              den += phi[c] * z[c];
            }
          for (int e = 0; e < dv; ++e) {
            const double soft_e = s[sr.offset + i * sr.row_stride + e];
            double num = 0;
            if (p.has_gate)
              for (int c = 0; c < d; ++c) num += phi[c] * S[c * dv + e];
            store_from_double(t.out.data, t.out.dtype, orow.offset + i * orow.row_stride + e,
                              p.has_gate ? hybrid_combine(soft_e, g, num, den) : soft_e);
          }
        }
      }
    }
  }

  std::unique_ptr<Plan> window_;
  int threads_;
  bool causal_;  // the window sees no later key: nor does the linear branch
  WorkspaceFront front_;
  std::size_t soft_ = 0, state_ = 0, scratch_ = 0, window_at_ = 0;
};

Capabilities hybrid_window_capabilities() {
  Capabilities c = sparse_video_capabilities({64, 128});
  c.masks = {MaskKind::none, MaskKind::causal, MaskKind::sliding_window};
  c.gate = true;
  c.switchable_per_request = false;
  c.requires_weights = {"linear_branch"};
  return c;
}

// The CUDA path (hybrid_window_cuda_plan.cpp: the window on fa3 / fa2, the
// linear branch's chunk sums, scan and query pass of backends/cuda/hybrid_linear.cu)
// is declared since tests/gpu/test_hybrid_window_gpu.cpp passed on the H200
// (2026-12-02: the plan equal to the CPU plan and the oracle, zero gates the
// window branch alone, poisoned workspace, CUDA-graph capture, AK1110;
// memcheck / racecheck / synccheck clean).
constexpr bool kHybridWindowCudaVerified = true;

class HybridWindowBackend final : public SparseVideoBackend {
 public:
  HybridWindowBackend()
      : SparseVideoBackend("hybrid_window_attn_h3",
                           "VDN-H3 hybrid: sliding-window softmax attention plus gate * linear attention "
                           "(phi = elu + 1)",
                           hybrid_window_capabilities()) {}

  // On CUDA, the dense flash kernel it runs the window on must exist for the
  // call: check and plan agree.
  Diagnostics check(const Problem& p, const Platform& platform) const override {
    Diagnostics out = SparseVideoBackend::check(p, platform);
    if (out.ok() && platform.kind == PlatformKind::cuda)
      out.append(hybrid_window_cuda_kernel_refusals(p, platform, {}));
    return out;
  }

 protected:
  Diagnostics call_refusals(const Problem& p, const Platform&, const select::BackendConfig&) const override {
    if (p.seqlen_q == p.seqlen_k) return {};
    return diagnose("AK2116", {{"backend", "hybrid_window_attn_h3"},
                               {"reason", "it runs self-attention (seqlen_q " + std::to_string(p.seqlen_q) +
                                              " != seqlen_k " + std::to_string(p.seqlen_k) + ")"}});
  }
  Result<std::unique_ptr<Plan>> plan_cpu(const Problem& p, const Platform& cpu,
                                         const select::BackendConfig& config) const override {
    return make_hybrid_window_cpu_plan(p, cpu, hybrid_window_settings(config));
  }
  bool has_cuda_path() const override { return kHybridWindowCudaVerified; }
  Result<std::unique_ptr<Plan>> plan_cuda(const Problem& p, const Platform& gpu,
                                          const select::BackendConfig& config) const override {
    return make_hybrid_window_cuda_plan(p, gpu, hybrid_window_settings(config));
  }
};

}  // namespace

Result<std::unique_ptr<Plan>> make_hybrid_window_cpu_plan(const Problem& p, const Platform& cpu,
                                                          const HybridWindowSettings& s) {
  auto window = make_cpu_flash_backend()->plan(window_problem(p, s), cpu);
  if (!window) return window.diagnostics();
  return with_host_workspace(std::make_unique<HybridWindowPlan>(p, std::move(*window)), "hybrid_window_attn_h3");
}
}  // namespace sparse

std::unique_ptr<Backend> make_hybrid_window_backend() { return std::make_unique<sparse::HybridWindowBackend>(); }

}  // namespace attnkit
