#include <omp.h>

#include <algorithm>
#include <cmath>
#include <new>
#include <limits>
#include <vector>

#include "attnkit/backends/reference.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/host_memory.hpp"
#include "attnkit/core/mask.hpp"

namespace attnkit {
namespace {

// Where row j of (batch b, kv head h) lives in k or v.
struct KvRowIndex {
  const Problem& p;
  const AttentionTensors& t;
  const TensorView& kv;
  int b;
  int h;
  SequenceSpan span;

  std::int64_t offset(int j) const {
    if (p.paged_kv) {
      const int P = p.paged_kv->page_size;
      const auto* table = t.block_table.ptr<const std::int32_t>();
      const std::int64_t page = table[b * t.block_table.strides[0] + (j / P) * t.block_table.strides[1]];
      return page * kv.strides[0] + (j % P) * kv.strides[1] + h * kv.strides[2];
    }
    const HeadRows rows = head_rows(p.layout, kv.strides.data(), b, h, span.k_offset);
    return rows.offset + j * rows.row_stride;
  }
};

std::vector<double> load_rows(const TensorView& tv, const KvRowIndex& idx, int rows, int dim, double descale) {
  std::vector<double> out(static_cast<std::size_t>(rows) * dim);
  for (int j = 0; j < rows; ++j) {
    const std::int64_t base = idx.offset(j);
    for (int d = 0; d < dim; ++d) out[static_cast<std::size_t>(j) * dim + d] = load_as_double(tv.data, tv.dtype, base + d) * descale;
  }
  return out;
}

// Which key blocks query block qb of (b, h) lists: listed[kb] != 0.
void listed_key_blocks(const Problem& p, const AttentionTensors& t, int b, int h, int qb, std::vector<char>& listed) {
  const BlockSparse& bs = *p.block_sparse;
  const BlockSparseShape shape = block_sparse_shape(p);
  listed.assign(static_cast<std::size_t>(shape.num_k_blocks), 0);
  const std::int64_t row = block_sparse_row(bs.batch, bs.heads, shape.num_q_blocks, b, h, qb);
  const auto* idx = t.block_indices.ptr<const std::int32_t>();
  const BlockListRange range = block_list_range(t.block_offsets.ptr<const std::int32_t>(), row, t.block_indices.numel());
  for (std::int64_t e = range.begin; e < range.end; ++e) listed[static_cast<std::size_t>(idx[e])] = 1;
}

// True when a custom mask hides key j from query i.
bool hidden_by_mask(const Problem& p, const AttentionTensors& t, int b, int h, int i, int j) {
  if (p.mask == MaskKind::custom) {
    const TensorView& m = t.custom_mask;
    const std::int64_t off = b * m.strides[0] + h * m.strides[1] + i * m.strides[2] + j * m.strides[3];
    return m.ptr<const std::uint8_t>()[off] == 0;
  }
  return false;
}

void compute_head(const Problem& p, const AttentionTensors& t, int b, int hq) {
  const SequenceSpan span = host_sequence_span(p, t, b);
  const int hkv = hq / p.gqa_ratio();
  const int dqk = p.head_dim_qk, dv = p.head_dim_v;
  const std::vector<double> K = load_rows(t.k, {p, t, t.k, b, hkv, span}, span.k_len, dqk, p.k_descale);
  const std::vector<double> V = load_rows(t.v, {p, t, t.v, b, hkv, span}, span.k_len, dv, p.v_descale);
  const HeadRows q_rows = head_rows(p.layout, t.q.strides.data(), b, hq, span.q_offset);
  const HeadRows o_rows = head_rows(p.layout, t.out.strides.data(), b, hq, span.q_offset);
  const double scale = p.softmax_scale();
  const double cap = p.softcap;
  const Window w = p.effective_window();
  const bool has_sink = p.has_sinks;
  const double sink = has_sink ? load_as_double(t.sinks.data, DType::f32, hq * t.sinks.strides[0]) : 0.0;
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();

  std::vector<double> q(dqk), s(span.k_len), acc(dv);
  std::vector<char> listed;  // block-sparse: the key blocks of the current query block
  for (int i = 0; i < span.q_len; ++i) {
    if (p.block_sparse && i % p.block_sparse->block_q == 0) listed_key_blocks(p, t, b, hq, i / p.block_sparse->block_q, listed);
    for (int d = 0; d < dqk; ++d)
      q[d] = load_as_double(t.q.data, t.q.dtype, q_rows.offset + i * q_rows.row_stride + d) * p.q_descale;
    const KeyRange range = visible_keys_on_diagonal(i, span.diagonal, span.k_len, w.left, w.right);
    // s_j = softcap(scale * q.k_j), -inf where masked; m = max(sink, max_j s_j)
    double m = has_sink ? sink : kNegInf;
    for (int j = 0; j < span.k_len; ++j) {
      const bool unlisted = p.block_sparse && !listed[static_cast<std::size_t>(j / p.block_sparse->block_k)];
      if (j < range.lo || j >= range.hi || unlisted || hidden_by_mask(p, t, b, hq, i, j)) {
        s[j] = kNegInf;
        continue;
      }
      double dot = 0.0;
      for (int d = 0; d < dqk; ++d) dot += q[d] * K[static_cast<std::size_t>(j) * dqk + d];
      double x = dot * scale;
      if (cap > 0.0) x = cap * std::tanh(x / cap);
      s[j] = x;
      m = std::max(m, x);
    }
    // O_i = sum_j exp(s_j - m) v_j / l,  l = exp(sink - m) + sum_j exp(s_j - m),  LSE = m + log l
    std::fill(acc.begin(), acc.end(), 0.0);
    double l = 0.0;
    if (m != kNegInf) {
      if (has_sink) l += std::exp(sink - m);
      for (int j = 0; j < span.k_len; ++j) {
        if (s[j] == kNegInf) continue;
        const double e = std::exp(s[j] - m);
        l += e;
        for (int d = 0; d < dv; ++d) acc[d] += e * V[static_cast<std::size_t>(j) * dv + d];
      }
    }
    const double inv_l = l > 0.0 ? 1.0 / l : 0.0;  // fully masked row: output 0, LSE -inf
    for (int d = 0; d < dv; ++d)
      store_from_double(t.out.data, t.out.dtype, o_rows.offset + i * o_rows.row_stride + d, acc[d] * inv_l);
    if (p.return_lse) {
      const double lse = l > 0.0 ? m + std::log(l) : kNegInf;
      const std::int64_t off = lse_offset(p.layout, t.lse.strides.data(), b, hq, i, span.q_offset);
      t.lse.ptr<float>()[off] = static_cast<float>(lse);
    }
  }
}

Capabilities reference_capabilities() {
  Capabilities c;
  c.platforms = {PlatformKind::cpu};
  c.dtypes = {DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2, DType::i8};
  c.max_head_dim = 512;
  c.masks = {MaskKind::none, MaskKind::causal, MaskKind::sliding_window, MaskKind::custom};
  c.block_sparse = true;
  c.layouts = {Layout::bshd, Layout::bhsd, Layout::thd};
  c.paged_kv = true;
  c.diagonal_offsets = true;
  c.switchable_per_request = false;
  c.auto_selectable = false;  // the oracle is only used when named
  return c;
}

class ReferencePlan final : public Plan {
 public:
  using Plan::Plan;
  Diagnostics run(const AttentionTensors& t, Workspace, StreamHandle) const override {
    return reference_attention(problem(), t);
  }
};

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }
  std::string_view description() const override {
    return "exact attention with fp64 accumulation; the oracle for tests (slow, never auto-picked)";
  }
  const Capabilities& capabilities() const override { return caps_; }
  Result<std::unique_ptr<Plan>> plan(const Problem& p, const Platform& platform) const override {
    Diagnostics why = validate_problem(p);
    why.append(check(p, platform));
    if (!why.ok()) return why;
    return std::unique_ptr<Plan>(std::make_unique<ReferencePlan>(p));
  }

