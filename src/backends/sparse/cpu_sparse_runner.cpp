#include "backends/sparse/cpu_sparse_runner.hpp"

#include <algorithm>
#include <cstring>

#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/core/host_memory.hpp"

namespace attnkit::sparse {
namespace {

// Rows of (sequence b, head h, token r) of a caller's BSHD / BHSD tensor and
// of a contiguous BSHD copy in tile order, swapped one way or the other:
// to_tiles: copy[b, tile_order(r), h] = t[b, r, h]; else t[b, r, h] = copy[b, tile_order(r), h].
void permute_rows(const TensorView& t, Layout layout, int batch, int seqlen, int heads, int dim,
                  const VideoTiling& g, std::byte* copy, bool to_tiles) {
  const std::size_t elem = dtype_size(t.dtype), row_bytes = static_cast<std::size_t>(dim) * elem;
  const std::int64_t tokens = static_cast<std::int64_t>(batch) * seqlen;
#pragma omp parallel for num_threads(host_threads()) schedule(static)
  for (std::int64_t i = 0; i < tokens; ++i) {
    const int b = static_cast<int>(i / seqlen);
    const std::int64_t r = i % seqlen, s = tile_order_index(g, r);
    for (int h = 0; h < heads; ++h) {
      const HeadRows rows = head_rows(layout, t.strides.data(), b, h, 0);
      std::byte* caller = t.bytes() + (rows.offset + r * rows.row_stride) * static_cast<std::int64_t>(elem);
      std::byte* tiled = copy + (((static_cast<std::int64_t>(b) * seqlen + s) * heads + h) * dim) * static_cast<std::int64_t>(elem);
      if (to_tiles) std::memcpy(tiled, caller, row_bytes);
      else std::memcpy(caller, tiled, row_bytes);
    }
  }
}

TensorView bshd_view(std::byte* data, DType dtype, int batch, int seqlen, int heads, int dim) {
  return make_view(data, dtype, {batch, seqlen, heads, dim});
}

}  // namespace

Result<std::unique_ptr<CpuSparseRunner>> CpuSparseRunner::create(const Problem& p, const Platform& cpu,
                                                                 const std::vector<BlockSparse>& layouts,
                                                                 std::optional<VideoTiling> tiling, bool partial) {
  const auto flash = make_cpu_flash_backend();
  auto runner = std::unique_ptr<CpuSparseRunner>(new CpuSparseRunner());
  runner->problem_ = p;
  runner->tiling_ = tiling;
  auto dense = flash->plan(p, cpu);
  if (!dense) return dense.diagnostics();
  runner->dense_ = std::move(*dense);
  for (const BlockSparse& layout : layouts) {
    if (runner->sparse_.count(key(layout))) continue;
    Problem inner = p;
    inner.block_sparse = layout;
    if (tiling) inner.layout = Layout::bshd;  // the contiguous tile-ordered copies
    if (partial) {
      inner.return_lse = true;
      inner.out_dtype_override = DType::f32;
    }
    auto plan = flash->plan(inner, cpu);
    if (!plan) return plan.diagnostics();
    runner->sparse_.emplace(key(layout), std::move(*plan));
  }
  return runner;
}

std::size_t CpuSparseRunner::copies_bytes() const { return tiling_ ? tile_copies_bytes(problem_, 64) : 0; }

std::size_t CpuSparseRunner::workspace_bytes() const {
  std::size_t kernel = dense_->workspace_bytes();
  for (const auto& [k, plan] : sparse_) kernel = std::max(kernel, plan->workspace_bytes());
  return front_ + copies_bytes() + kernel;
}

Diagnostics CpuSparseRunner::run_dense(const AttentionTensors& t, Workspace ws, StreamHandle) const {
  if (ws.size() < workspace_bytes())
    return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
  const std::size_t skip = front_ + copies_bytes();
  return dense_->run(t, ws.subspan(skip), nullptr);
}

Diagnostics CpuSparseRunner::run_sparse(const AttentionTensors& t, const BlockSparse& layout, const TensorView& offsets,
                                        const TensorView& indices, Workspace ws, StreamHandle,
                                        SparsityStats* stats) const {
  if (ws.size() < workspace_bytes())
    return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
  const Plan& plan = *sparse_.at(key(layout));
  const Problem& p = problem_;
  Workspace kernel_ws = ws.subspan(front_ + copies_bytes());
  AttentionTensors inner = t;
  inner.block_offsets = offsets;
  inner.block_indices = indices;
  count_sparsity(p, plan.problem(), layout, indices.numel(), stats);
  if (!tiling_) return plan.run(inner, kernel_ws, nullptr);
  // Validate the caller's tensors before reading them into the copies.
  if (Diagnostics why = validate_binding(p, t, {DeviceKind::cpu, 0}); !why.ok()) return why;
  const int B = p.batch, S = p.seqlen_q;
  std::byte* at = ws.data() + front_;
  auto take = [&](DType dtype, int heads, int dim) {
    std::byte* here = at;
    at += round_up(static_cast<std::size_t>(B) * S * heads * dim * dtype_size(dtype));
    return here;
  };
  std::byte* q = take(p.dtype, p.heads_q, p.head_dim_qk);
  std::byte* k = take(p.dtype, p.heads_kv, p.head_dim_qk);
  std::byte* v = take(p.dtype, p.heads_kv, p.head_dim_v);
  std::byte* o = take(p.out_dtype(), p.heads_q, p.head_dim_v);
  permute_rows(t.q, p.layout, B, S, p.heads_q, p.head_dim_qk, *tiling_, q, true);
  permute_rows(t.k, p.layout, B, S, p.heads_kv, p.head_dim_qk, *tiling_, k, true);
  permute_rows(t.v, p.layout, B, S, p.heads_kv, p.head_dim_v, *tiling_, v, true);
  inner.q = bshd_view(q, t.q.dtype, B, S, p.heads_q, p.head_dim_qk);
  inner.k = bshd_view(k, t.k.dtype, B, S, p.heads_kv, p.head_dim_qk);
  inner.v = bshd_view(v, t.v.dtype, B, S, p.heads_kv, p.head_dim_v);
  inner.out = bshd_view(o, t.out.dtype, B, S, p.heads_q, p.head_dim_v);
  if (Diagnostics ran = plan.run(inner, kernel_ws, nullptr); !ran.ok()) return ran;
  permute_rows(t.out, p.layout, B, S, p.heads_q, p.head_dim_v, *tiling_, o, false);
  return {};
}

}  // namespace attnkit::sparse
