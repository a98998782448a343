// video_sparse_attn_h3: VSA's coarse pass over mean-pooled 4x4x4 cubes, top-k
// key cubes per query cube from the coarse scores, the block-sparse fine pass
// over the selected cubes (cpu_flash on cube-ordered copies), and
// out = fine + gate * coarse (sparse/video_sparse.hpp, docs/sparse.md). The
// CUDA path is video_sparse_cuda_plan.cpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attnkit/backends/sparse.hpp"
#include "attnkit/core/host_memory.hpp"
#include "attnkit/sparse/video_sparse.hpp"
#include "attnkit/sparse/video_sparse_rule.hpp"
#include "backends/sparse/cpu_sparse_runner.hpp"
#include "backends/sparse/sparse_backend.hpp"
#include "backends/sparse/video_sparse_plans.hpp"
#include "backends/sparse/workspace_front.hpp"

namespace attnkit {
namespace sparse {
namespace {

// The fine pass: the call's problem, block-sparse over cubes, fp32 out (the
// gated coarse output is added before the one rounding to the out dtype).
Problem fine_problem(const Problem& p) {
  Problem f = p;
  f.has_gate = false;
  f.out_dtype_override = DType::f32;
  return f;
}

class VideoSparsePlan final : public Plan {
 public:
  VideoSparsePlan(Problem p, VideoSparseSettings s, std::unique_ptr<CpuSparseRunner> runner)
      : Plan(std::move(p)), settings_(s), runner_(std::move(runner)), threads_(host_threads()) {
    const Problem& q = problem();
    cubes_ = video_cubes(*q.video);
    nc_ = cubes_.tiles();
    keep_ = video_sparse_keep(settings_.sparsity, nc_);
    rows_ = static_cast<std::int64_t>(q.batch) * q.heads_q * nc_;
    const std::int64_t kv_cubes = static_cast<std::int64_t>(q.batch) * q.heads_kv * nc_;
    const std::size_t tokens = static_cast<std::size_t>(q.batch) * q.seqlen_q;
    offsets_ = front_.take(sizeof(std::int32_t) * (rows_ + 1));
    indices_ = front_.take(sizeof(std::int32_t) * rows_ * keep_);
    q_mean_ = front_.take(sizeof(float) * rows_ * q.head_dim_qk);
    k_mean_ = front_.take(sizeof(float) * kv_cubes * q.head_dim_qk);
    v_mean_ = front_.take(sizeof(float) * kv_cubes * q.head_dim_v);
    coarse_ = front_.take(sizeof(float) * rows_ * q.head_dim_v);
    fine_ = front_.take(sizeof(float) * tokens * q.heads_q * q.head_dim_v);
    // Per thread: a score and an index per key cube, and one vector of sums.
    scratch_ = front_.take_per_thread((sizeof(double) + sizeof(std::uint32_t)) * nc_ +
                                          sizeof(double) * std::max(q.head_dim_qk, q.head_dim_v),
                                      threads_);
    runner_->reserve_front(front_.size());
  }

  std::size_t workspace_bytes() const override { return runner_->workspace_bytes(); }
  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    return run_at({}, t, ws, stream);
  }
  Diagnostics run_at(const CallContext& where, const AttentionTensors& t, Workspace ws, StreamHandle) const override {
    const Problem& p = problem();
    if (ws.size() < workspace_bytes())
      return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
    if (Diagnostics why = validate_gated_call(p, t); !why.ok()) return why;
    pool(t, ws);
    coarse_and_select(ws);
    auto* offsets = WorkspaceFront::at<std::int32_t>(ws, offsets_);
    auto* fine = WorkspaceFront::at<float>(ws, fine_);
    AttentionTensors f = t;
    f.gate = {};
    f.out = p.layout == Layout::bhsd ? make_view(fine, DType::f32, {p.batch, p.heads_q, p.seqlen_q, p.head_dim_v})
                                     : make_view(fine, DType::f32, {p.batch, p.seqlen_q, p.heads_q, p.head_dim_v});
    if (Diagnostics ran = runner_->run_sparse(
            f, BlockSparse{cubes_.tile_tokens(), cubes_.tile_tokens(), p.batch, p.heads_q},
            make_view(offsets, DType::i32, {rows_ + 1}),
            make_view(WorkspaceFront::at<std::int32_t>(ws, indices_), DType::i32, {rows_ * keep_}), ws, nullptr,
            where.stats);
        !ran.ok())
      return ran;
    combine(t, f.out, ws);
    return {};
  }

