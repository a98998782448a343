// sol_attn's CUDA path (docs/sparse.md section 4): the CPU path's steps on
// the caller's stream, in the plan's workspace.
//   dense calls: exactly the dense `fa` kernel (CudaSparseRunner: fa3 on sm_90, fa2 else);
//   routed calls: 1. the routing kernels (backends/cuda/sol_route.cu): q', k', v',
//                    the kept tiles (sparse/sol_rule.hpp, as the host), CSR lists, the pooled mask;
//                 2. the kept tiles exactly: the block-sparse kernel on 64 x 64 tiles, fa3's
//                    (fa3bsq64) on sm_90, else fa2's (fa2bsq64), out in q's dtype and LSE;
//                 3. the pooled tiles: fa2's 64 x 64 tile over one mean key / value per tile
//                    (fa2solpool, backends/cuda/sol_pooled.hpp: kept tiles hidden, ln(tokens)
//                    added), out in q's dtype and LSE;
//                 4. the LSE merge of the two (backends/cuda/sol_merge: core/lse_merge.hpp's
//                    weights) in fp32, rounded once into the caller's out.
// Nothing allocated, nothing waited for (a call that asks for statistics
// copies the list total back and waits), so run_at() captures into a CUDA graph.
#include <climits>
#include <cmath>

#include "attnkit/core/block_sparse.hpp"
#include "backends/cuda/sol_merge.hpp"
#include "backends/cuda/sol_pooled.hpp"
#include "backends/cuda/sol_route.hpp"
#include "backends/sparse/cuda_sparse_runner.hpp"
#include "backends/sparse/device_args.hpp"
#include "backends/sparse/sol_routing.hpp"
#include "backends/sparse/sparse_runner.hpp"
#include "backends/sparse/workspace_front.hpp"
#if defined(ATTNKIT_HAS_CUDA)
#include "backends/cuda/device.hpp"
#endif

namespace attnkit::sparse {
namespace {

// The kept tiles' kernel problem: the call under 64 x 64 lists per sequence and head, with its LSE.
Problem exact_problem(const Problem& p) {
  Problem inner = p;
  inner.block_sparse = SolShape::layout(p);
  inner.return_lse = true;
  return inner;
}

// The pooled-key kernel's problem: each query against one pooled key per tile
// (seqlen_k = the tiles), in the call's layout and dtype, with its LSE.
Problem pooled_kernel_problem(const Problem& p) {
  Problem pooled = p;
  pooled.seqlen_k = SolShape::of(p).tiles;
  pooled.mask = MaskKind::none;
  pooled.scale = p.softmax_scale();
  pooled.return_lse = true;
  pooled.block_sparse.reset();
  return pooled;
}

// The workspace: 256-byte aligned slices from a 256-byte aligned base (the
// plan aligns the caller's pointer up, hence the slack), then the kernels' own.
struct SolCudaWorkspace {
  static constexpr std::size_t kAlign = 256;
  std::size_t size = 0;
  std::size_t counts = 0, offsets = 0, indices = 0, keep = 0, z = 0, k_mean = 0, k_pooled = 0, v_pooled = 0,
              out_e = 0, lse_e = 0, out_p = 0, lse_p = 0, kernels = 0;
  static SolCudaWorkspace of(const Problem& p, std::size_t kernel_bytes) {
    SolCudaWorkspace w;
    WorkspaceFront front(kAlign);
    const SolShape shape = SolShape::of(p);
    const std::size_t B = p.batch, S = p.seqlen_q, Hq = p.heads_q, Hkv = p.heads_kv, T = shape.tiles,
                      R = static_cast<std::size_t>(shape.rows), d = p.head_dim_qk, dv = p.head_dim_v,
                      e = dtype_size(p.dtype);
    w.counts = front.take(sizeof(std::int32_t) * R);
    w.offsets = front.take(sizeof(std::int32_t) * (R + 1));
    w.indices = front.take(sizeof(std::int32_t) * R * T);
    w.keep = front.take(R * T);
    w.z = front.take(sizeof(double) * R * T);
    w.k_mean = front.take(sizeof(float) * B * T * Hkv * d);
    w.k_pooled = front.take(e * B * T * Hkv * d);
    w.v_pooled = front.take(e * B * T * Hkv * dv);
    w.out_e = front.take(e * B * S * Hq * dv);
    w.lse_e = front.take(sizeof(float) * B * S * Hq);
    w.out_p = front.take(e * B * S * Hq * dv);
    w.lse_p = front.take(sizeof(float) * B * S * Hq);
    w.kernels = front.take(kernel_bytes);
    w.size = front.size() + kAlign;  // and the base's alignment
    return w;
  }
};

class SolCudaPlan final : public Plan {
 public:
  SolCudaPlan(Problem p, SolSettings s, std::unique_ptr<CudaSparseRunner> dense, std::unique_ptr<Plan> exact,
              cuda::SolPooledKernel pooled_kernel)
      : Plan(std::move(p)), settings_(std::move(s)), dense_(std::move(dense)), exact_(std::move(exact)),
        pooled_(pooled_kernel_problem(problem())), pooled_kernel_(pooled_kernel),
        ws_(SolCudaWorkspace::of(problem(), exact_->workspace_bytes())) {
    // ln(tokens) / scale of a full tile and of the last one, on the host as the
    // CPU path computes them (a device log may round otherwise).
    const Problem& q = problem();
    const int last = q.seqlen_k - (SolShape::of(q).tiles - 1) * kSolBlock;
    bias_full_ = static_cast<float>(std::log(static_cast<double>(kSolBlock)) / q.softmax_scale());
    bias_last_ = static_cast<float>(std::log(static_cast<double>(last)) / q.softmax_scale());
  }