 private:
  Capabilities caps_ = reference_capabilities();
};

}  // namespace

Diagnostics reference_attention(const Problem& p, const AttentionTensors& t, const ReferenceOptions& options) {
  Diagnostics why = validate_problem(p);
  if (!why.ok()) return why;
  why = validate_binding(p, t, {DeviceKind::cpu, 0});
  if (!why.ok()) return why;
  if (options.check_finite) {
    why = scan_nonfinite_inputs(p, t);
    if (!why.ok()) return why;
  }
  // Per thread: one head's K and V rows in fp64, plus a score row and two vectors.
  const std::int64_t per_thread =
      (std::int64_t{p.seqlen_k} * (p.head_dim_qk + p.head_dim_v + 1) + p.head_dim_qk + p.head_dim_v) *
      static_cast<std::int64_t>(sizeof(double));
  why = check_host_allocation("the reference's fp64 copies of one head's keys and values (per thread)",
                              per_thread * host_threads());
  if (!why.ok()) return why;
  const std::vector<std::pair<int, int>>& only = options.only_heads;
  const std::int64_t n = only.empty() ? std::int64_t{p.batch} * p.heads_q : static_cast<std::int64_t>(only.size());
  bool out_of_memory = false;
#pragma omp parallel for num_threads(host_threads()) schedule(dynamic, 1)
  for (std::int64_t i = 0; i < n; ++i) {
    try {
      if (only.empty()) compute_head(p, t, static_cast<int>(i / p.heads_q), static_cast<int>(i % p.heads_q));
      else compute_head(p, t, only[i].first, only[i].second);
    } catch (const std::bad_alloc&) {  // an exception may not leave the parallel region
#pragma omp atomic write
      out_of_memory = true;
    }
  }
  if (out_of_memory) return host_allocation_failed("the reference's per-head copies", per_thread * host_threads());
  return {};
}

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace attnkit
