#include "attnkit/core/attention_tensors.hpp"

#include <fmt/format.h>

#include "attnkit/core/block_sparse.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace attnkit {
namespace {

std::string shape_of(std::initializer_list<std::int64_t> dims) {
  std::string out = "[";
  int i = 0;
  for (std::int64_t d : dims) out += (i++ ? ", " : "") + std::to_string(d);
  return out + "]";
}

// Checks one tensor's presence, dtype, device, rank and the sizes that are known
// (-1 = any). Returns false when it is missing or its rank is wrong, so callers
// skip checks that would index missing dimensions.
struct Expect {
  std::string_view name;
  DType dtype;
  std::vector<std::int64_t> shape;
  bool unit_last_stride = true;
};

// Elements of t, in double: exact for the comparison with kMaxElements and no overflow.
double element_count(const TensorView& t) {
  double n = 1.0;
  for (int i = 0; i < t.rank; ++i) n *= static_cast<double>(t.shape[i]);
  return n;
}

bool check_tensor(Diagnostics& out, const TensorView& t, const Expect& e, const Problem& p,
                  const BindingRules& rules, std::string_view why_required) {
  const std::string name(e.name);
  if (t.data == nullptr) {
    // A zero-element tensor may have a null pointer.
    bool empty = t.rank > 0 && t.numel() == 0;
    if (!empty) {
      out.add("AK1101", {{"name", name}, {"reason", std::string(why_required)}});
      return false;
    }
  }
  const auto rank = static_cast<int>(e.shape.size());
  if (t.rank < 0 || t.rank > kMaxRank || t.rank != rank) {
    out.add("AK1102", {{"name", name},
                       {"rank", std::to_string(t.rank)},
                       {"expected", std::to_string(rank)},
                       {"layout", std::string(layout_name(p.layout))}});
    return false;
  }
  bool shape_ok = true;
  for (int i = 0; i < rank; ++i)
    if (t.shape[i] < 0 || (e.shape[i] >= 0 && t.shape[i] != e.shape[i])) shape_ok = false;
  if (shape_ok && element_count(t) > static_cast<double>(kMaxElements)) {
    out.add("AK1012", {{"what", "the element count of '" + name + "' " + t.shape_string()},
                       {"value", fmt::format("{:.0f}", element_count(t))}, {"limit", std::to_string(kMaxElements)}});
    return false;
  }
  if (!shape_ok) {
    std::string expected = "[";
    for (int i = 0; i < rank; ++i)
      expected += (i ? ", " : "") + (e.shape[i] >= 0 ? std::to_string(e.shape[i]) : std::string("*"));
    out.add("AK1103", {{"name", name}, {"shape", t.shape_string()}, {"expected", expected + "]"}});
  }
  if (t.dtype != e.dtype)
    out.add("AK1104", {{"name", name},
                       {"dtype", std::string(dtype_name(t.dtype))},
                       {"expected", std::string(dtype_name(e.dtype))}});
  const bool device_ok = rules.device == DeviceKind::cpu
                             ? (t.device.kind == DeviceKind::cpu || t.device.kind == DeviceKind::cuda_host)
                             : t.device.kind == rules.device;
  if (!device_ok)
    out.add("AK1105", {{"name", name},
                       {"device", device_name(t.device)},
                       {"expected", rules.device == DeviceKind::cpu ? "cpu" : "cuda"}});
  if (e.unit_last_stride && rank > 0 && t.shape[rank - 1] > 1 && t.strides[rank - 1] != 1)
    out.add("AK1106", {{"name", name}, {"stride", std::to_string(t.strides[rank - 1])}});
  if (rules.alignment_bytes > 0 && t.data != nullptr) {
    const auto a = static_cast<std::int64_t>(rules.alignment_bytes);
    bool aligned = reinterpret_cast<std::uintptr_t>(t.data) % a == 0;
    const auto elem = static_cast<std::int64_t>(dtype_size(t.dtype));
    for (int i = 0; i + 1 < rank; ++i)
      if (t.shape[i] > 1 && (t.strides[i] * elem) % a != 0) aligned = false;
    if (!aligned) out.add("AK1107", {{"name", name}, {"alignment", std::to_string(a)}});
  }
  return shape_ok;
}

// Whether the values of an index tensor that passed check_tensor can be read
// here: int32 (a one-byte tensor read as int32 runs past its end) in host memory.
bool host_readable_index(const TensorView& t) {
  return t.dtype == DType::i32 && t.device.kind != DeviceKind::cuda && t.data != nullptr;
}

// Outputs must not overlap themselves: with the dims of size > 1 sorted by
// |stride|, each stride must reach past the span of the dims inside it. A
// tensor without elements (a dim of 0: an empty shard) has nothing to overlap.
bool overlaps_itself(const TensorView& t) {
  std::array<std::pair<std::int64_t, std::int64_t>, kMaxRank> dims{};  // (|stride|, size)
  int n = 0;
  for (int i = 0; i < t.rank; ++i)
    if (t.shape[i] == 0) return false;
  for (int i = 0; i < t.rank; ++i)
    if (t.shape[i] > 1) dims[n++] = {t.strides[i] < 0 ? -t.strides[i] : t.strides[i], t.shape[i]};
  for (int i = 1; i < n; ++i)  // insertion sort of at most kMaxRank dims
    for (int j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  std::int64_t inner_span = 1;  // elements covered by the dims already visited
  for (int i = 0; i < n; ++i) {
    if (dims[i].first < inner_span) return true;
    inner_span = dims[i].first * dims[i].second;
  }
  return false;
}

void check_output(Diagnostics& out, const TensorView& t, std::string_view name) {
  if (t.data == nullptr || !overlaps_itself(t)) return;
  std::string strides = "[";
  for (int i = 0; i < t.rank; ++i) strides += (i ? ", " : "") + std::to_string(t.strides[i]);
  out.add("AK1113", {{"name", std::string(name)}, {"strides", strides + "]"}, {"shape", t.shape_string()}});
}

// Validates cu_seqlens values when they are readable here (host memory): from
// 0, non-decreasing, within the packed tensor, and no sequence longer than the
// problem's longest (`max_len`: seqlen_q / seqlen_k, flash-attn's max_seqlen).
void check_cu_seqlens(Diagnostics& out, const TensorView& cu, std::string_view name, std::int64_t packed_len,
                      std::string_view max_name, std::int64_t max_len) {
  if (!host_readable_index(cu)) return;
  const auto* v = cu.ptr<const std::int32_t>();
  const std::int64_t n = cu.shape[0];
  const std::int64_t s = cu.strides[0];
  auto fail = [&](std::string reason) {
    out.add("AK1108", {{"name", std::string(name)}, {"reason", std::move(reason)}});
  };
  if (v[0] != 0) return fail("it must start at 0, starts at " + std::to_string(v[0]));
  for (std::int64_t i = 1; i < n; ++i)
    if (v[i * s] < v[(i - 1) * s])
      return fail("it decreases at index " + std::to_string(i) + " (" + std::to_string(v[(i - 1) * s]) +
                  " -> " + std::to_string(v[i * s]) + ")");
  if (v[(n - 1) * s] > packed_len)
    return fail("it ends at " + std::to_string(v[(n - 1) * s]) + " but the packed tensor has " +
                std::to_string(packed_len) + " tokens");
  for (std::int64_t i = 1; i < n; ++i)
    if (std::int64_t len = std::int64_t{v[i * s]} - v[(i - 1) * s]; len > max_len)
      return fail("sequence " + std::to_string(i - 1) + " has " + std::to_string(len) + " tokens, more than " +
                  std::string(max_name) + " = " + std::to_string(max_len));
}

}  // namespace

Diagnostics validate_binding(const Problem& p, const AttentionTensors& t, BindingRules rules) {
  Diagnostics out;
  const DType qt = p.dtype, kt = p.k_dtype(), ot = p.out_dtype();
  const std::int64_t B = p.batch, Sq = p.seqlen_q, Sk = p.seqlen_k, Hq = p.heads_q,
                     Hkv = p.heads_kv, Dqk = p.head_dim_qk, Dv = p.head_dim_v;
  const bool thd = p.layout == Layout::thd;
  const char* core = "q, k, v and out are always required";
  // q, k, v and out are read and written in vectors: they take the row alignment too.
  BindingRules rows = rules;
  rows.alignment_bytes = std::max(rules.alignment_bytes, rules.row_alignment_bytes);

  auto q_like = [&](std::int64_t S, std::int64_t H, std::int64_t D) -> std::vector<std::int64_t> {
    switch (p.layout) {
      case Layout::bshd: return {B, S, H, D};
      case Layout::bhsd: return {B, H, S, D};
      case Layout::thd: return {-1, H, D};
    }
    return {};
  };
  const bool q_ok = check_tensor(out, t.q, {"q", qt, q_like(Sq, Hq, Dqk)}, p, rows, core);
  if (check_tensor(out, t.out, {"out", ot, q_like(Sq, Hq, Dv)}, p, rows, core)) check_output(out, t.out, "out");
  bool k_tokens_ok = false;  // k's shape can be read (packed token count)
  if (q_ok && thd && t.out.rank == 3 && t.out.shape[0] != t.q.shape[0])
    out.add("AK1103", {{"name", "out"}, {"shape", t.out.shape_string()},
                       {"expected", shape_of({t.q.shape[0], Hq, Dv})}});

  if (p.paged_kv) {
    const std::int64_t P = p.paged_kv->page_size;
    const bool k_ok = check_tensor(out, t.k, {"k", kt, {-1, P, Hkv, Dqk}}, p, rows, core);
    const bool v_ok = check_tensor(out, t.v, {"v", kt, {-1, P, Hkv, Dv}}, p, rows, core);
    if (k_ok && v_ok && t.k.shape[0] != t.v.shape[0])
      out.add("AK1103", {{"name", "v"}, {"shape", t.v.shape_string()},
                         {"expected", shape_of({t.k.shape[0], P, Hkv, Dv})}});
    const char* why = "a paged KV cache needs block_table and seqlens_k";
    const bool bt_ok = check_tensor(out, t.block_table, {"block_table", DType::i32, {B, -1}, false}, p,
                                    rules, why);
    const bool sl_ok = check_tensor(out, t.seqlens_k, {"seqlens_k", DType::i32, {B}, false}, p, rules, why);
    if (bt_ok && sl_ok && k_ok && v_ok && host_readable_index(t.block_table) && host_readable_index(t.seqlens_k)) {
      const std::int64_t pages = t.k.shape[0], max_pages = t.block_table.shape[1];
      for (std::int64_t b = 0; b < B; ++b) {
        const std::int32_t len = t.seqlens_k.ptr<const std::int32_t>()[b * t.seqlens_k.strides[0]];
        if (len < 0 || len > max_pages * P || len > Sk) {
          const std::string limit = len > Sk && len <= max_pages * P
                                        ? " is longer than seqlen_k (the longest cached sequence) = " + std::to_string(Sk)
                                        : " does not fit in " + std::to_string(max_pages) + " pages of " + std::to_string(P);
          out.add("AK1111", {{"reason", "seqlens_k[" + std::to_string(b) + "] = " + std::to_string(len) + limit}});
          break;
        }
        bool bad = false;
        for (std::int64_t j = 0; j < (len + P - 1) / P; ++j) {
          const std::int32_t page =
              t.block_table.ptr<const std::int32_t>()[b * t.block_table.strides[0] + j * t.block_table.strides[1]];
          if (page < 0 || page >= pages) {
            out.add("AK1111", {{"reason", "block_table[" + std::to_string(b) + ", " + std::to_string(j) +
                                              "] = " + std::to_string(page) + " is not a page index below " +
                                              std::to_string(pages)}});
            bad = true;
            break;
          }
        }
        if (bad) break;
      }
    }
  } else {
    k_tokens_ok = check_tensor(out, t.k, {"k", kt, q_like(Sk, Hkv, Dqk)}, p, rows, core);
    const bool v_ok = check_tensor(out, t.v, {"v", kt, q_like(Sk, Hkv, Dv)}, p, rows, core);
    if (thd && k_tokens_ok && v_ok && t.v.shape[0] != t.k.shape[0])
      out.add("AK1103", {{"name", "v"}, {"shape", t.v.shape_string()}, {"expected", shape_of({t.k.shape[0], Hkv, Dv})}});
  }

  if (thd) {
    const char* why = "the packed (thd) layout needs cu_seqlens";
    if (check_tensor(out, t.cu_seqlens_q, {"cu_seqlens_q", DType::i32, {B + 1}, false}, p, rules, why) &&
        q_ok)
      check_cu_seqlens(out, t.cu_seqlens_q, "cu_seqlens_q", t.q.shape[0], "seqlen_q (max_seqlen_q)", Sq);
    if (!p.paged_kv &&
        check_tensor(out, t.cu_seqlens_k, {"cu_seqlens_k", DType::i32, {B + 1}, false}, p, rules, why) &&
        k_tokens_ok)
      check_cu_seqlens(out, t.cu_seqlens_k, "cu_seqlens_k", t.k.shape[0], "seqlen_k (max_seqlen_k)", Sk);
  }
  if (p.return_lse) {
    std::vector<std::int64_t> shape = thd ? std::vector<std::int64_t>{Hq, q_ok ? t.q.shape[0] : -1}
                                          : std::vector<std::int64_t>{B, Hq, Sq};
    if (check_tensor(out, t.lse, {"lse", DType::f32, shape, false}, p, rules, "return_lse is set"))
      check_output(out, t.lse, "lse");
  }
  // Sinks are read one element per head, through their stride.
  if (p.has_sinks) check_tensor(out, t.sinks, {"sinks", DType::f32, {Hq}, false}, p, rules, "has_sinks is set");
  // The gate is read one element per (token, head), through its strides.
  if (p.has_gate) {
    std::vector<std::int64_t> shape = thd ? std::vector<std::int64_t>{q_ok ? t.q.shape[0] : -1, Hq}
                                          : p.layout == Layout::bhsd ? std::vector<std::int64_t>{B, Hq, Sq}
                                                                     : std::vector<std::int64_t>{B, Sq, Hq};
    check_tensor(out, t.gate, {"gate", DType::f32, shape, false}, p, rules, "has_gate is set");
  }
  if (p.diagonal_offsets &&
      check_tensor(out, t.diagonal_offsets, {"diagonal_offsets", DType::i32, {B}, false}, p, {DeviceKind::cpu, 0},
                   "diagonal_offsets is set") &&
      host_readable_index(t.diagonal_offsets))
    for (std::int64_t b = 0; b < B; ++b)  // i + diagonal must stay an int (mask.hpp)
      if (const std::int32_t d = t.diagonal_offsets.ptr<const std::int32_t>()[b * t.diagonal_offsets.strides[0]];
          d > kMaxSeqlen || d < -kMaxSeqlen) {
        out.add("AK1012", {{"what", "diagonal_offsets[" + std::to_string(b) + "]"}, {"value", std::to_string(d)},
                           {"limit", "+-" + std::to_string(kMaxSeqlen)}});
        break;
      }
  if (p.block_sparse && p.block_sparse->block_q > 0 && p.block_sparse->block_k > 0) {
    const char* why = "a block-sparse problem needs block_offsets and block_indices";
    const std::int64_t rows = block_sparse_shape(p).rows;
    // Contiguous (unit stride): kernels index the lists directly. Read only
    // once both are int32 of the right rank and shape, in host memory.
    const bool offsets_ok = check_tensor(out, t.block_offsets, {"block_offsets", DType::i32, {rows + 1}}, p, rules, why);
    const bool indices_ok = check_tensor(out, t.block_indices, {"block_indices", DType::i32, {-1}}, p, rules, why);
    if (offsets_ok && indices_ok && host_readable_index(t.block_offsets) && t.block_indices.dtype == DType::i32)
      out.append(validate_block_sparse_lists(p, t.block_offsets, t.block_indices));
  }
  if (p.mask == MaskKind::custom)
    check_tensor(out, t.custom_mask, {"custom_mask", DType::u8, {B, Hq, Sq, Sk}, false}, p, rules,
                 "a custom mask needs custom_mask");
  return out;
}

SequenceSpan host_sequence_span(const Problem& p, const AttentionTensors& t, int b) {
  SequenceSpan s;
  if (p.layout == Layout::thd) {
    const auto* cq = t.cu_seqlens_q.ptr<const std::int32_t>();
    const std::int64_t st = t.cu_seqlens_q.strides[0];
    s.q_offset = cq[b * st];
    s.q_len = cq[(b + 1) * st] - cq[b * st];
    if (!p.paged_kv) {
      const auto* ck = t.cu_seqlens_k.ptr<const std::int32_t>();
      const std::int64_t sk = t.cu_seqlens_k.strides[0];
      s.k_offset = ck[b * sk];
      s.k_len = ck[(b + 1) * sk] - ck[b * sk];
    }
  } else {
    s.q_len = p.seqlen_q;
    s.k_len = p.seqlen_k;
  }
  if (p.paged_kv) s.k_len = t.seqlens_k.ptr<const std::int32_t>()[b * t.seqlens_k.strides[0]];
  s.diagonal = p.diagonal_offsets ? t.diagonal_offsets.ptr<const std::int32_t>()[b * t.diagonal_offsets.strides[0]]
                                  : s.k_len - s.q_len;
  return s;
}

namespace {
// Calls f(linear element index) over every element of a strided view.
template <class F>
bool for_each_offset(const TensorView& t, F&& f) {
  if (t.numel() == 0) return true;
  std::array<std::int64_t, kMaxRank> idx{};
  while (true) {
    std::int64_t off = 0;
    for (int d = 0; d < t.rank; ++d) off += idx[d] * t.strides[d];
    if (!f(off)) return false;
    int d = t.rank - 1;
    while (d >= 0 && ++idx[d] == t.shape[d]) idx[d--] = 0;
    if (d < 0) return true;
  }
}
}  // namespace

namespace {
// AK1109 for element `off` of `name` when it holds a NaN or an infinity.
bool report_nonfinite(Diagnostics& out, const TensorView& v, const char* name, std::int64_t off) {
  const double x = load_as_double(v.data, v.dtype, off);
  if (std::isfinite(x)) return false;
  out.add("AK1109", {{"name", name}, {"value", std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf")},
                     {"index", std::to_string(off)}});
  return true;
}

// The rows of a paged cache that the call reads: for each sequence b, keys
// j < seqlens_k[b] in page block_table[b, j / page_size], every kv head.
void scan_read_pages(Diagnostics& out, const Problem& p, const AttentionTensors& t, const TensorView& kv,
                     const char* name) {
  const int P = p.paged_kv->page_size;
  const int dim = static_cast<int>(kv.shape[3]);
  for (int b = 0; b < p.batch; ++b) {
    const SequenceSpan span = host_sequence_span(p, t, b);
    const auto* table = t.block_table.ptr<const std::int32_t>() + b * t.block_table.strides[0];
    for (int j = 0; j < span.k_len; ++j) {
      const std::int64_t row = table[(j / P) * t.block_table.strides[1]] * kv.strides[0] + (j % P) * kv.strides[1];
      for (int h = 0; h < p.heads_kv; ++h)
        for (int d = 0; d < dim; ++d)
          if (report_nonfinite(out, kv, name, row + h * kv.strides[2] + d * kv.strides[3])) return;
    }
  }
}
}  // namespace

Diagnostics scan_nonfinite_inputs(const Problem& p, const AttentionTensors& t) {
  Diagnostics out;
  auto scan = [&](const TensorView& v, const char* name) {
    if (v.data == nullptr || !is_floating(v.dtype) || v.device.kind == DeviceKind::cuda) return;
    for_each_offset(v, [&](std::int64_t off) { return !report_nonfinite(out, v, name, off); });
  };
  scan(t.q, "q");
  if (p.paged_kv) {
    if (t.k.device.kind != DeviceKind::cuda && is_floating(t.k.dtype)) {
      scan_read_pages(out, p, t, t.k, "k");
      if (out.empty()) scan_read_pages(out, p, t, t.v, "v");
    }
  } else {
    scan(t.k, "k");
    scan(t.v, "v");
  }
  if (p.has_sinks) scan(t.sinks, "sinks");
  if (p.has_gate) scan(t.gate, "gate");
  return out;
}

Diagnostics scan_nonfinite_outputs(const Problem& p, const AttentionTensors& t, std::string_view backend) {
  Diagnostics out;
  auto scan = [&](const TensorView& v, const char* name, bool minus_inf_ok) {
    if (v.data == nullptr || v.device.kind == DeviceKind::cuda) return;
    for_each_offset(v, [&](std::int64_t off) {
      const double x = load_as_double(v.data, v.dtype, off);
      if (std::isfinite(x) || (minus_inf_ok && x == -INFINITY)) return true;
      out.add("AK1114", {{"backend", std::string(backend)},
                         {"reason", "element " + std::to_string(off) + " of " + name + " came out " +
                                        (std::isnan(x) ? "NaN" : "infinite")}});
      return false;
    });
  };
  scan(t.out, "out", false);
  if (p.return_lse) scan(t.lse, "lse", true);  // -inf: a row that sees no key
  return out;
}

}  // namespace attnkit