 private:
  // The cube means of q (per query head) and of k, v (per kv head).
  void pool(const AttentionTensors& t, Workspace ws) const {
    const Problem& p = problem();
    auto* q_mean = WorkspaceFront::at<float>(ws, q_mean_);
    auto* k_mean = WorkspaceFront::at<float>(ws, k_mean_);
    auto* v_mean = WorkspaceFront::at<float>(ws, v_mean_);
    const std::int64_t q_units = static_cast<std::int64_t>(p.batch) * p.heads_q;
    const std::int64_t kv_units = static_cast<std::int64_t>(p.batch) * p.heads_kv;
#pragma omp parallel num_threads(threads_)
    {
    auto* sum = front_.mine<double>(ws, scratch_) + nc_;
#pragma omp for schedule(static)
    for (std::int64_t u = 0; u < q_units + 2 * kv_units; ++u) {
      if (u < q_units) {  // u = b * heads_q + h
        const HeadRows r = head_rows(p.layout, t.q.strides.data(), static_cast<int>(u / p.heads_q),
                                     static_cast<int>(u % p.heads_q), 0);
        pool_cubes(cubes_, t.q.data, t.q.dtype, r.offset, r.row_stride, p.head_dim_qk, q_mean + u * nc_ * p.head_dim_qk, sum);
      } else {
        const bool is_k = u < q_units + kv_units;
        const std::int64_t w = is_k ? u - q_units : u - q_units - kv_units;  // b * heads_kv + h
        const TensorView& x = is_k ? t.k : t.v;
        const int d = is_k ? p.head_dim_qk : p.head_dim_v;
        const HeadRows r = head_rows(p.layout, x.strides.data(), static_cast<int>(w / p.heads_kv),
                                     static_cast<int>(w % p.heads_kv), 0);
        pool_cubes(cubes_, x.data, x.dtype, r.offset, r.row_stride, d, (is_k ? k_mean : v_mean) + w * nc_ * d, sum);
      }
    }
    }
  }

  // Per row (b, h, query cube a): C[a, c] = scale * q_a . k_c, the coarse
  // output softmax_c(C) . v_c, and the top-k key cubes of C as its CSR row.
  void coarse_and_select(Workspace ws) const {
    const Problem& p = problem();
    const int d = p.head_dim_qk, dv = p.head_dim_v;
    const double scale = p.softmax_scale();
    auto* offsets = WorkspaceFront::at<std::int32_t>(ws, offsets_);
    auto* indices = WorkspaceFront::at<std::int32_t>(ws, indices_);
    const auto* q_mean = WorkspaceFront::at<const float>(ws, q_mean_);
    const auto* k_mean = WorkspaceFront::at<const float>(ws, k_mean_);
    const auto* v_mean = WorkspaceFront::at<const float>(ws, v_mean_);
    auto* coarse = WorkspaceFront::at<float>(ws, coarse_);
#pragma omp parallel num_threads(threads_)
    {
      auto* scores = front_.mine<double>(ws, scratch_);
      auto* acc = scores + nc_;
      auto* order = reinterpret_cast<std::uint32_t*>(acc + std::max(d, dv));
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < rows_; ++r) {
        const int h = static_cast<int>(r / nc_ % p.heads_q), b = static_cast<int>(r / nc_ / p.heads_q);
        const std::int64_t kv0 = (static_cast<std::int64_t>(b) * p.heads_kv + h / p.gqa_ratio()) * nc_;
        const float* qa = q_mean + r * d;
        double top = -std::numeric_limits<double>::infinity();
        for (int c = 0; c < nc_; ++c) {
          scores[c] = vsa_cube_score(qa, k_mean + (kv0 + c) * d, d, scale);
          top = std::max(top, scores[c]);
        }
        double sum = 0;
        float* o = coarse + r * dv;
        std::fill(acc, acc + dv, 0.0);
        for (int c = 0; c < nc_; ++c) {
          const double w = std::exp(scores[c] - top);
          sum += w;
          for (int e = 0; e < dv; ++e) acc[e] += w * v_mean[(kv0 + c) * dv + e];
        }
        for (int e = 0; e < dv; ++e) o[e] = static_cast<float>(acc[e] / sum);
        top_cubes({scores, static_cast<std::size_t>(nc_)}, {indices + r * keep_, static_cast<std::size_t>(keep_)},
                  {order, static_cast<std::size_t>(nc_)});
        offsets[r + 1] = static_cast<std::int32_t>((r + 1) * keep_);
      }
    }
    offsets[0] = 0;
  }

