// hybrid_window_attn_h3's CUDA path (docs/sparse.md section 5c), on the
// caller's stream, in the plan's workspace:
//   1. the window softmax branch: exactly the dense `fa` kernel under the
//      call's sliding window (CudaSparseRunner: fa3 on sm_90, fa2 else), out in
//      q's dtype (the kernels write no other) into the workspace;
//   2. the linear branch and out = window + gate * linear (backends/cuda/hybrid_linear.cu:
//      chunk states, their scan, one pass per query; fp32, rounded once).
// Without a gate the window kernel writes the caller's out (zero gates and no
// gate give the same bits). Nothing allocated, nothing waited for, so run()
// captures into a CUDA graph.
#include "attnkit/backends/backend.hpp"
#include "attnkit/platform/cuda_limits.hpp"
#include "backends/cuda/hybrid_linear.hpp"
#include "backends/sparse/cuda_sparse_runner.hpp"
#include "backends/sparse/device_args.hpp"
#include "backends/sparse/hybrid_window_plans.hpp"
#include "backends/sparse/workspace_front.hpp"

namespace attnkit::sparse {
namespace {

[[maybe_unused]] TensorView device_view(void* data, DType dtype, std::initializer_list<std::int64_t> shape) {
  return make_view(data, dtype, shape, {DeviceKind::cuda, 0});
}

class HybridWindowCudaPlan final : public Plan {
 public:
  static constexpr std::size_t kAlign = 256;
  HybridWindowCudaPlan(Problem p, bool causal, std::unique_ptr<CudaSparseRunner> window)
      : Plan(std::move(p)), window_(std::move(window)), causal_(causal) {
    const Problem& q = problem();
    chunking_ = cuda::hybrid_linear_chunking(q.seqlen_q);
    if (q.has_gate) {
      soft_ = front_.take(dtype_size(q.dtype) * static_cast<std::size_t>(q.batch) * q.seqlen_q * q.heads_q * q.head_dim_v);
      state_ = front_.take(sizeof(float) * static_cast<std::size_t>(cuda::hybrid_linear_state_floats(
                                        q.batch, q.heads_kv, chunking_.chunks, q.head_dim_qk)));
    }
    window_->reserve_front(front_.size());
  }

  // The runner's bytes (behind this plan's front), and the slack to align the caller's pointer.
  std::size_t workspace_bytes() const override { return window_->workspace_bytes() + kAlign; }
  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
#if !defined(ATTNKIT_HAS_CUDA)
    (void)t, (void)ws, (void)stream;
    return diagnose("AK6002", {{"reason", "this build has no CUDA (hybrid_window_attn_h3's CUDA path)"}});
#else
    const Problem& p = problem();
    if (ws.size() < workspace_bytes() || ws.data() == nullptr)
      return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
    // The linear branch reads q, k, v and the gate before any attention kernel checks them
    // (device gates are checked for shape, dtype and device, not scanned for NaN).
    if (Diagnostics why = validate_binding(p, t, {DeviceKind::cuda, 0}); !why.ok()) return why;
    const Workspace own = WorkspaceFront::aligned(ws, kAlign);
    AttentionTensors w = t;
    w.gate = {};
    if (!p.has_gate) return window_->run_dense(w, own, stream);
    const std::int64_t B = p.batch, S = p.seqlen_q, H = p.heads_q, dv = p.head_dim_v;
    void* soft = own.data() + soft_;
    w.out = p.layout == Layout::bhsd ? device_view(soft, p.dtype, {B, H, S, dv}) : device_view(soft, p.dtype, {B, S, H, dv});
    if (Diagnostics ran = window_->run_dense(w, own, stream); !ran.ok()) return ran;
    cuda::HybridLinear a;
    bind_qkv(a, p, t);
    a.batch = p.batch, a.seqlen = p.seqlen_q, a.heads_q = p.heads_q, a.heads_kv = p.heads_kv;
    a.head_dim = p.head_dim_qk;
    a.causal = causal_;
    a.chunk = chunking_.chunk, a.chunks = chunking_.chunks;
    a.state = reinterpret_cast<float*>(own.data() + state_);
    a.window = soft;
    token_strides(p.layout, w.out, a.window_strides);
    a.gate = static_cast<const float*>(t.gate.data);
    a.layout = p.layout;
    for (int i = 0; i < 3; ++i) a.gate_strides[i] = t.gate.strides[i];
    a.out = t.out.data;
    token_strides(p.layout, t.out, a.out_strides);
    return cuda::hybrid_linear(a, stream);
#endif
  }

