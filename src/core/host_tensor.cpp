#include "attnkit/core/host_tensor.hpp"

#include "attnkit/core/block_sparse.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>
#include <new>
#include <random>

#include "attnkit/core/host_memory.hpp"

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

// ProblemDataOptions::key_growth: key j of a sequence of n tokens times
// 1 + growth * j / (n - 1), in every layout (a paged cache through its table).
void grow_keys(const TensorView& k, const Problem& p, const std::vector<int>& k_lens, const TensorView& table,
               double growth) {
  std::int64_t first = 0;  // THD: the sequence's first packed token
  for (int b = 0; b < p.batch; ++b) {
    const int n = k_lens[static_cast<std::size_t>(b)];
    for (int h = 0; h < p.heads_kv; ++h) {
      const HeadRows rows = p.paged_kv ? HeadRows{} : head_rows(p.layout, k.strides.data(), b, h, first);
      auto first_element = [&](int j) -> std::int64_t {  // of key j's row
        if (!p.paged_kv) return rows.offset + j * rows.row_stride;
        const int P = p.paged_kv->page_size;
        const std::int64_t page = table.ptr<std::int32_t>()[b * table.strides[0] + (j / P) * table.strides[1]];
        return page * k.strides[0] + (j % P) * k.strides[1] + h * k.strides[2];
      };
      for (int j = 0; j < n; ++j) {
        const std::int64_t row = first_element(j);
        const double f = 1.0 + (n > 1 ? growth * j / (n - 1) : 0.0);
        for (std::int64_t c = row; c < row + p.head_dim_qk; ++c)
          store_from_double(k.data, k.dtype, c, f * load_as_double(k.data, k.dtype, c));
      }
    }
    first += n;
  }
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
  // The lengths are read where given and implied (batch x seqlen) where not:
  // a batch-sized vector made before the size check below would itself be an
  // unchecked allocation (8 GiB for batch = 2^31 - 1).
  for (const auto& [lens, most] : {std::pair{&o.q_lens, p.seqlen_q}, std::pair{&o.k_lens, p.seqlen_k}}) {
    if (!lens->empty() && static_cast<std::int64_t>(lens->size()) != p.batch)
      return diagnose("AK1108", {{"name", "sequence lengths"},
                                 {"reason", "one length per sequence is needed (batch = " + std::to_string(p.batch) + ")"}});
    for (std::size_t b = 0; b < lens->size(); ++b)
      if ((*lens)[b] < 0 || (*lens)[b] > most)
        return diagnose("AK1108", {{"name", "sequence lengths"},
                                   {"reason", "sequence " + std::to_string(b) + " exceeds the problem's max lengths"}});
  }
  const auto total = [&](const std::vector<int>& lens, int each) {
    return lens.empty() ? std::int64_t{p.batch} * each : std::accumulate(lens.begin(), lens.end(), std::int64_t{0});
  };
  const std::int64_t tq = total(o.q_lens, p.seqlen_q);
  const std::int64_t tk = total(o.k_lens, p.seqlen_k);
  const DType kt = p.k_dtype();
  // Pages of a paged cache: each sequence's, and 3 spare ones the table never names.
  std::int64_t max_pages = 1, total_pages = 3;
  if (p.paged_kv) {
    const auto pages_of = [&](int len) { return (std::int64_t{len} + p.paged_kv->page_size - 1) / p.paged_kv->page_size; };
    if (o.k_lens.empty()) {
      max_pages = std::max(max_pages, pages_of(p.seqlen_k));
      total_pages += std::int64_t{p.batch} * pages_of(p.seqlen_k);
    }
    for (int len : o.k_lens) {
      max_pages = std::max(max_pages, pages_of(len));
      total_pages += pages_of(len);
    }
  }
  // cu_seqlens (THD) hold int32 token offsets, block tables (paged) int32 page
  // indices, block-sparse offsets int32 positions in up to rows x key blocks indices.
  const bool thd = p.layout == Layout::thd;
  std::int64_t sparse_rows = 0, sparse_most = 0;
  if (p.block_sparse) {
    const BlockSparseShape shape = block_sparse_shape(p);
    sparse_rows = shape.rows;
    sparse_most = shape.rows * shape.num_k_blocks;
  }
  for (auto [what, value] : {std::pair<const char*, std::int64_t>{"the packed query tokens", thd ? tq : 0},
                             {"the packed key tokens", thd && !p.paged_kv ? tk : 0},
                             {"the pages of the KV cache", p.paged_kv ? total_pages : 0},
                             {"the blocks the block-sparse lists can hold", sparse_most}})
    if (value > INT32_MAX)
      return diagnose("AK1012", {{"what", what}, {"value", std::to_string(value)}, {"limit", std::to_string(INT32_MAX)}});
  // Every buffer below, in bytes, checked before the first is allocated (the
  // sizes are within validate_problem's limits, so the sums cannot overflow).
  const std::int64_t q_rows = p.layout == Layout::thd ? tq : std::int64_t{p.batch} * p.seqlen_q;
  const std::int64_t k_rows = p.paged_kv ? total_pages * p.paged_kv->page_size
                              : p.layout == Layout::thd ? tk
                                                        : std::int64_t{p.batch} * p.seqlen_k;
  std::int64_t bytes = q_rows * p.heads_q * (p.head_dim_qk * std::int64_t(dtype_size(p.dtype)) +
                                             p.head_dim_v * std::int64_t(dtype_size(p.out_dtype())) + 4) +
                       k_rows * p.heads_kv * (p.head_dim_qk + p.head_dim_v) * std::int64_t(dtype_size(kt)) +
                       (std::int64_t{p.batch} * (max_pages + 3 + 2) + p.heads_q) * 4;  // + the two length vectors
  if (p.mask == MaskKind::custom) bytes += std::int64_t{p.batch} * p.heads_q * p.seqlen_q * p.seqlen_k;
  bytes += 2 * 4 * (sparse_rows + 1 + sparse_most);  // the lists, built in vectors, then copied
  why = check_host_allocation("the problem's host data", bytes);
  if (!why.ok()) return why;
  HostProblemData d;
  d.problem_ = p;
  try {
    d.q_lens_ = o.q_lens.empty() ? std::vector<int>(p.batch, p.seqlen_q) : o.q_lens;
    d.k_lens_ = o.k_lens.empty() ? std::vector<int>(p.batch, p.seqlen_k) : o.k_lens;
    d.fill(o, tq, tk, max_pages, total_pages);
  } catch (const std::bad_alloc&) {
    return host_allocation_failed("the problem's host data", bytes);
  }
  return d;
}

