// video_sparse_attn_h3's CUDA path (docs/sparse.md section 5b), on the
// caller's stream, in the plan's workspace:
//   1. the cube means, the coarse pass and the selection (backends/cuda/vsa_select.cu:
//      sparse/video_sparse_rule.hpp's arithmetic, so the kept cubes are the CPU path's),
//      the kept cubes as CSR lists;
//   2. the fine pass: the block-sparse kernel on 64 x 64 tiles (one cube is one block),
//      fa3's (fa3bsq64) on sm_90, else fa2's (fa2bsq64), over cube-ordered copies of
//      q, k, v (CudaSparseRunner's gathers), out in q's dtype;
//   3. with a gate, out = fine + gate * coarse (rounded once more); without, the
//      fine pass writes the caller's out (zero gates: pure sparse).
// Nothing allocated, nothing waited for (the statistic is known on the host),
// so run() captures into a CUDA graph.
#include <algorithm>
#include <climits>

#include "attnkit/core/block_sparse.hpp"
#include "backends/cuda/vsa_select.hpp"
#include "backends/sparse/cuda_sparse_runner.hpp"
#include "backends/sparse/device_args.hpp"
#include "backends/sparse/sparse_runner.hpp"
#include "backends/sparse/video_sparse_plans.hpp"
#include "backends/sparse/workspace_front.hpp"

namespace attnkit::sparse {
namespace {

// The fine pass's problem on CUDA: the call without its gate, out in q's dtype (the flash kernels write one).
Problem fine_problem(const Problem& p) {
  Problem f = p;
  f.has_gate = false;
  return f;
}
BlockSparse cube_layout(const Problem& p) {
  const int n = VideoSparseSettings::kCube * VideoSparseSettings::kCube * VideoSparseSettings::kCube;
  return {n, n, p.batch, p.heads_q};
}

class VideoSparseCudaPlan final : public Plan {
 public:
  VideoSparseCudaPlan(Problem p, VideoSparseSettings s, std::unique_ptr<CudaSparseRunner> runner)
      : Plan(std::move(p)), runner_(std::move(runner)) {
    const Problem& q = problem();
    cubes_ = video_cubes(*q.video);
    nc_ = cubes_.tiles();
    keep_ = video_sparse_keep(s.sparsity, nc_);
    rows_ = static_cast<std::int64_t>(q.batch) * q.heads_q * nc_;
    const std::size_t R = static_cast<std::size_t>(rows_), NC = static_cast<std::size_t>(nc_),
                      KV = static_cast<std::size_t>(q.batch) * q.heads_kv * NC, d = q.head_dim_qk, dv = q.head_dim_v;
    q_mean_ = front_.take(sizeof(float) * R * d);
    k_mean_ = front_.take(sizeof(float) * KV * d);
    v_mean_ = front_.take(sizeof(float) * KV * dv);
    scores_ = front_.take(sizeof(double) * R * NC);
    coarse_ = front_.take(sizeof(float) * R * dv);
    flags_ = front_.take(R * NC);
    counts_ = front_.take(sizeof(std::int32_t) * R);
    offsets_ = front_.take(sizeof(std::int32_t) * (R + 1));
    indices_ = front_.take(sizeof(std::int32_t) * R * NC);
    if (q.has_gate)
      fine_ = front_.take(dtype_size(q.dtype) * static_cast<std::size_t>(q.batch) * q.seqlen_q * q.heads_q * dv);
    runner_->reserve_front(front_.size());
  }