 private:
  std::unique_ptr<CudaSparseRunner> window_;
  [[maybe_unused]] bool causal_;  // the window sees no later key: nor does the linear branch (read in CUDA builds)
  cuda::HybridChunking chunking_;
  WorkspaceFront front_;  // 64-byte aligned slices from a 256-byte aligned base
  std::size_t soft_ = 0, state_ = 0;
};

}  // namespace

Diagnostics hybrid_window_cuda_kernel_refusals(const Problem& p, const Platform& gpu, const HybridWindowSettings& s) {
  Diagnostics why = CudaSparseRunner::check_kernels(hybrid_softmax_problem(p, s), gpu, {});
  if (p.head_dim_qk != p.head_dim_v || (p.head_dim_qk != 64 && p.head_dim_qk != 128))
    why.add("AK2105", {{"backend", "hybrid_window_attn_h3"}, {"dim", std::to_string(p.head_dim_qk)},
                       {"compiled", "64, 128 (qk = v) for the linear branch's kernels"}});
  else if (p.has_gate && gpu.kind == PlatformKind::cuda && gpu.sm > 0) {
    // The linear branch's shared memory against what a CTA of this GPU may take.
    const bool causal = hybrid_softmax_problem(p, s).window.right == 0;
    const std::size_t need = cuda::hybrid_linear_smem_bytes(p.head_dim_qk, causal);
    if (need > cuda_smem_per_block(gpu.sm))
      why.add("AK2102", {{"backend", "hybrid_window_attn_h3"},
                         {"arch", "a GPU that gives a CTA " + std::to_string(need / 1024) + " KB of shared memory for its " +
                                      (causal ? "causal " : "") + "d" + std::to_string(p.head_dim_qk) +
                                      " linear branch (sm_80, sm_87, sm_90, sm_100; this one gives " +
                                      std::to_string(cuda_smem_per_block(gpu.sm) / 1024) + " KB)"},
                         {"platform", gpu.label()},
                         {"sm", std::to_string(gpu.sm)},
                         {"alternatives", "run it with head dim 64, with a window that sees later keys (a full linear "
                                          "branch), or on the CPU path"}});
  }
  return why;
}

Result<std::unique_ptr<Plan>> make_hybrid_window_cuda_plan(const Problem& p, const Platform& gpu,
                                                           const HybridWindowSettings& s) {
  if (Diagnostics why = hybrid_window_cuda_kernel_refusals(p, gpu, s); !why.ok()) return why;
  const Problem window = hybrid_softmax_problem(p, s);
  const bool causal = window.window.right == 0;  // the window sees no later key: nor does the linear branch
  auto runner = CudaSparseRunner::create(window, gpu, {}, {}, std::nullopt);
  if (!runner) return runner.diagnostics();
#if defined(ATTNKIT_HAS_CUDA)
  if (gpu.detected && p.has_gate)  // without a gate the window kernel is the whole run
    if (Diagnostics why = cuda::configure_hybrid_linear(p.dtype, p.head_dim_qk, causal); !why.ok()) return why;
#endif
  return std::unique_ptr<Plan>(std::make_unique<HybridWindowCudaPlan>(p, causal, std::move(*runner)));
}

}  // namespace attnkit::sparse