  // out[b, i, h] = fine[b, i, h] + gate[b, i, h] * coarse[b, h, cube(i)] (no gate: fine).
  void combine(const AttentionTensors& t, const TensorView& fine, Workspace ws) const {
    const Problem& p = problem();
    const int dv = p.head_dim_v;
    const auto* coarse = WorkspaceFront::at<const float>(ws, coarse_);
    const auto* f = fine.ptr<const float>();
    const auto* gate = p.has_gate ? t.gate.ptr<const float>() : nullptr;
    const std::int64_t units = static_cast<std::int64_t>(p.batch) * p.heads_q * p.seqlen_q;
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t u = 0; u < units; ++u) {  // u = (b * heads_q + h) * seqlen + i
      const std::int64_t i = u % p.seqlen_q;
      const int h = static_cast<int>(u / p.seqlen_q % p.heads_q), b = static_cast<int>(u / p.seqlen_q / p.heads_q);
      const double g = gate ? gate[gate_offset(p.layout, t.gate.strides.data(), b, h, i, 0)] : 0.0;
      const std::int64_t row = (static_cast<std::int64_t>(b) * p.heads_q + h) * nc_ + tile_order_index(cubes_, i) / cubes_.tile_tokens();
      const HeadRows fr = head_rows(p.layout, fine.strides.data(), b, h, 0);
      const HeadRows orow = head_rows(p.layout, t.out.strides.data(), b, h, 0);
      for (int e = 0; e < dv; ++e)
        store_from_double(t.out.data, t.out.dtype, orow.offset + i * orow.row_stride + e,
                          double(f[fr.offset + i * fr.row_stride + e]) + g * coarse[row * dv + e]);
    }
  }

  VideoSparseSettings settings_;
  std::unique_ptr<CpuSparseRunner> runner_;
  int threads_;
  VideoTiling cubes_;
  int nc_ = 0, keep_ = 0;
  std::int64_t rows_ = 0;
  WorkspaceFront front_;
  std::size_t offsets_ = 0, indices_ = 0, q_mean_ = 0, k_mean_ = 0, v_mean_ = 0, coarse_ = 0, fine_ = 0, scratch_ = 0;
};

Capabilities video_sparse_capabilities() {
  Capabilities c = sparse_video_capabilities({64, 128});
  c.gate = true;
  c.uses_weights = {"compression_gates"};
  return c;
}

// The CUDA path (video_sparse_cuda_plan.cpp: the selection kernels of
// backends/cuda/vsa_select.cu, the 64 x 64 block-sparse instances, fa3bsq64
// on sm_90 and fa2bsq64 else, on cube-ordered copies, the gated combine) is declared since
// tests/gpu/test_video_sparse_gpu.cpp passed on the H200 (2026-12-02:
// selection equal to the CPU's, the plan equal to the CPU plan and the
// oracle, zero gates pure sparse, poisoned workspace, CUDA-graph capture,
// AK1110; memcheck / racecheck / synccheck clean).
constexpr bool kVideoSparseCudaVerified = true;

