#include "backends/sparse/sparge_selection.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/host_memory.hpp"
#include "backends/sparse/device_args.hpp"
#include "backends/sparse/workspace_front.hpp"
#if defined(ATTNKIT_HAS_CUDA)
#include <cuda_runtime.h>

#include "backends/cuda/device.hpp"
#include "backends/cuda/sparge_select.hpp"
#endif

namespace attnkit::sparse {
namespace {

using S = SpargeSettings;

// The list sizes of a call: CSR rows, key blocks, kv units and their limit
// (int32 offsets: at most 2^31 - 1 entries even when every block is kept).
struct SpargeShape {
  int nq = 0, nk = 0;
  std::int64_t rows = 0, k_units = 0;
  static Result<SpargeShape> of(const Problem& p) {
    SpargeShape s;
    s.nq = num_blocks(p.seqlen_q, S::kBlockQ);
    s.nk = num_blocks(p.seqlen_k, S::kBlockK);
    s.rows = static_cast<std::int64_t>(p.batch) * p.heads_q * s.nq;
    s.k_units = static_cast<std::int64_t>(p.batch) * p.heads_kv * s.nk;
    if (s.rows * s.nk > INT32_MAX)
      return diagnose("AK1012", {{"what", "sparge_attn's block lists (batch x heads x query blocks x key blocks)"},
                                 {"value", std::to_string(s.rows * s.nk)}, {"limit", std::to_string(INT32_MAX)}});
    return s;
  }
};

class HostSelection final : public SpargeSelection {
 public:
  HostSelection(const Problem& p, const SpargeSettings& s, SpargeShape shape)
      : p_(p), settings_(s), shape_(shape), threads_(host_threads()) {
    const int d = p.head_dim_qk;
    offsets_ = front_.take(sizeof(std::int32_t) * (shape_.rows + 1));
    indices_ = front_.take(sizeof(std::int32_t) * shape_.rows * shape_.nk);
    keep_ = front_.take(static_cast<std::size_t>(shape_.rows * shape_.nk));
    q_mean_ = front_.take(sizeof(float) * shape_.rows * d);
    q_smooth_ = front_.take(static_cast<std::size_t>(shape_.rows));
    k_mean_ = front_.take(sizeof(float) * shape_.k_units * d);
    k_smooth_ = front_.take(static_cast<std::size_t>(shape_.k_units));
    // Per thread: one block's rows (fp32), d doubles, and per key block a score, a probability, an index.
    scratch_ = front_.take_per_thread(sizeof(float) * S::kBlockQ * d + sizeof(double) * d +
                                          (2 * sizeof(double) + sizeof(std::uint32_t)) * shape_.nk,
                                      threads_);
  }

  std::size_t bytes() const override { return front_.size(); }