  std::size_t workspace_bytes() const override { return std::max(dense_->workspace_bytes(), ws_.size); }
  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    return run_at({}, t, ws, stream);
  }
  // With `where.stats` on a routed call, the list total is copied back and
  // the stream waited for (after the kernels are queued).
  Diagnostics run_at(const CallContext& where, const AttentionTensors& t, Workspace ws,
                     StreamHandle stream) const override {
    auto dense = sol_runs_dense(settings_, where);
    if (!dense) return dense.diagnostics();
    if (*dense) return dense_->run_dense(t, ws, stream);
    if (ws.size() < workspace_bytes() || ws.data() == nullptr)
      return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
    // The routing kernels read q, k and v before any attention kernel checks them.
    if (Diagnostics why = validate_binding(problem(), t, {DeviceKind::cuda, 0}); !why.ok()) return why;
    return routed(t, ws, stream, where.stats);
  }

  // The lists the last routed call wrote into `ws` (for the GPU tests).
  SolDeviceLists lists(Workspace ws) const {
    const SolShape shape = SolShape::of(problem());
    std::byte* base = aligned(ws);
    return {make_view(base + ws_.offsets, DType::i32, {shape.rows + 1}, {DeviceKind::cuda, 0}),
            make_view(base + ws_.indices, DType::i32, {shape.rows * shape.tiles}, {DeviceKind::cuda, 0})};
  }

 private:
  static std::byte* aligned(Workspace ws) { return WorkspaceFront::aligned(ws, SolCudaWorkspace::kAlign).data(); }