class VideoSparseBackend final : public SparseVideoBackend {
 public:
  VideoSparseBackend()
      : SparseVideoBackend("video_sparse_attn_h3",
                           "MiniMax-H3 video sparse attention: coarse attention over mean-pooled 4x4x4 cubes, the top-k "
                           "key cubes per query cube attended exactly, plus the gated coarse output",
                           video_sparse_capabilities()) {}

  // On CUDA, the kernels it would run must exist for the call's shape
  // (fa3bsq64 and fa2bsq64 are d128 only: d64 becomes AK2105 on CUDA): check and plan agree.
  Diagnostics check(const Problem& p, const Platform& platform) const override {
    Diagnostics out = SparseVideoBackend::check(p, platform);
    if (out.ok() && platform.kind == PlatformKind::cuda)
      out.append(video_sparse_cuda_kernel_refusals(p, platform));
    return out;
  }

 protected:
  // A video grid of whole 4 x 4 x 4 cubes, self-attention over its tokens
  // only, and cube lists whose offsets fit int32.
  Diagnostics call_refusals(const Problem& p, const Platform&, const select::BackendConfig& config) const override {
    if (!p.video) return diagnose("AK2115", {{"backend", "video_sparse_attn_h3"}});
    const VideoTiling cubes = video_cubes(*p.video);
    auto refuse = [](std::string reason) {
      return diagnose("AK2116", {{"backend", "video_sparse_attn_h3"}, {"reason", std::move(reason)}});
    };
    if (!cubes.whole_tiles())
      return refuse("the latent grid " + std::to_string(p.video->frames) + " x " + std::to_string(p.video->height) +
                    " x " + std::to_string(p.video->width) + " is not whole 4 x 4 x 4 cubes");
    if (p.seqlen_q != p.seqlen_k || p.seqlen_q != cubes.video_tokens())
      return refuse("it runs self-attention over the video tokens only (seqlen_q = seqlen_k = " +
                    std::to_string(cubes.video_tokens()) + "), got seqlen_q " + std::to_string(p.seqlen_q) +
                    ", seqlen_k " + std::to_string(p.seqlen_k));
    const VideoSparseSettings s = video_sparse_settings(config);
    const std::int64_t entries = static_cast<std::int64_t>(p.batch) * p.heads_q * cubes.tiles() *
                                 video_sparse_keep(s.sparsity, cubes.tiles());
    if (entries > std::numeric_limits<std::int32_t>::max())
      return diagnose("AK1012", {{"what", "video_sparse_attn_h3's int32 cube lists (batch x heads x cubes x kept)"},
                                 {"value", std::to_string(entries)}, {"limit", "2147483647"}});
    return {};
  }
  Result<std::unique_ptr<Plan>> plan_cpu(const Problem& p, const Platform& cpu,
                                         const select::BackendConfig& config) const override {
    return make_video_sparse_cpu_plan(p, cpu, video_sparse_settings(config));
  }
  bool has_cuda_path() const override { return kVideoSparseCudaVerified; }
  Result<std::unique_ptr<Plan>> plan_cuda(const Problem& p, const Platform& gpu,
                                          const select::BackendConfig& config) const override {
    return make_video_sparse_cuda_plan(p, gpu, video_sparse_settings(config));
  }
};

}  // namespace

Result<std::unique_ptr<Plan>> make_video_sparse_cpu_plan(const Problem& p, const Platform& cpu,
                                                         const VideoSparseSettings& s) {
  const VideoTiling cubes = video_cubes(*p.video);
  auto runner = CpuSparseRunner::create(
      fine_problem(p), cpu, {BlockSparse{cubes.tile_tokens(), cubes.tile_tokens(), p.batch, p.heads_q}}, cubes);
  if (!runner) return runner.diagnostics();
  return with_host_workspace(std::make_unique<VideoSparsePlan>(p, s, std::move(*runner)), "video_sparse_attn_h3");
}
}  // namespace sparse

std::unique_ptr<Backend> make_video_sparse_backend() { return std::make_unique<sparse::VideoSparseBackend>(); }

}  // namespace attnkit