  Result<SpargeLists> select(const AttentionTensors& t, Workspace ws, StreamHandle) const override {
    const int d = p_.head_dim_qk, nq = shape_.nq, nk = shape_.nk;
    const std::int64_t rows = shape_.rows, k_units = shape_.k_units;
    const double scale = p_.softmax_scale();
    auto* offsets = WorkspaceFront::at<std::int32_t>(ws, offsets_);
    auto* indices = WorkspaceFront::at<std::int32_t>(ws, indices_);
    auto* keep = WorkspaceFront::at<std::uint8_t>(ws, keep_);
    auto* q_mean = WorkspaceFront::at<float>(ws, q_mean_);
    auto* q_smooth = WorkspaceFront::at<std::uint8_t>(ws, q_smooth_);
    auto* k_mean = WorkspaceFront::at<float>(ws, k_mean_);
    auto* k_smooth = WorkspaceFront::at<std::uint8_t>(ws, k_smooth_);
#pragma omp parallel num_threads(threads_)
    {
      auto* block_rows = front_.mine<float>(ws, scratch_);
      auto* dscratch = reinterpret_cast<double*>(block_rows + S::kBlockQ * d);
      auto* scores = dscratch + d;
      auto* prob = scores + nk;
      auto* order = reinterpret_cast<std::uint32_t*>(prob + nk);
#pragma omp for schedule(static)
      for (std::int64_t u = 0; u < rows + k_units; ++u) {
        if (u < rows) {  // a query block: (b, h, qb)
          const int qb = static_cast<int>(u % nq), h = static_cast<int>(u / nq % p_.heads_q),
                    b = static_cast<int>(u / nq / p_.heads_q);
          const int lo = qb * S::kBlockQ, hi = std::min(p_.seqlen_q, lo + S::kBlockQ);
          q_smooth[u] = pool(t.q, b, h, lo, hi, q_mean + u * d, block_rows, dscratch) > settings_.simthreshd1;
        } else {  // a key block: (b, kv head, kb)
          const std::int64_t k = u - rows;
          const int kb = static_cast<int>(k % nk), h = static_cast<int>(k / nk % p_.heads_kv),
                    b = static_cast<int>(k / nk / p_.heads_kv);
          const int lo = kb * S::kBlockK, hi = std::min(p_.seqlen_k, lo + S::kBlockK);
          k_smooth[k] = pool(t.k, b, h, lo, hi, k_mean + k * d, block_rows, dscratch) > settings_.simthreshd1;
        }
      }
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < rows; ++r) {
        const int h = static_cast<int>(r / nq % p_.heads_q), b = static_cast<int>(r / nq / p_.heads_q);
        const std::int64_t k0 = (static_cast<std::int64_t>(b) * p_.heads_kv + h / p_.gqa_ratio()) * nk;
        for (int kb = 0; kb < nk; ++kb) {
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += double(q_mean[r * d + c]) * k_mean[(k0 + kb) * d + c];
          scores[kb] = k_smooth[k0 + kb] ? scale * dot : -INFINITY;
        }
        sparge_select(settings_, {scores, static_cast<std::size_t>(nk)}, q_smooth[r] != 0,
                      {keep + r * nk, static_cast<std::size_t>(nk)}, {prob, static_cast<std::size_t>(nk)},
                      {order, static_cast<std::size_t>(nk)});
      }
    }
    offsets[0] = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      std::int32_t n = 0;
      for (int kb = 0; kb < nk; ++kb) n += keep[r * nk + kb];
      offsets[r + 1] = offsets[r] + n;
    }
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      std::int32_t e = offsets[r];
      for (int kb = 0; kb < nk; ++kb)
        if (keep[r * nk + kb]) indices[e++] = kb;
    }
    return SpargeLists{make_view(offsets, DType::i32, {rows + 1}), make_view(indices, DType::i32, {offsets[rows]})};
  }

  Result<std::int64_t> listed(const SpargeLists& lists, StreamHandle) const override { return lists.indices.numel(); }

 private:
  // Mean and self-similarity of block [lo, hi) of (b, h) of `x` (q or k).
  double pool(const TensorView& x, int b, int h, int lo, int hi, float* mean, float* block_rows,
              double* scratch) const {
    const int d = p_.head_dim_qk;
    const HeadRows r = head_rows(p_.layout, x.strides.data(), b, h, 0);
    for (int i = lo; i < hi; ++i)
      for (int c = 0; c < d; ++c)
        block_rows[(i - lo) * d + c] =
            static_cast<float>(load_as_double(x.data, x.dtype, r.offset + i * r.row_stride + c));
    return pool_block(block_rows, hi - lo, d, mean, scratch);
  }

  Problem p_;
  SpargeSettings settings_;
  SpargeShape shape_;
  int threads_;
  WorkspaceFront front_;
  std::size_t offsets_ = 0, indices_ = 0, keep_ = 0, q_mean_ = 0, q_smooth_ = 0, k_mean_ = 0, k_smooth_ = 0,
              scratch_ = 0;
};

#if defined(ATTNKIT_HAS_CUDA)
// The same buffers on the device (256-byte aligned slices of the front), filled by sparge_select.cu.
class DeviceSelection final : public SpargeSelection {
 public:
  DeviceSelection(const Problem& p, const SpargeSettings& s, SpargeShape shape) : p_(p), shape_(shape) {
    const std::size_t d = p.head_dim_qk;
    q_mean_ = take(sizeof(float) * shape_.rows * d);
    q_smooth_ = take(static_cast<std::size_t>(shape_.rows));
    k_mean_ = take(sizeof(float) * shape_.k_units * d);
    k_smooth_ = take(static_cast<std::size_t>(shape_.k_units));
    keep_ = take(static_cast<std::size_t>(shape_.rows * shape_.nk));
    counts_ = take(sizeof(std::int32_t) * shape_.rows);
    offsets_ = take(sizeof(std::int32_t) * (shape_.rows + 1));
    indices_ = take(sizeof(std::int32_t) * shape_.rows * shape_.nk);
    args_.dtype = p.dtype;
    args_.batch = p.batch;
    args_.heads_q = p.heads_q;
    args_.heads_kv = p.heads_kv;
    args_.seqlen = p.seqlen_q;
    args_.head_dim = p.head_dim_qk;
    args_.block_q = S::kBlockQ;
    args_.block_k = S::kBlockK;
    args_.scale = p.softmax_scale();
    args_.simthreshd1 = s.simthreshd1;
    args_.cdfthreshd = s.cdfthreshd;
    args_.topk_blocks = sparge_topk_blocks(s.topk, shape_.nk);
  }

  std::size_t bytes() const override { return size_; }

