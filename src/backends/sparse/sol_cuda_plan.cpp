// sol_attn's CUDA path (docs/sparse.md section 4): the CPU path's steps on
// the caller's stream, in the plan's workspace.
//   dense calls: exactly the dense `fa` kernel (CudaSparseRunner: fa3 on sm_90, fa2 else);
//   routed calls: 1. the routing kernels (backends/cuda/sol_route.cu): q', k', v',
//                    the kept tiles (sparse/sol_rule.hpp, as the host), CSR lists, the pooled mask;
//                 2. the kept tiles exactly: fa2's block-sparse kernel on 64 x 64 tiles
//                    (fa2bsq64; fa3bs / fa2bs tile 128 queries), out in q's dtype and LSE;
//                 3. the pooled tiles: cuda_sdpa on q', k', v' (fp32, d + 1, custom mask), out and LSE;
//                 4. the LSE merge of the two (dist/'s device merge, core/lse_merge.hpp's weights)
//                    in fp32, converted once into the caller's out.
// Nothing allocated, nothing waited for (a call that asks for statistics
// copies the list total back and waits), so run_at() captures into a CUDA graph.
#include <climits>
#include <cmath>

#include "attnkit/backends/registry.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "backends/cuda/fa2_q64.hpp"
#include "backends/cuda/sol_route.hpp"
#include "backends/sparse/cuda_sparse_runner.hpp"
#include "backends/sparse/device_args.hpp"
#include "backends/sparse/sol_routing.hpp"
#include "backends/sparse/sparse_runner.hpp"
#include "backends/sparse/workspace_front.hpp"
#include "dist/device_ops.hpp"
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

// fa2 over 64 x 64 lists (fa2bsq64), made once.
const Backend& exact_backend() {
  static const std::unique_ptr<Backend> fa2_q64 = make_fa2_q64_block_sparse_backend();
  return *fa2_q64;
}

const Backend& pooled_backend() {
  const Backend* b = default_registry().find("cuda_sdpa");
  return *b;  // registered in every build (cuda_backends.cpp)
}

// The workspace: 256-byte aligned slices from a 256-byte aligned base (the
// plan aligns the caller's pointer up, hence the slack), then the kernels' own.
struct SolCudaWorkspace {
  static constexpr std::size_t kAlign = 256;
  std::size_t size = 0;
  std::size_t counts = 0, offsets = 0, indices = 0, keep = 0, z = 0, q1 = 0, k1 = 0, v1 = 0, mask = 0, out_e = 0,
              lse_e = 0, out_p = 0, lse_p = 0, kernels = 0;
  static SolCudaWorkspace of(const Problem& p, std::size_t kernel_bytes) {
    SolCudaWorkspace w;
    WorkspaceFront front(kAlign);
    const SolShape shape = SolShape::of(p);
    const std::size_t B = p.batch, S = p.seqlen_q, Hq = p.heads_q, Hkv = p.heads_kv, T = shape.tiles,
                      R = static_cast<std::size_t>(shape.rows), d1 = p.head_dim_qk + 1, dv = p.head_dim_v;
    w.counts = front.take(sizeof(std::int32_t) * R);
    w.offsets = front.take(sizeof(std::int32_t) * (R + 1));
    w.indices = front.take(sizeof(std::int32_t) * R * T);
    w.keep = front.take(R * T);
    w.z = front.take(sizeof(double) * R * T);
    w.q1 = front.take(sizeof(float) * B * S * Hq * d1);
    w.k1 = front.take(sizeof(float) * B * T * Hkv * d1);
    w.v1 = front.take(sizeof(float) * B * T * Hkv * dv);
    w.mask = front.take(B * Hq * S * T);
    w.out_e = front.take(dtype_size(p.dtype) * B * S * Hq * dv);
    w.lse_e = front.take(sizeof(float) * B * S * Hq);
    w.out_p = front.take(sizeof(float) * B * S * Hq * dv);
    w.lse_p = front.take(sizeof(float) * B * S * Hq);
    w.kernels = front.take(kernel_bytes);
    w.size = front.size() + kAlign;  // and the base's alignment
    return w;
  }
};