  Diagnostics routed(const AttentionTensors& t, Workspace ws, StreamHandle stream, SparsityStats* stats) const {
#if !defined(ATTNKIT_HAS_CUDA)
    (void)t, (void)ws, (void)stream, (void)stats;
    return diagnose("AK6002", {{"reason", "this build has no CUDA (sol_attn's CUDA path)"}});
#else
    const Problem& p = problem();
    const SolShape shape = SolShape::of(p);
    const std::int64_t B = p.batch, S = p.seqlen_q, Hq = p.heads_q, Hkv = p.heads_kv, T = shape.tiles,
                       dv = p.head_dim_v;
    std::byte* base = aligned(ws);
    auto at = [&](std::size_t offset) { return static_cast<void*>(base + offset); };
    // 1. The routing.
    cuda::SolRoute r;
    bind_qkv(r, p, t);
    r.batch = p.batch, r.heads_q = p.heads_q, r.heads_kv = p.heads_kv, r.seqlen = p.seqlen_q;
    r.head_dim = p.head_dim_qk, r.head_dim_v = p.head_dim_v;
    r.scale = p.softmax_scale();
    r.rule = sol_rule(settings_);
    r.k_mean = static_cast<float*>(at(ws_.k_mean));
    r.k_pooled = at(ws_.k_pooled);
    r.v_pooled = at(ws_.v_pooled);
    r.z = static_cast<double*>(at(ws_.z));
    r.keep = static_cast<std::uint8_t*>(at(ws_.keep));
    r.counts = static_cast<std::int32_t*>(at(ws_.counts));
    r.offsets = static_cast<std::int32_t*>(at(ws_.offsets));
    r.indices = static_cast<std::int32_t*>(at(ws_.indices));
    if (Diagnostics why = cuda::sol_route(r, stream); !why.ok()) return why;
    Workspace kernel_ws{base + ws_.kernels, ws.size() - static_cast<std::size_t>(base - ws.data()) - ws_.kernels};
    // 2. The kept tiles, exactly: out in a BSHD-ordered buffer (viewed in the
    // call's layout), LSE [batch, heads, seqlen] stored token-major ([b, i, h]).
    AttentionTensors exact = t;
    exact.out = bshd_buffer_view(at(ws_.out_e), p.dtype, p.layout, B, S, Hq, dv);
    exact.lse = device_view(at(ws_.lse_e), DType::f32, {B, Hq, S}, {S * Hq, 1, Hq});
    exact.block_offsets = make_view(r.offsets, DType::i32, {shape.rows + 1}, {DeviceKind::cuda, 0});
    exact.block_indices = make_view(r.indices, DType::i32, {shape.rows * T}, {DeviceKind::cuda, 0});
    if (Diagnostics ran = exact_->run(exact, kernel_ws, stream); !ran.ok()) return ran;
    // 3. The pooled tiles: one mean key / value each, on the tensor cores; the
    // kept tiles hidden and ln(tokens) added in the kernel.
    AttentionTensors pooled;
    pooled.q = t.q;
    pooled.k = bshd_buffer_view(r.k_pooled, p.dtype, p.layout, B, T, Hkv, p.head_dim_qk);
    pooled.v = bshd_buffer_view(r.v_pooled, p.dtype, p.layout, B, T, Hkv, dv);
    pooled.out = bshd_buffer_view(at(ws_.out_p), p.dtype, p.layout, B, S, Hq, dv);
    pooled.lse = device_view(at(ws_.lse_p), DType::f32, {B, Hq, S}, {S * Hq, 1, Hq});
    const cuda::SolPooledTerms terms{r.keep, shape.nq, bias_full_, bias_last_};
    if (Diagnostics ran = cuda::sol_pooled_launch(pooled_kernel_, pooled_, pooled, terms, stream); !ran.ok())
      return ran;
    // 4. out = merge(pooled, exact) by their LSEs, in fp32, rounded once into the caller's out.
    const bool bhsd = p.layout == Layout::bhsd;
    cuda::SolMerge m;
    m.exact = exact.out.data, m.lse_exact = static_cast<const float*>(exact.lse.data);
    m.pooled = pooled.out.data, m.lse_pooled = static_cast<const float*>(pooled.lse.data);
    m.dtype = p.dtype;
    m.out = t.out.data, m.out_dtype = t.out.dtype;
    m.out_strides[0] = t.out.strides[0];
    m.out_strides[1] = t.out.strides[bhsd ? 2 : 1];
    m.out_strides[2] = t.out.strides[bhsd ? 1 : 2];
    m.batch = p.batch, m.seqlen = p.seqlen_q, m.heads = p.heads_q, m.dim = p.head_dim_v;
    if (Diagnostics why = cuda::sol_merge(m, stream); !why.ok()) return why;
    if (stats == nullptr) return {};
    std::int32_t listed = 0;
    if (Diagnostics why = cuda::copy_to_host_and_wait(&listed, r.offsets + shape.rows, sizeof listed, stream); !why.ok())
      return why;
    count_sparsity(p, exact_->problem(), SolShape::layout(p), listed, stats);
    return {};
#endif
  }