void HostProblemData::fill(const ProblemDataOptions& o, std::int64_t tq, std::int64_t tk, std::int64_t max_pages,
                           std::int64_t total_pages) {
  HostProblemData& d = *this;
  const Problem& p = problem_;
  const DType kt = p.k_dtype();
  std::mt19937_64 rng(o.seed);
  // Standard normal values; int8 inputs are raw quantized integers, so spread them.
  auto stddev = [](DType t) { return t == DType::i8 ? 30.0 : 1.0; };
  d.q_ = HostTensor(p.dtype, token_shape(p.layout, p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk, tq));
  fill_normal(d.q_.view(), rng, stddev(p.dtype));
  if (p.paged_kv) {
    const int P = p.paged_kv->page_size;
    d.k_ = HostTensor(kt, {total_pages, P, p.heads_kv, p.head_dim_qk});
    d.v_ = HostTensor(kt, {total_pages, P, p.heads_kv, p.head_dim_v});
    std::vector<std::int32_t> order(total_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    d.block_table_ = HostTensor(DType::i32, {p.batch, max_pages});
    d.seqlens_k_ = HostTensor(DType::i32, {p.batch});
    auto* table = d.block_table_.view().ptr<std::int32_t>();
    std::fill(table, table + p.batch * max_pages, -1);
    std::int64_t next = 0;
    for (int b = 0; b < p.batch; ++b) {
      d.seqlens_k_.view().ptr<std::int32_t>()[b] = d.k_lens_[b];
      for (std::int64_t j = 0; j < (std::int64_t{d.k_lens_[b]} + P - 1) / P; ++j) table[b * max_pages + j] = order[next++];
    }
  } else {
    d.k_ = HostTensor(kt, token_shape(p.layout, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk, tk));
    d.v_ = HostTensor(kt, token_shape(p.layout, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v, tk));
  }
  fill_normal(d.k_.view(), rng, stddev(kt));
  fill_normal(d.v_.view(), rng, stddev(kt));
  if (o.key_growth != 0.0) grow_keys(d.k_.view(), p, d.k_lens_, d.block_table_.view(), o.key_growth);
  d.out_ = d.make_output(p.out_dtype());
  if (p.return_lse) d.lse_ = d.make_lse();
  if (p.has_sinks) {
    d.sinks_ = HostTensor(DType::f32, {p.heads_q});
    fill_normal(d.sinks_.view(), rng, 1.0);
  }
  if (p.has_gate) {  // gates in [0, 1), as a sigmoid gate gives
    d.gate_ = HostTensor(DType::f32, p.layout == Layout::thd    ? std::vector<std::int64_t>{tq, p.heads_q}
                                     : p.layout == Layout::bhsd ? std::vector<std::int64_t>{p.batch, p.heads_q, p.seqlen_q}
                                                                : std::vector<std::int64_t>{p.batch, p.seqlen_q, p.heads_q});
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    auto* g = d.gate_.view().ptr<float>();
    for (std::int64_t i = 0; i < d.gate_.view().numel(); ++i) g[i] = unit(rng);
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
  t.gate = gate_.view();
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