  std::size_t workspace_bytes() const override { return runner_->workspace_bytes(); }
  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    return run_at({}, t, ws, stream);
  }
  Diagnostics run_at(const CallContext& where, const AttentionTensors& t, Workspace ws,
                     StreamHandle stream) const override {
#if !defined(ATTNKIT_HAS_CUDA)
    (void)where, (void)t, (void)ws, (void)stream;
    return diagnose("AK6002", {{"reason", "this build has no CUDA (video_sparse_attn_h3's CUDA path)"}});
#else
    const Problem& p = problem();
    if (ws.size() < workspace_bytes() || ws.data() == nullptr)
      return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
    // The selection reads q, k and v before any attention kernel checks them
    // (device gates are checked for shape, dtype and device, not scanned for NaN).
    if (Diagnostics why = validate_binding(p, t, {DeviceKind::cuda, 0}); !why.ok()) return why;
    cuda::VsaSelect a;
    bind_qkv(a, p, t);
    a.batch = p.batch, a.heads_q = p.heads_q, a.heads_kv = p.heads_kv;
    a.head_dim = p.head_dim_qk, a.head_dim_v = p.head_dim_v;
    a.cubes = cubes_;
    a.scale = p.softmax_scale();
    a.keep = keep_;
    a.q_mean = at<float>(ws, q_mean_);
    a.k_mean = at<float>(ws, k_mean_);
    a.v_mean = at<float>(ws, v_mean_);
    a.scores = at<double>(ws, scores_);
    a.coarse = at<float>(ws, coarse_);
    a.flags = at<std::uint8_t>(ws, flags_);
    a.counts = at<std::int32_t>(ws, counts_);
    a.offsets = at<std::int32_t>(ws, offsets_);
    a.indices = at<std::int32_t>(ws, indices_);
    if (Diagnostics why = cuda::vsa_select(a, stream); !why.ok()) return why;
    const std::int64_t B = p.batch, S = p.seqlen_q, H = p.heads_q, dv = p.head_dim_v;
    AttentionTensors f = t;
    f.gate = {};
    if (p.has_gate)  // the fine output in a BSHD-ordered buffer, viewed in the call's layout
      f.out = bshd_buffer_view(at<void>(ws, fine_), p.dtype, p.layout, B, S, H, dv);
    const TensorView offsets = make_view(a.offsets, DType::i32, {rows_ + 1}, {DeviceKind::cuda, 0});
    const TensorView indices = make_view(a.indices, DType::i32, {rows_ * nc_}, {DeviceKind::cuda, 0});
    if (Diagnostics ran = runner_->run_sparse(f, cube_layout(p), offsets, indices, ws, stream, nullptr); !ran.ok())
      return ran;
    if (p.has_gate) {
      cuda::VsaCombine c;
      c.fine = f.out.data;
      c.coarse = a.coarse;
      c.gate = static_cast<const float*>(t.gate.data);
      c.layout = p.layout;
      for (int i = 0; i < 3; ++i) c.gate_strides[i] = t.gate.strides[i];
      c.out = t.out.data;
      c.dtype = t.out.dtype;
      token_strides(p.layout, t.out, c.out_strides);
      c.batch = p.batch, c.seqlen = p.seqlen_q, c.heads_q = p.heads_q, c.head_dim_v = p.head_dim_v;
      c.cubes = cubes_;
      if (Diagnostics why = cuda::vsa_combine(c, stream); !why.ok()) return why;
    }
    Problem inner = fine_problem(p);
    inner.block_sparse = cube_layout(p);
    count_sparsity(p, inner, cube_layout(p), rows_ * keep_, where.stats);
    return {};
#endif
  }

  VideoSparseDeviceLists lists(Workspace ws) const {
    return {make_view(at<void>(ws, offsets_), DType::i32, {rows_ + 1}, {DeviceKind::cuda, 0}),
            make_view(at<void>(ws, indices_), DType::i32, {rows_ * nc_}, {DeviceKind::cuda, 0})};
  }

 private:
  template <class T>
  static T* at(Workspace ws, std::size_t offset) {
    return WorkspaceFront::at<T>(ws, offset);
  }

  std::unique_ptr<CudaSparseRunner> runner_;
  VideoTiling cubes_;
  int nc_ = 0, keep_ = 0;
  std::int64_t rows_ = 0;
  WorkspaceFront front_{256};  // 256-byte aligned slices (the runner's part starts behind them)
  std::size_t q_mean_ = 0, k_mean_ = 0, v_mean_ = 0, scores_ = 0, coarse_ = 0, flags_ = 0, counts_ = 0, offsets_ = 0,
              indices_ = 0, fine_ = 0;
};

}  // namespace

Diagnostics video_sparse_cuda_kernel_refusals(const Problem& p, const Platform& gpu) {
  Diagnostics why = CudaSparseRunner::check_kernels(fine_problem(p), gpu, {cube_layout(p)}, /*tiled=*/true,
                                                    /*q64=*/true);
  // The device lists' capacity: every key cube of every row (a row's kept count comes from its flags).
  const std::int64_t nc = p.video ? video_cubes(*p.video).tiles() : 0;
  const std::int64_t capacity = static_cast<std::int64_t>(p.batch) * p.heads_q * nc * nc;
  if (capacity > INT32_MAX)
    why.add("AK1012", {{"what", "video_sparse_attn_h3's cube lists on CUDA (batch x heads x cubes x cubes)"},
                       {"value", std::to_string(capacity)}, {"limit", std::to_string(INT32_MAX)}});
  return why;
}

Result<std::unique_ptr<Plan>> make_video_sparse_cuda_plan(const Problem& p, const Platform& gpu,
                                                          const VideoSparseSettings& s) {
  if (!p.video) return diagnose("AK2115", {{"backend", "video_sparse_attn_h3"}});
  if (Diagnostics why = video_sparse_cuda_kernel_refusals(p, gpu); !why.ok()) return why;
  auto runner = CudaSparseRunner::create(fine_problem(p), gpu, {cube_layout(p)}, {}, video_cubes(*p.video),
                                         /*q64=*/true);
  if (!runner) return runner.diagnostics();
#if defined(ATTNKIT_HAS_CUDA)
  if (gpu.detected)
    if (Diagnostics why = cuda::configure_vsa_select(p.head_dim_qk, p.head_dim_v); !why.ok()) return why;
#endif
  return std::unique_ptr<Plan>(std::make_unique<VideoSparseCudaPlan>(p, s, std::move(*runner)));
}

Result<VideoSparseDeviceLists> video_sparse_cuda_lists(const Plan& plan, Workspace ws) {
  const auto* vsa = dynamic_cast<const VideoSparseCudaPlan*>(&plan);
  if (vsa == nullptr) return diagnose("AK6002", {{"reason", "not a video_sparse_attn_h3 CUDA plan"}});
  return vsa->lists(ws);
}

}  // namespace attnkit::sparse