  Result<SpargeLists> select(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    cuda::SpargeSelect a = args_;
    a.q = t.q.data;
    a.k = t.k.data;
    token_strides(p_.layout, t.q, a.q_strides);
    token_strides(p_.layout, t.k, a.k_strides);
    a.q_mean = WorkspaceFront::at<float>(ws, q_mean_);
    a.q_smooth = WorkspaceFront::at<std::uint8_t>(ws, q_smooth_);
    a.k_mean = WorkspaceFront::at<float>(ws, k_mean_);
    a.k_smooth = WorkspaceFront::at<std::uint8_t>(ws, k_smooth_);
    a.keep = WorkspaceFront::at<std::uint8_t>(ws, keep_);
    a.counts = WorkspaceFront::at<std::int32_t>(ws, counts_);
    a.offsets = WorkspaceFront::at<std::int32_t>(ws, offsets_);
    a.indices = WorkspaceFront::at<std::int32_t>(ws, indices_);
    if (Diagnostics why = cuda::sparge_select(a, stream); !why.ok()) return why;
    return SpargeLists{make_view(a.offsets, DType::i32, {shape_.rows + 1}, t.q.device),
                       make_view(a.indices, DType::i32, {shape_.rows * shape_.nk}, t.q.device)};
  }

  Result<std::int64_t> listed(const SpargeLists& lists, StreamHandle stream) const override {
    std::int32_t total = 0;
    auto s = static_cast<cudaStream_t>(stream);
    const auto* last = static_cast<const std::int32_t*>(lists.offsets.data) + shape_.rows;
    if (Diagnostics why = cuda::check_cuda(cudaMemcpyAsync(&total, last, sizeof(total), cudaMemcpyDeviceToHost, s),
                                           "cudaMemcpyAsync(sparge list total)");
        !why.ok())
      return why;
    if (Diagnostics why = cuda::check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize(sparge statistics)");
        !why.ok())
      return why;
    return static_cast<std::int64_t>(total);
  }

 private:
  std::size_t take(std::size_t bytes) {
    const std::size_t at = size_;
    size_ += (bytes + 255) / 256 * 256;
    return at;
  }

  Problem p_;
  SpargeShape shape_;
  cuda::SpargeSelect args_;
  std::size_t size_ = 0;
  std::size_t q_mean_ = 0, q_smooth_ = 0, k_mean_ = 0, k_smooth_ = 0, keep_ = 0, counts_ = 0, offsets_ = 0,
              indices_ = 0;
};
#endif

}  // namespace

Result<std::unique_ptr<SpargeSelection>> make_host_sparge_selection(const Problem& p, const SpargeSettings& s) {
  auto shape = SpargeShape::of(p);
  if (!shape) return shape.diagnostics();
  return std::unique_ptr<SpargeSelection>(std::make_unique<HostSelection>(p, s, *shape));
}

Result<std::unique_ptr<SpargeSelection>> make_device_sparge_selection(const Problem& p, const SpargeSettings& s,
                                                                      const Platform& gpu) {
  auto shape = SpargeShape::of(p);
  if (!shape) return shape.diagnostics();
#if !defined(ATTNKIT_HAS_CUDA)
  (void)s, (void)gpu;
  return diagnose("AK6002", {{"reason", "this build has no CUDA (sparge_attn's CUDA selection)"}});
#else
  if (p.head_dim_qk > cuda::kSpargeMaxHeadDim)
    return diagnose("AK6002", {{"reason", "sparge_attn's CUDA selection pools head dims up to 128 (a bug in the "
                                          "backend's capabilities)"}});
  const std::size_t smem = cuda::sparge_select_smem_bytes(shape->nk, p.head_dim_qk);
  if (gpu.detected) {
    auto props = cuda::current_device_properties();
    if (!props) return props.diagnostics();
    constexpr std::size_t kStaticShared = 4096;  // the selection kernel's own reductions (sparge_select.cu)
    const std::size_t room = props->shared_memory_per_block_optin - kStaticShared;
    if (smem > room) {
      int most = 1;  // the most key blocks that fit: a power of two
      while (cuda::sparge_select_smem_bytes(2 * most, p.head_dim_qk) <= room) most *= 2;
      return diagnose("AK1012", {{"what", "sparge_attn's key blocks per sequence on this GPU (a query block ranks "
                                          "its key blocks in shared memory)"},
                                 {"value", std::to_string(shape->nk)}, {"limit", std::to_string(most)}});
    }
    if (Diagnostics why = cuda::configure_sparge_select(smem); !why.ok()) return why;
  }
  return std::unique_ptr<SpargeSelection>(std::make_unique<DeviceSelection>(p, s, *shape));
#endif
}

}  // namespace attnkit::sparse
