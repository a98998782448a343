// sparge_attn: SpargeAttn's selection of key blocks from pooled q / k
// similarity (sparse/sparge.hpp, docs/sparse.md), built per call into CSR
// lists in the workspace, then cpu_flash's block-sparse kernel.
#include <algorithm>
#include <cmath>

#include "attnkit/backends/sparse.hpp"
#include "attnkit/sparse/sparge.hpp"
#include "backends/sparse/cpu_sparse_runner.hpp"
#include "backends/sparse/sparse_backend.hpp"
#include "backends/sparse/workspace_front.hpp"

namespace attnkit {
namespace sparse {
namespace {

using S = SpargeSettings;

class SpargePlan final : public Plan {
 public:
  SpargePlan(Problem p, SpargeSettings s, std::unique_ptr<CpuSparseRunner> runner)
      : Plan(std::move(p)), settings_(s), runner_(std::move(runner)), threads_(std::max(1, omp_get_max_threads())) {
    const Problem& q = problem();
    nq_ = num_blocks(q.seqlen_q, S::kBlockQ);
    nk_ = num_blocks(q.seqlen_k, S::kBlockK);
    rows_ = static_cast<std::int64_t>(q.batch) * q.heads_q * nq_;
    const std::int64_t k_units = static_cast<std::int64_t>(q.batch) * q.heads_kv * nk_;
    offsets_ = front_.take(sizeof(std::int32_t) * (rows_ + 1));
    indices_ = front_.take(sizeof(std::int32_t) * rows_ * nk_);
    keep_ = front_.take(static_cast<std::size_t>(rows_ * nk_));
    q_mean_ = front_.take(sizeof(float) * rows_ * q.head_dim_qk);
    q_smooth_ = front_.take(static_cast<std::size_t>(rows_));
    k_mean_ = front_.take(sizeof(float) * k_units * q.head_dim_qk);
    k_smooth_ = front_.take(static_cast<std::size_t>(k_units));
    // Per thread: one block's rows (fp32), d doubles, and per key block a score, a probability, an index.
    scratch_ = front_.take_per_thread(sizeof(float) * S::kBlockQ * q.head_dim_qk + sizeof(double) * q.head_dim_qk +
                                          (2 * sizeof(double) + sizeof(std::uint32_t)) * nk_,
                                      threads_);
    runner_->reserve_front(front_.size());
  }

  std::size_t workspace_bytes() const override { return runner_->workspace_bytes(); }
  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    return run_at({}, t, ws, stream);
  }
  Diagnostics run_at(const CallContext& where, const AttentionTensors& t, Workspace ws, StreamHandle) const override {
    const Problem& p = problem();
    if (p.seqlen_q < S::kMinSeqlen || p.seqlen_q != p.seqlen_k) {
      if (where.stats) {
        where.stats->dense = true;
        where.stats->dense_reason = p.seqlen_q != p.seqlen_k ? "seqlen_q != seqlen_k"
                                                             : "fewer than " + std::to_string(S::kMinSeqlen) + " queries";
      }
      return runner_->run_dense(t, ws);
    }
    if (ws.size() < workspace_bytes())
      return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
    if (Diagnostics why = validate_binding(p, t, {DeviceKind::cpu, 0}); !why.ok()) return why;
    select_blocks(t, ws);
    auto* offsets = WorkspaceFront::at<std::int32_t>(ws, offsets_);
    return runner_->run_sparse(t, BlockSparse{S::kBlockQ, S::kBlockK, p.batch, p.heads_q},
                               make_view(offsets, DType::i32, {rows_ + 1}),
                               make_view(WorkspaceFront::at<std::int32_t>(ws, indices_), DType::i32, {offsets[rows_]}),
                               ws, nullptr, where.stats);
  }

 private:
  // Mean and self-similarity of block [lo, hi) of (b, h) of `x` (q or k).
  double pool(const TensorView& x, int b, int h, int lo, int hi, float* mean, float* rows, double* scratch) const {
    const Problem& p = problem();
    const int d = p.head_dim_qk;
    const HeadRows r = head_rows(p.layout, x.strides.data(), b, h, 0);
    for (int i = lo; i < hi; ++i)
      for (int c = 0; c < d; ++c)
        rows[(i - lo) * d + c] = static_cast<float>(load_as_double(x.data, x.dtype, r.offset + i * r.row_stride + c));
    return pool_block(rows, hi - lo, d, mean, scratch);
  }

