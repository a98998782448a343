#include "attnkit/core/host_tensor.hpp"

#include "attnkit/core/block_sparse.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

namespace attnkit {

HostTensor::HostTensor(DType dtype, std::initializer_list<std::int64_t> shape)
    : HostTensor(dtype, std::vector<std::int64_t>(shape)) {}

HostTensor::HostTensor(DType dtype, const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  constexpr std::size_t kAlign = 64;
  storage_.resize(static_cast<std::size_t>(n) * dtype_size(dtype) + kAlign);
  auto addr = reinterpret_cast<std::uintptr_t>(storage_.data());
  const std::size_t pad = (kAlign - addr % kAlign) % kAlign;
  view_.data = storage_.data() + pad;
  view_.dtype = dtype;
  view_.rank = static_cast<int>(shape.size());
  std::int64_t stride = 1;
  for (int d = view_.rank - 1; d >= 0; --d) {
    view_.shape[d] = shape[d];
    view_.strides[d] = stride;
    stride *= shape[d];
  }
}

void HostTensor::poison() {
  const std::int64_t n = view_.numel();
  if (is_floating(view_.dtype)) {
    for (std::int64_t i = 0; i < n; ++i) store_from_double(view_.data, view_.dtype, i, std::nan(""));
  } else {
    std::memset(view_.data, 0xAB, static_cast<std::size_t>(n) * dtype_size(view_.dtype));
  }
}

namespace {

void fill_normal(const TensorView& t, std::mt19937_64& rng, double stddev) {
  std::normal_distribution<double> dist(0.0, stddev);
  for (std::int64_t i = 0; i < t.numel(); ++i) store_from_double(t.data, t.dtype, i, dist(rng));
}

std::vector<std::int64_t> token_shape(Layout layout, int b, int s, int h, int d, std::int64_t total) {
  switch (layout) {
    case Layout::bshd: return {b, s, h, d};
    case Layout::bhsd: return {b, h, s, d};
    case Layout::thd: return {total, h, d};
  }
  return {};
}

HostTensor make_cu_seqlens(const std::vector<int>& lens) {
  HostTensor t(DType::i32, {static_cast<std::int64_t>(lens.size()) + 1});
  auto* v = t.view().ptr<std::int32_t>();
  v[0] = 0;
  for (std::size_t i = 0; i < lens.size(); ++i) v[i + 1] = v[i] + lens[i];
  return t;
}

}  // namespace

std::int64_t HostProblemData::total_q() const {
  return std::accumulate(q_lens_.begin(), q_lens_.end(), std::int64_t{0});
}

HostTensor HostProblemData::make_output(DType dtype) const {
  const Problem& p = problem_;
  return HostTensor(dtype, token_shape(p.layout, p.batch, p.seqlen_q, p.heads_q, p.head_dim_v, total_q()));
}

HostTensor HostProblemData::make_lse() const {
  const Problem& p = problem_;
  if (p.layout == Layout::thd) return HostTensor(DType::f32, {p.heads_q, total_q()});
  return HostTensor(DType::f32, {p.batch, p.heads_q, p.seqlen_q});
}

Result<HostProblemData> HostProblemData::create(const Problem& p, const ProblemDataOptions& o) {
  Diagnostics why = validate_problem(p);
  if (!why.ok()) return why;
  HostProblemData d;
  d.problem_ = p;
  d.q_lens_ = o.q_lens.empty() ? std::vector<int>(p.batch, p.seqlen_q) : o.q_lens;
  d.k_lens_ = o.k_lens.empty() ? std::vector<int>(p.batch, p.seqlen_k) : o.k_lens;
  if (static_cast<int>(d.q_lens_.size()) != p.batch || static_cast<int>(d.k_lens_.size()) != p.batch)
    return diagnose("AK1108", {{"name", "sequence lengths"},
                               {"reason", "one length per sequence is needed (batch = " + std::to_string(p.batch) + ")"}});
  for (std::size_t b = 0; b < d.q_lens_.size(); ++b)
    if (d.q_lens_[b] < 0 || d.q_lens_[b] > p.seqlen_q || d.k_lens_[b] < 0 || d.k_lens_[b] > p.seqlen_k)
      return diagnose("AK1108", {{"name", "sequence lengths"},
                                 {"reason", "sequence " + std::to_string(b) + " exceeds the problem's max lengths"}});
  std::mt19937_64 rng(o.seed);
  const std::int64_t tq = d.total_q();
  const std::int64_t tk = std::accumulate(d.k_lens_.begin(), d.k_lens_.end(), std::int64_t{0});
  const DType kt = p.k_dtype();
  // Standard normal values; int8 inputs are raw quantized integers, so spread them.
  auto stddev = [](DType t) { return t == DType::i8 ? 30.0 : 1.0; };
  d.q_ = HostTensor(p.dtype, token_shape(p.layout, p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk, tq));
  fill_normal(d.q_.view(), rng, stddev(p.dtype));
  if (p.paged_kv) {
    const int P = p.paged_kv->page_size;
    int max_pages = 0, total_pages = 0;
    for (int len : d.k_lens_) {
      max_pages = std::max(max_pages, (len + P - 1) / P);
      total_pages += (len + P - 1) / P;
    }
    max_pages = std::max(max_pages, 1);
    total_pages += 3;  // spare pages the table never names
    d.k_ = HostTensor(kt, {total_pages, P, p.heads_kv, p.head_dim_qk});
    d.v_ = HostTensor(kt, {total_pages, P, p.heads_kv, p.head_dim_v});
    std::vector<std::int32_t> order(total_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    d.block_table_ = HostTensor(DType::i32, {p.batch, max_pages});
    d.seqlens_k_ = HostTensor(DType::i32, {p.batch});
    auto* table = d.block_table_.view().ptr<std::int32_t>();
    std::fill(table, table + static_cast<std::size_t>(p.batch) * max_pages, -1);
    int next = 0;
    for (int b = 0; b < p.batch; ++b) {
      d.seqlens_k_.view().ptr<std::int32_t>()[b] = d.k_lens_[b];
      for (int j = 0; j < (d.k_lens_[b] + P - 1) / P; ++j) table[b * max_pages + j] = order[next++];
    }
  } else {
    d.k_ = HostTensor(kt, token_shape(p.layout, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk, tk));
    d.v_ = HostTensor(kt, token_shape(p.layout, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v, tk));
  }
  fill_normal(d.k_.view(), rng, stddev(kt));
  fill_normal(d.v_.view(), rng, stddev(kt));
  d.out_ = d.make_output(p.out_dtype());
  if (p.return_lse) d.lse_ = d.make_lse();
  if (p.has_sinks) {
    d.sinks_ = HostTensor(DType::f32, {p.heads_q});
    fill_normal(d.sinks_.view(), rng, 1.0);
  }
  if (p.layout == Layout::thd) {
    d.cu_q_ = make_cu_seqlens(d.q_lens_);
    if (!p.paged_kv) d.cu_k_ = make_cu_seqlens(d.k_lens_);
  }
  std::bernoulli_distribution keep(o.mask_density);
  if (p.block_sparse) {
    const BlockSparseShape shape = block_sparse_shape(p);
    std::bernoulli_distribution empty(o.empty_block_rows);
    std::vector<std::int32_t> offsets{0}, indices;
    for (std::int64_t r = 0; r < shape.rows; ++r) {
      const bool none = empty(rng);
      for (int kb = 0; kb < shape.num_k_blocks; ++kb)
        if (!none && keep(rng)) indices.push_back(kb);
      offsets.push_back(static_cast<std::int32_t>(indices.size()));
    }
    d.block_offsets_ = HostTensor(DType::i32, {static_cast<std::int64_t>(offsets.size())});
    d.block_indices_ = HostTensor(DType::i32, {static_cast<std::int64_t>(indices.size())});
    std::copy(offsets.begin(), offsets.end(), d.block_offsets_.view().ptr<std::int32_t>());
    std::copy(indices.begin(), indices.end(), d.block_indices_.view().ptr<std::int32_t>());
  }
  if (p.mask == MaskKind::custom) {
    d.custom_mask_ = HostTensor(DType::u8, {p.batch, p.heads_q, p.seqlen_q, p.seqlen_k});
    auto* m = d.custom_mask_.view().ptr<std::uint8_t>();
    for (std::int64_t i = 0; i < d.custom_mask_.view().numel(); ++i) m[i] = keep(rng) ? 1 : 0;
  }
  d.poison_outputs();
  return d;
}

void HostProblemData::poison_outputs() {
  out_.poison();
  if (problem_.return_lse) lse_.poison();
}

AttentionTensors HostProblemData::tensors_with_outputs(const TensorView& out, const TensorView& lse) const {
  AttentionTensors t;
  t.q = q_.view();
  t.k = k_.view();
  t.v = v_.view();
  t.out = out;
  t.lse = lse;
  t.sinks = sinks_.view();
  t.cu_seqlens_q = cu_q_.view();
  t.cu_seqlens_k = cu_k_.view();
  t.block_table = block_table_.view();
  t.seqlens_k = seqlens_k_.view();
  t.block_offsets = block_offsets_.view();
  t.block_indices = block_indices_.view();
  t.custom_mask = custom_mask_.view();
  return t;
}

AttentionTensors HostProblemData::tensors() const { return tensors_with_outputs(out_.view(), lse_.view()); }

}  // namespace attnkit
