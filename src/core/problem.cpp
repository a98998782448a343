#include "attnkit/core/problem.hpp"

#include <cmath>
#include <fmt/format.h>

namespace attnkit {

std::string_view layout_name(Layout l) {
  switch (l) {
    case Layout::bshd: return "bshd";
    case Layout::bhsd: return "bhsd";
    case Layout::thd: return "thd";
  }
  return "?";
}

std::optional<Layout> parse_layout(std::string_view s) {
  if (s == "bshd") return Layout::bshd;
  if (s == "bhsd") return Layout::bhsd;
  if (s == "thd") return Layout::thd;
  return std::nullopt;
}

std::string_view mask_kind_name(MaskKind m) {
  switch (m) {
    case MaskKind::none: return "none";
    case MaskKind::causal: return "causal";
    case MaskKind::sliding_window: return "sliding_window";
    case MaskKind::custom: return "custom";
  }
  return "?";
}

DType Problem::out_dtype() const {
  if (out_dtype_override) return *out_dtype_override;
  if (dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16) return dtype;
  return DType::bf16;
}

float Problem::softmax_scale() const {
  return scale.value_or(1.0f / std::sqrt(static_cast<float>(head_dim_qk)));
}

Window Problem::effective_window() const {
  Window w{-1, -1};
  if (mask == MaskKind::causal) w = {-1, 0};
  if (mask == MaskKind::sliding_window) w = window;
  // Every sequence has at most seqlen_q queries and seqlen_k keys, so on the
  // bottom-right diagonal a side this wide hides nothing: lo = i + sk - sq - left
  // < 0, hi > sk. (Diagonal offsets place the diagonal anywhere: sides stay.)
  if (diagonal_offsets) return w;
  if (w.left >= seqlen_k) w.left = -1;
  if (w.right >= seqlen_q) w.right = -1;
  return w;
}

double Problem::flops() const {
  double pairs = static_cast<double>(seqlen_q) * seqlen_k;
  if (mask == MaskKind::causal) pairs *= 0.5;
  return 2.0 * batch * heads_q * pairs * (static_cast<double>(head_dim_qk) + head_dim_v);
}

std::string Problem::summary() const {
  std::string s = fmt::format("{} b{} sq{} sk{} hq{} hkv{} d{}", layout_name(layout), batch, seqlen_q, seqlen_k,
                              heads_q, heads_kv, head_dim_qk);
  if (head_dim_v != head_dim_qk) s += fmt::format("/{}", head_dim_v);
  s += fmt::format(" {}", dtype_name(dtype));
  if (kv_dtype && *kv_dtype != dtype) s += fmt::format(" kv:{}", dtype_name(*kv_dtype));
  s += fmt::format(" mask:{}", mask_kind_name(mask));
  if (mask == MaskKind::sliding_window) s += fmt::format("({},{})", window.left, window.right);
  if (block_sparse)
    s += fmt::format(" block-sparse:{}x{}[b{},h{}]", block_sparse->block_q, block_sparse->block_k,
                     block_sparse->batch, block_sparse->heads);
  if (softcap > 0) s += fmt::format(" softcap:{}", softcap);
  if (has_sinks) s += " sinks";
  if (has_gate) s += " gate";
  if (return_lse) s += " lse";
  if (diagonal_offsets) s += " diagonal-offsets";
  if (paged_kv) s += fmt::format(" paged:{}", paged_kv->page_size);
  if (video) s += fmt::format(" video:{}x{}x{}", video->frames, video->height, video->width);
  return s;
}

namespace {
constexpr int kMaxHeadDim = 512;

void require_at_least(Diagnostics& out, std::string_view field, long long value, long long min) {
  if (value < min)
    out.add("AK1001",
            {{"field", std::string(field)}, {"min", std::to_string(min)}, {"value", std::to_string(value)}});
}

std::string number_text(float x) { return fmt::format("{}", x); }

void too_large(Diagnostics& out, std::string what, double value, double limit) {
  out.add("AK1012", {{"what", std::move(what)}, {"value", fmt::format("{:.0f}", value)},
                     {"limit", fmt::format("{:.0f}", limit)}});
}

// Sequence lengths and tensor sizes past the limits of problem.hpp. Products
// are taken in double: exact for the comparison, and they cannot overflow.
void check_limits(Diagnostics& out, const Problem& p) {
  for (auto [field, value] : {std::pair<std::string_view, int>{"seqlen_q", p.seqlen_q}, {"seqlen_k", p.seqlen_k}})
    if (value > kMaxSeqlen) too_large(out, std::string(field), value, kMaxSeqlen);
  const double b = p.batch, sq = p.seqlen_q, sk = p.seqlen_k;
  const std::pair<std::string, double> tensors[] = {
      {"q", b * sq * p.heads_q * p.head_dim_qk},
      {"k", b * sk * p.heads_kv * p.head_dim_qk},
      {"v", b * sk * p.heads_kv * p.head_dim_v},
      {"out", b * sq * p.heads_q * p.head_dim_v},
      {"custom_mask", p.mask == MaskKind::custom ? b * p.heads_q * sq * sk : 0.0},
  };
  for (const auto& [name, elements] : tensors)
    if (elements > static_cast<double>(kMaxElements)) too_large(out, "the elements of " + name, elements, kMaxElements);
}

bool is_attention_input_type(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f8e4m3 ||
         t == DType::f8e5m2 || t == DType::i8;
}
}  // namespace

Diagnostics validate_problem(const Problem& p) {
  Diagnostics out;
  require_at_least(out, "batch", p.batch, 1);
  // THD sequences may be empty; the longest still bounds the grid, 0 is allowed there.
  const int min_len = p.layout == Layout::thd || p.paged_kv ? 0 : 1;
  require_at_least(out, "seqlen_q", p.seqlen_q, min_len);
  require_at_least(out, "seqlen_k", p.seqlen_k, min_len);
  require_at_least(out, "heads_q", p.heads_q, 1);
  require_at_least(out, "heads_kv", p.heads_kv, 1);
  require_at_least(out, "head_dim_qk", p.head_dim_qk, 1);
  require_at_least(out, "head_dim_v", p.head_dim_v, 1);
  if (p.heads_q >= 1 && p.heads_kv >= 1 && p.heads_q % p.heads_kv != 0)
    out.add("AK1002", {{"heads_q", std::to_string(p.heads_q)}, {"heads_kv", std::to_string(p.heads_kv)}});
  for (auto [field, value] : {std::pair<std::string_view, int>{"head_dim_qk", p.head_dim_qk},
                              {"head_dim_v", p.head_dim_v}})
    if (value > kMaxHeadDim)
      out.add("AK1003", {{"field", std::string(field)},
                         {"value", std::to_string(value)},
                         {"max", std::to_string(kMaxHeadDim)}});
  if (p.mask == MaskKind::sliding_window && (p.window.left < -1 || p.window.right < -1))
    out.add("AK1004", {{"left", std::to_string(p.window.left)}, {"right", std::to_string(p.window.right)}});
  const auto in_scale_range = [](float x) { return x >= kMinScale && x <= kMaxScale; };
  if (p.softcap != 0.0f && !in_scale_range(p.softcap)) out.add("AK1005", {{"value", number_text(p.softcap)}});
  if (p.scale && !in_scale_range(*p.scale)) out.add("AK1006", {{"value", number_text(*p.scale)}});
  check_limits(out, p);
  if (!is_attention_input_type(p.dtype))
    out.add("AK1007", {{"role", "q"}, {"dtype", std::string(dtype_name(p.dtype))},
                       {"reason", "inputs are fp32, fp16, bf16, fp8 or int8"}});
  if (!is_attention_input_type(p.k_dtype()))
    out.add("AK1007", {{"role", "k/v"}, {"dtype", std::string(dtype_name(p.k_dtype()))},
                       {"reason", "inputs are fp32, fp16, bf16, fp8 or int8"}});
  const DType o = p.out_dtype();
  if (o != DType::f32 && o != DType::f16 && o != DType::bf16 && o != DType::f64)
    out.add("AK1007", {{"role", "out"}, {"dtype", std::string(dtype_name(o))},
                       {"reason", "outputs are fp32, fp16 or bf16 (fp64 for the reference)"}});
  if (p.block_sparse) {
    const BlockSparse& bs = *p.block_sparse;
    // Multiples of 16: the tensor-core kernels tile blocks in 16-row steps.
    if (bs.block_q < 1 || bs.block_k < 1 || bs.block_q % 16 != 0 || bs.block_k % 16 != 0)
      out.add("AK1008", {{"block_q", std::to_string(bs.block_q)}, {"block_k", std::to_string(bs.block_k)}});
    if (bs.batch != 1 && bs.batch != p.batch)
      out.add("AK1015", {{"field", "batch"}, {"value", std::to_string(bs.batch)}, {"full", "batch"},
                         {"full_value", std::to_string(p.batch)}});
    if (bs.heads != 1 && bs.heads != p.heads_q)
      out.add("AK1015", {{"field", "heads"}, {"value", std::to_string(bs.heads)}, {"full", "heads_q"},
                         {"full_value", std::to_string(p.heads_q)}});
  }
  if (p.video) {
    const VideoGrid& v = *p.video;
    // In double: three ints multiply past int64 (tokens() is exact once this holds).
    const double tokens = static_cast<double>(v.frames) * v.height * v.width;
    if (v.frames < 1 || v.height < 1 || v.width < 1 || tokens > std::min(p.seqlen_q, p.seqlen_k))
      out.add("AK1016", {{"grid", fmt::format("{}x{}x{}", v.frames, v.height, v.width)},
                         {"tokens", fmt::format("{:.0f}", tokens)},
                         {"seqlen_q", std::to_string(p.seqlen_q)},
                         {"seqlen_k", std::to_string(p.seqlen_k)}});
  }
  if (p.paged_kv) {
    if (p.paged_kv->page_size < 1) out.add("AK1009", {{"value", std::to_string(p.paged_kv->page_size)}});
    if (p.layout == Layout::bhsd)
      out.add("AK1010", {{"reason", "a paged KV cache needs bshd or thd queries (pages are [page, heads, dim])"}});
  }
  for (auto [name, d] : {std::pair<std::string_view, float>{"q_descale", p.q_descale},
                         {"k_descale", p.k_descale}, {"v_descale", p.v_descale}})
    if (!(d > 0.0f) || std::isinf(d))
      out.add("AK1006", {{"value", std::string(name) + "=" + number_text(d)}});
  return out;
}

}  // namespace attnkit