  void select_blocks(const AttentionTensors& t, Workspace ws) const {
    const Problem& p = problem();
    const int d = p.head_dim_qk;
    const double scale = p.softmax_scale();
    auto* offsets = WorkspaceFront::at<std::int32_t>(ws, offsets_);
    auto* indices = WorkspaceFront::at<std::int32_t>(ws, indices_);
    auto* keep = WorkspaceFront::at<std::uint8_t>(ws, keep_);
    auto* q_mean = WorkspaceFront::at<float>(ws, q_mean_);
    auto* q_smooth = WorkspaceFront::at<std::uint8_t>(ws, q_smooth_);
    auto* k_mean = WorkspaceFront::at<float>(ws, k_mean_);
    auto* k_smooth = WorkspaceFront::at<std::uint8_t>(ws, k_smooth_);
    const std::int64_t k_units = static_cast<std::int64_t>(p.batch) * p.heads_kv * nk_;
#pragma omp parallel num_threads(threads_)
    {
      auto* rows = front_.mine<float>(ws, scratch_);
      auto* dscratch = reinterpret_cast<double*>(rows + S::kBlockQ * d);
      auto* scores = dscratch + d;
      auto* prob = scores + nk_;
      auto* order = reinterpret_cast<std::uint32_t*>(prob + nk_);
#pragma omp for schedule(static)
      for (std::int64_t u = 0; u < rows_ + k_units; ++u) {
        if (u < rows_) {  // a query block: (b, h, qb)
          const int qb = static_cast<int>(u % nq_), h = static_cast<int>(u / nq_ % p.heads_q),
                    b = static_cast<int>(u / nq_ / p.heads_q);
          const int lo = qb * S::kBlockQ, hi = std::min(p.seqlen_q, lo + S::kBlockQ);
          q_smooth[u] = pool(t.q, b, h, lo, hi, q_mean + u * d, rows, dscratch) > settings_.simthreshd1;
        } else {  // a key block: (b, kv head, kb)
          const std::int64_t k = u - rows_;
          const int kb = static_cast<int>(k % nk_), h = static_cast<int>(k / nk_ % p.heads_kv),
                    b = static_cast<int>(k / nk_ / p.heads_kv);
          const int lo = kb * S::kBlockK, hi = std::min(p.seqlen_k, lo + S::kBlockK);
          k_smooth[k] = pool(t.k, b, h, lo, hi, k_mean + k * d, rows, dscratch) > settings_.simthreshd1;
        }
      }
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < rows_; ++r) {
        const int h = static_cast<int>(r / nq_ % p.heads_q), b = static_cast<int>(r / nq_ / p.heads_q);
        const std::int64_t k0 = (static_cast<std::int64_t>(b) * p.heads_kv + h / p.gqa_ratio()) * nk_;
        for (int kb = 0; kb < nk_; ++kb) {
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += double(q_mean[r * d + c]) * k_mean[(k0 + kb) * d + c];
          scores[kb] = k_smooth[k0 + kb] ? scale * dot : -INFINITY;
        }
        sparge_select(settings_, {scores, static_cast<std::size_t>(nk_)}, q_smooth[r] != 0,
                      {keep + r * nk_, static_cast<std::size_t>(nk_)}, {prob, static_cast<std::size_t>(nk_)},
                      {order, static_cast<std::size_t>(nk_)});
      }
    }
    offsets[0] = 0;
    for (std::int64_t r = 0; r < rows_; ++r) {
      std::int32_t n = 0;
      for (int kb = 0; kb < nk_; ++kb) n += keep[r * nk_ + kb];
      offsets[r + 1] = offsets[r] + n;
    }
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t r = 0; r < rows_; ++r) {
      std::int32_t e = offsets[r];
      for (int kb = 0; kb < nk_; ++kb)
        if (keep[r * nk_ + kb]) indices[e++] = kb;
    }
  }

  SpargeSettings settings_;
  std::unique_ptr<CpuSparseRunner> runner_;
  int threads_;
  int nq_ = 0, nk_ = 0;
  std::int64_t rows_ = 0;
  WorkspaceFront front_;
  std::size_t offsets_ = 0, indices_ = 0, keep_ = 0, q_mean_ = 0, q_smooth_ = 0, k_mean_ = 0, k_smooth_ = 0,
              scratch_ = 0;
};

// SpargeAttn's kernel is square self-attention of at least one 128-token
// block, without grouped-query heads; shorter calls run dense.
Capabilities sparge_capabilities() {
  Capabilities c = sparse_video_capabilities({64, 128});
  c.gqa = false;
  c.dense_below_seqlen = S::kMinSeqlen;
  return c;
}

class SpargeBackend final : public SparseVideoBackend {
 public:
  SpargeBackend()
      : SparseVideoBackend("sparge_attn",
                           "SpargeAttn: per 128-query block the top-k (or cumulative-probability) 64-key blocks of "
                           "mean-pooled q / k similarity, dissimilar blocks dense",
                           sparge_capabilities()) {}

 protected:
  Result<std::unique_ptr<Plan>> plan_cpu(const Problem& p, const Platform& cpu,
                                         const select::BackendConfig& config) const override {
    const SpargeSettings s = sparge_settings(config);
    auto runner = CpuSparseRunner::create(p, cpu, {BlockSparse{S::kBlockQ, S::kBlockK, p.batch, p.heads_q}}, std::nullopt);
    if (!runner) return runner.diagnostics();
    return std::unique_ptr<Plan>(std::make_unique<SpargePlan>(p, s, std::move(*runner)));
  }
};

}  // namespace
}  // namespace sparse

std::unique_ptr<Backend> make_sparge_backend() { return std::make_unique<sparse::SpargeBackend>(); }

}  // namespace attnkit