class SolCudaPlan final : public Plan {
 public:
  SolCudaPlan(Problem p, SolSettings s, std::unique_ptr<CudaSparseRunner> dense, std::unique_ptr<Plan> exact,
              std::unique_ptr<Plan> pooled)
      : Plan(std::move(p)), settings_(std::move(s)), dense_(std::move(dense)), exact_(std::move(exact)),
        pooled_(std::move(pooled)),
        ws_(SolCudaWorkspace::of(problem(), std::max(exact_->workspace_bytes(), pooled_->workspace_bytes()))) {}

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
                       d1 = p.head_dim_qk + 1, dv = p.head_dim_v;
    std::byte* base = aligned(ws);
    auto at = [&](std::size_t offset) { return static_cast<void*>(base + offset); };
    // 1. The routing.
    cuda::SolRoute r;
    bind_qkv(r, p, t);
    r.batch = p.batch, r.heads_q = p.heads_q, r.heads_kv = p.heads_kv, r.seqlen = p.seqlen_q;
    r.head_dim = p.head_dim_qk, r.head_dim_v = p.head_dim_v;
    r.scale = p.softmax_scale();
    r.rule = sol_rule(settings_);
    // As sol_pool_host computes them (std::log on the host: a device log may round otherwise).
    const int last = p.seqlen_k - (static_cast<int>(T) - 1) * kSolBlock;
    r.ln_full = static_cast<float>(std::log(static_cast<double>(kSolBlock)) / r.scale);
    r.ln_last = static_cast<float>(std::log(static_cast<double>(last)) / r.scale);
    r.q1 = static_cast<float*>(at(ws_.q1));
    r.k1 = static_cast<float*>(at(ws_.k1));
    r.v1 = static_cast<float*>(at(ws_.v1));
    r.z = static_cast<double*>(at(ws_.z));
    r.keep = static_cast<std::uint8_t*>(at(ws_.keep));
    r.counts = static_cast<std::int32_t*>(at(ws_.counts));
    r.offsets = static_cast<std::int32_t*>(at(ws_.offsets));
    r.indices = static_cast<std::int32_t*>(at(ws_.indices));
    r.mask = static_cast<std::uint8_t*>(at(ws_.mask));
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
    // 3. The pooled tiles: one pseudo-key each, through cuda_sdpa with the custom mask.
    AttentionTensors pooled;
    pooled.q = device_view(r.q1, DType::f32, {B, S, Hq, d1}, {S * Hq * d1, Hq * d1, d1, 1});
    pooled.k = device_view(r.k1, DType::f32, {B, T, Hkv, d1}, {T * Hkv * d1, Hkv * d1, d1, 1});
    pooled.v = device_view(r.v1, DType::f32, {B, T, Hkv, dv}, {T * Hkv * dv, Hkv * dv, dv, 1});
    pooled.out = device_view(at(ws_.out_p), DType::f32, {B, S, Hq, dv}, {S * Hq * dv, Hq * dv, dv, 1});
    pooled.lse = device_view(at(ws_.lse_p), DType::f32, {B, Hq, S}, {S * Hq, 1, Hq});
    pooled.custom_mask = device_view(r.mask, DType::u8, {B, Hq, S, T}, {Hq * S * T, S * T, T, 1});
    if (Diagnostics ran = pooled_->run(pooled, kernel_ws, stream); !ran.ok()) return ran;
    // 4. out = merge(pooled, exact) by their LSE (fp32, into the pooled buffer), then into the caller's out.
    const dist::DeviceOps* ops = dist::cuda_ops();
    MergeRows m;
    m.acc_out = static_cast<float*>(pooled.out.data);
    m.acc_row_stride = Hq * dv, m.acc_head_stride = dv;
    m.acc_lse = static_cast<float*>(pooled.lse.data);
    m.acc_lse_row_stride = Hq, m.acc_lse_head_stride = 1;
    m.part_out = exact.out.data;
    m.part_dtype = p.dtype;
    m.part_row_stride = Hq * dv, m.part_head_stride = dv;
    m.part_lse = static_cast<const float*>(exact.lse.data);
    m.part_lse_row_stride = Hq, m.part_lse_head_stride = 1;
    m.rows = B * S;
    m.heads = p.heads_q;
    m.dim = p.head_dim_v;
    if (Diagnostics why = ops->merge(m, stream); !why.ok()) return why;
    const bool bhsd = p.layout == Layout::bhsd;
    dist::RowCopy c;
    c.src = pooled.out.data;
    c.src_dtype = DType::f32;
    c.src_row_stride = Hq * dv, c.src_head_stride = dv;
    c.dst = t.out.data;
    c.dst_dtype = t.out.dtype;
    c.dst_row_stride = t.out.strides[bhsd ? 2 : 1];
    c.dst_head_stride = t.out.strides[bhsd ? 1 : 2];
    c.heads = p.heads_q;
    c.dim = p.head_dim_v;
    for (std::int64_t b = 0; b < B; ++b) {  // one run per sequence: the caller's batch stride is its own
      const dist::RowRun run{b * S * Hq * dv, b * t.out.strides[0], S};
      if (Diagnostics why = ops->copy_rows(c, {&run, 1}, stream); !why.ok()) return why;
    }
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
  std::unique_ptr<Plan> exact_, pooled_;
  SolCudaWorkspace ws_;
};

}  // namespace

Diagnostics sol_cuda_kernel_refusals(const Problem& p, const Platform& gpu) {
  Diagnostics why = CudaSparseRunner::check_kernels(p, gpu, {});
  why.append(exact_backend().check(exact_problem(p), gpu));
  why.append(pooled_backend().check(sol_pooled_problem(p), gpu));
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
  auto exact = exact_backend().plan(exact_problem(p), gpu);
  if (!exact) return exact.diagnostics();
  auto pooled = pooled_backend().plan(sol_pooled_problem(p), gpu);
  if (!pooled) return pooled.diagnostics();
  return std::unique_ptr<Plan>(
      std::make_unique<SolCudaPlan>(p, s, std::move(*dense), std::move(*exact), std::move(*pooled)));
}

Result<SolDeviceLists> sol_cuda_lists(const Plan& plan, Workspace ws) {
  const auto* sol = dynamic_cast<const SolCudaPlan*>(&plan);
  if (sol == nullptr) return diagnose("AK6002", {{"reason", "not a sol_attn CUDA plan"}});
  return sol->lists(ws);
}

}  // namespace attnkit::sparse