  SolSettings settings_;
  std::unique_ptr<CudaSparseRunner> dense_;
  std::unique_ptr<Plan> exact_;
  Problem pooled_;  // the pooled-key kernel's (pooled_kernel_problem)
  cuda::SolPooledKernel pooled_kernel_;
  float bias_full_ = 0.0f, bias_last_ = 0.0f;
  SolCudaWorkspace ws_;
};

}  // namespace

Diagnostics sol_cuda_kernel_refusals(const Problem& p, const Platform& gpu) {
  Diagnostics why = CudaSparseRunner::check_kernels(p, gpu, {});
  flash_for(exact_problem(p), gpu, why, /*q64=*/true);
  why.append(cuda::sol_pooled_refusals(pooled_kernel_problem(p), gpu));
  const SolShape shape = SolShape::of(p);
  if (shape.rows * shape.tiles > INT32_MAX)
    why.add("AK1012", {{"what", "sol_attn's tile lists (batch x heads x query blocks x key tiles)"},
                       {"value", std::to_string(shape.rows * shape.tiles)}, {"limit", std::to_string(INT32_MAX)}});
  if (p.head_dim_qk > cuda::kSolMaxHeadDim)
    why.add("AK1012", {{"what", "sol_attn's head dim on CUDA (the routing kernel's shared query mean)"},
                       {"value", std::to_string(p.head_dim_qk)}, {"limit", std::to_string(cuda::kSolMaxHeadDim)}});
  return why;
}

Result<std::unique_ptr<Plan>> make_sol_cuda_plan(const Problem& p, const Platform& gpu, const SolSettings& s) {
  if (Diagnostics why = sol_cuda_kernel_refusals(p, gpu); !why.ok()) return why;
  auto dense = CudaSparseRunner::create(p, gpu, {}, {}, std::nullopt);
  if (!dense) return dense.diagnostics();
  const Problem exact_p = exact_problem(p);
  Diagnostics no_exact;
  const Backend* exact_flash = flash_for(exact_p, gpu, no_exact, /*q64=*/true);  // fa3bsq64 on sm_90, else fa2bsq64
  if (exact_flash == nullptr) return no_exact;
  auto exact = exact_flash->plan(exact_p, gpu);
  if (!exact) return exact.diagnostics();
  auto pooled = cuda::sol_pooled_kernel(pooled_kernel_problem(p), gpu);
  if (!pooled) return pooled.diagnostics();
#if defined(ATTNKIT_HAS_CUDA)
  if (gpu.detected)
    if (Diagnostics why = cuda::configure_sol_route(); !why.ok()) return why;
#endif
  return std::unique_ptr<Plan>(
      std::make_unique<SolCudaPlan>(p, s, std::move(*dense), std::move(*exact), *pooled));
}

Result<SolDeviceLists> sol_cuda_lists(const Plan& plan, Workspace ws) {
  const auto* sol = dynamic_cast<const SolCudaPlan*>(&plan);
  if (sol == nullptr) return diagnose("AK6002", {{"reason", "not a sol_attn CUDA plan"}});
  return sol->lists(ws);
}

}  // namespace attnkit::sparse
