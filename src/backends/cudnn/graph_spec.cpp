#include "backends/cudnn/graph_spec.hpp"

#include <algorithm>
#include <bit>
#include <limits>

namespace attnkit::cudnn {
namespace {

std::array<std::int64_t, 4> strides_of(const TensorView& t) {
  std::array<std::int64_t, 4> s{};
  for (int i = 0; i < t.rank && i < 4; ++i) s[i] = t.strides[i];
  return s;
}

// Contiguous strides of a row-major tensor of `dims`.
std::array<std::int64_t, 4> dense(std::array<std::int64_t, 4> dims, int rank) {
  std::array<std::int64_t, 4> s{};
  std::int64_t step = 1;
  for (int i = rank - 1; i >= 0; --i) {
    s[i] = step;
    step *= dims[i];
  }
  return s;
}

// q-like tensors (q, k, v, out) of the layout: TensorView strides -> cuDNN's (b, h, s, d).
Dims4 qkv_dims(Layout layout, const std::array<std::int64_t, 4>& st, std::int64_t b, std::int64_t h, std::int64_t s,
               std::int64_t d) {
  Dims4 out;
  out.dim = {b, h, s, d};
  switch (layout) {
    case Layout::bshd: out.stride = {st[0], st[2], st[1], 1}; break;
    case Layout::bhsd: out.stride = {st[0], st[1], st[2], 1}; break;
    // Packed: each sequence starts at its ragged offset, so the batch stride is
    // never used; it is given as a padded sequence's extent.
    case Layout::thd: out.stride = {s * st[0], st[1], st[0], 1}; break;
  }
  return out;
}

// A size-1 dim with stride 0 (a broadcast view) gets the stride a contiguous
// tensor would have there; cuDNN refuses zero strides.
void fix_broadcast_strides(Dims4& t) {
  for (int i = 0; i < 4; ++i)
    if (t.dim[i] == 1 && t.stride[i] == 0) t.stride[i] = i == 3 ? 1 : t.stride[i + 1] * t.dim[i + 1];
}

constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

std::int64_t power_of_two_at_least(std::int64_t n, std::int64_t floor) {
  std::int64_t v = floor;
  while (v < n) v *= 2;
  return v;
}

}  // namespace

GraphDims graph_dims(const Problem& p) {
  GraphDims d{p.batch, p.seqlen_q, p.seqlen_k, 0};
  if (p.layout == Layout::thd) {
    d.batch = power_of_two_at_least(p.batch, 1);
    d.seqlen_q = power_of_two_at_least(p.seqlen_q, 64);
    if (!p.paged_kv) d.seqlen_k = power_of_two_at_least(p.seqlen_k, 64);
  }
  if (p.paged_kv) {
    const std::int64_t P = p.paged_kv->page_size;
    d.max_pages = power_of_two_at_least((p.seqlen_k + P - 1) / P, 1);
    d.seqlen_k = d.max_pages * P;
  }
  return d;
}

bool needs_padding_mask(const Problem& p) {
  return p.layout == Layout::thd || p.paged_kv.has_value() || (p.mask != MaskKind::none && p.seqlen_q > p.seqlen_k);
}

BindingShape canonical_binding(const Problem& p) {
  const std::int64_t B = p.batch, Sq = p.seqlen_q, Sk = p.seqlen_k, Hq = p.heads_q, Hkv = p.heads_kv,
                     Dqk = p.head_dim_qk, Dv = p.head_dim_v;
  BindingShape s;
  auto like_q = [&](std::int64_t S, std::int64_t H, std::int64_t D) {
    switch (p.layout) {
      case Layout::bshd: return dense({B, S, H, D}, 4);
      case Layout::bhsd: return dense({B, H, S, D}, 4);
      case Layout::thd: return dense({B * S, H, D, 1}, 3);
    }
    return std::array<std::int64_t, 4>{};
  };
  s.q = like_q(Sq, Hq, Dqk);
  s.o = like_q(Sq, Hq, Dv);
  if (p.paged_kv) {
    const std::int64_t P = p.paged_kv->page_size, pages_per_seq = (Sk + P - 1) / P;
    s.pages = B * pages_per_seq;
    s.k = dense({s.pages, P, Hkv, Dqk}, 4);
    s.v = dense({s.pages, P, Hkv, Dv}, 4);
  } else {
    s.k = like_q(Sk, Hkv, Dqk);
    s.v = like_q(Sk, Hkv, Dv);
  }
  if (p.layout != Layout::thd && p.return_lse) s.lse = {Hq * Sq, Sq, 1};
  if (p.has_sinks) s.sinks = 1;
  return s;
}

BindingShape binding_shape(const Problem& p, const AttentionTensors& t) {
  BindingShape s;
  s.q = strides_of(t.q);
  s.k = strides_of(t.k);
  s.v = strides_of(t.v);
  s.o = strides_of(t.out);
  if (p.paged_kv) s.pages = t.k.shape[0];
  if (p.layout != Layout::thd && p.return_lse) s.lse = {t.lse.strides[0], t.lse.strides[1], t.lse.strides[2]};
  if (p.has_sinks) s.sinks = t.sinks.strides[0];
  return s;
}

GraphSpec make_graph_spec(const Problem& p, const BindingShape& b, int device, int sm, bool stats_ragged) {
  const GraphDims g = graph_dims(p);
  const std::int64_t B = g.batch, Sq = g.seqlen_q, Sk = g.seqlen_k, Hq = p.heads_q, Hkv = p.heads_kv,
                     Dqk = p.head_dim_qk, Dv = p.head_dim_v;
  const bool thd = p.layout == Layout::thd;
  GraphSpec s;
  s.device = device;
  s.sm = sm;
  s.io = p.dtype;
  s.out = p.out_dtype();
  s.q = qkv_dims(p.layout, b.q, B, Hq, Sq, Dqk);
  s.o = qkv_dims(p.layout, b.o, B, Hq, Sq, Dv);
  if (p.paged_kv) {
    s.paged = true;
    s.page_size = p.paged_kv->page_size;
    s.max_pages = g.max_pages;
    // [pages, page_size, h, d] in cuDNN's container order (pages, h, page_size, d).
    s.k = {{b.pages, Hkv, s.page_size, Dqk}, {b.k[0], b.k[2], b.k[1], 1}};
    s.v = {{b.pages, Hkv, s.page_size, Dv}, {b.v[0], b.v[2], b.v[1], 1}};
  } else {
    s.k = qkv_dims(p.layout, b.k, B, Hkv, Sk, Dqk);
    s.v = qkv_dims(p.layout, b.v, B, Hkv, Sk, Dv);
  }
  for (Dims4* t : {&s.q, &s.k, &s.v, &s.o}) fix_broadcast_strides(*t);
  s.scale = p.softmax_scale();
  const Window w = p.effective_window();
  s.window_left = w.left;
  s.window_right = w.right;
  s.padded = needs_padding_mask(p);
  s.ragged = thd;
  s.top_left = !s.padded && p.seqlen_q == p.seqlen_k;
  s.stats = p.return_lse;
  s.stats_ragged = thd && s.stats && stats_ragged;
  s.stats_dims.dim = {B, Hq, Sq, 1};
  if (!thd)
    s.stats_dims.stride = {b.lse[0], b.lse[1], b.lse[2], 1};
  else if (s.stats_ragged)
    s.stats_dims.stride = {Sq * Hq, 1, Hq, 1};  // [total_q, hq], token-major
  else
    s.stats_dims.stride = {Hq * Sq, Sq, 1, 1};  // padded [b, hq, sq]
  if (s.stats) fix_broadcast_strides(s.stats_dims);
  s.sinks = p.has_sinks;
  s.sinks_stride = p.has_sinks ? (b.sinks == 0 ? 1 : b.sinks) : 1;
  if (thd) {
    // A ragged offset is cu_seqlens[b] x (token stride), and cu_seqlens[b] <=
    // batch x the longest sequence: 64-bit offsets where that bound passes int32.
    // (The bound, not the packed length of one call, so every call shares a graph.)
    const std::int64_t rows_q = std::int64_t{p.batch} * p.seqlen_q, rows_k = std::int64_t{p.batch} * p.seqlen_k;
    const std::int64_t largest = std::max({rows_q * b.q[0], rows_q * b.o[0], rows_q * Hq,
                                           p.paged_kv ? 0 : rows_k * b.k[0], p.paged_kv ? 0 : rows_k * b.v[0]});
    s.offsets_int64 = largest > kInt32Max;
  }
  return s;
}

std::vector<std::int64_t> GraphSpec::key() const {
  std::vector<std::int64_t> k = {device, sm, static_cast<std::int64_t>(io), static_cast<std::int64_t>(out)};
  for (const Dims4* t : {&q, &this->k, &v, &o, &stats_dims}) {
    k.insert(k.end(), t->dim.begin(), t->dim.end());
    k.insert(k.end(), t->stride.begin(), t->stride.end());
  }
  k.insert(k.end(), {std::bit_cast<std::int32_t>(scale), window_left, window_right, top_left, padded, ragged,
                     offsets_int64, paged, page_size, max_pages, stats, stats_ragged, sinks, sinks_stride});
  return k;
}

std::string GraphSpec::summary() const {
  auto dims = [](const Dims4& t) {
    std::string s = "[";
    for (int i = 0; i < 4; ++i) s += std::to_string(t.dim[i]) + (i < 3 ? "," : "]");
    return s;
  };
  std::string s = std::string(dtype_name(io)) + " q" + dims(q) + " k" + dims(k) + " v" + dims(v);
  if (window_left >= 0 || window_right >= 0)
    s += " window(" + std::to_string(window_left) + "," + std::to_string(window_right) + ", " +
         (top_left ? "top-left" : "bottom-right") + ")";
  if (padded) s += " padded";
  if (ragged) s += offsets_int64 ? " ragged(int64)" : " ragged(int32)";
  if (paged) s += " paged(" + std::to_string(max_pages) + "x" + std::to_string(page_size) + ")";
  if (stats) s += stats_ragged ? " stats(ragged)" : " stats";
  if (sinks) s += " sinks";
  return s + " sm_" + std::to_string(sm);
}

}  // namespace attnkit::cudnn
