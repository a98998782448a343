// The layout rules of sequence parallelism, shared by `attnkit check` (the
// selector) and the plans: pure functions of the configuration and the problem,
// so every rank reaches the same verdict without communicating.
#include "attnkit/dist/sequence_parallel.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attnkit::dist {

Diagnostics check_parallel_degrees(int ring_degree, int ulysses_degree, std::optional<int> sp_degree) {
  Diagnostics out;
  for (const auto& [flag, value] : {std::pair<std::string, int>{"--ring-degree", ring_degree},
                                    {"--ulysses-degree", ulysses_degree},
                                    {"--sp-degree", sp_degree.value_or(1)}})
    if (value < 1) out.add("AK5005", {{"flag", flag}, {"value", std::to_string(value)}});
  const std::int64_t product = std::int64_t{ring_degree} * ulysses_degree;  // 64 bits: 65536 * 65536 does not wrap
  if (sp_degree && *sp_degree >= 1 && ring_degree >= 1 && ulysses_degree >= 1 && *sp_degree != product)
    out.add("AK5001", {{"sp", std::to_string(*sp_degree)}, {"ring", std::to_string(ring_degree)},
                       {"ulysses", std::to_string(ulysses_degree)}, {"product", std::to_string(product)}});
  if (product > INT32_MAX)  // SequenceParallel::sp_degree() and world sizes are ints
    out.add("AK1012", {{"what", "ring_degree * ulysses_degree"}, {"value", std::to_string(product)},
                       {"limit", std::to_string(INT32_MAX)}});
  return out;
}

Diagnostics check_ulysses_heads(int ulysses_degree, int heads, int kv_heads, std::string_view layer) {
  if (ulysses_degree <= 1 || (heads % ulysses_degree == 0 && kv_heads % ulysses_degree == 0)) return {};
  return diagnose("AK5002", {{"ulysses", std::to_string(ulysses_degree)}, {"layer", std::string(layer)},
                             {"heads", std::to_string(heads)}, {"kv_heads", std::to_string(kv_heads)}});
}

Result<int> attention_tp_size(int tp_size, int dp_size, bool dp_attention) {
  Diagnostics out;
  for (const auto& [flag, value] : {std::pair<std::string, int>{"--tp-size", tp_size}, {"--dp-size", dp_size}})
    if (value < 1) out.add("AK5005", {{"flag", flag}, {"value", std::to_string(value)}});
  if (!out.ok()) return out;
  if (!dp_attention) return tp_size;  // plain data parallelism replicates the whole model
  if (tp_size % dp_size != 0)
    return diagnose("AK5014", {{"tp", std::to_string(tp_size)}, {"dp", std::to_string(dp_size)}});
  return tp_size / dp_size;
}

namespace {

// SGLang's split of the kv heads: kv_heads / tp when tp divides them, one per
// rank when tp is a multiple of them (each kv head replicated tp / kv_heads times).
bool kv_heads_split(int tp, int kv_heads) {
  return kv_heads >= 1 && (kv_heads >= tp ? kv_heads % tp == 0 : tp % kv_heads == 0);
}

}  // namespace

Result<RankHeads> tensor_parallel_heads(int tp, int heads, int kv_heads, std::string_view layer) {
  if (tp < 1) return diagnose("AK5005", {{"flag", "--tp-size"}, {"value", std::to_string(tp)}});
  if (heads % tp == 0 && kv_heads_split(tp, kv_heads)) return RankHeads{heads / tp, std::max(1, kv_heads / tp)};
  // The sizes that work are divisors of the q heads: found in pairs up to sqrt(heads).
  std::vector<int> sizes;
  for (int t = 1; t <= heads / t; ++t)
    if (heads % t == 0)
      for (int d : {t, heads / t})
        if (kv_heads_split(d, kv_heads) && std::find(sizes.begin(), sizes.end(), d) == sizes.end()) sizes.push_back(d);
  std::sort(sizes.begin(), sizes.end());
  std::string valid;
  for (int d : sizes) valid += (valid.empty() ? "" : ", ") + std::to_string(d);
  const std::string why = heads % tp != 0 ? std::to_string(heads) + " q heads are not a multiple of " + std::to_string(tp)
                                          : std::to_string(kv_heads) + " kv heads neither split into " +
                                                std::to_string(tp) + " parts nor replicate over them";
  return diagnose("AK5013", {{"tp", std::to_string(tp)}, {"layer", std::string(layer)},
                             {"heads", std::to_string(heads)}, {"kv_heads", std::to_string(kv_heads)},
                             {"why", why}, {"valid", valid.empty() ? "none" : valid}});
}

Diagnostics check_world_size(const SequenceParallel& sp, int world_size) {
  if (world_size == sp.sp_degree()) return {};
  return diagnose("AK5007", {{"size", std::to_string(world_size)}, {"ring", std::to_string(sp.ring_degree)},
                             {"ulysses", std::to_string(sp.ulysses_degree)}, {"sp", std::to_string(sp.sp_degree())}});
}

Diagnostics check_sequence_parallel(const Problem& p, const SequenceParallel& sp, int world_size) {
  Diagnostics out = check_parallel_degrees(sp.ring_degree, sp.ulysses_degree, std::nullopt);
  if (!out.ok()) return out;
  out.append(check_world_size(sp, world_size));
  out.append(check_ulysses_heads(sp.ulysses_degree, p.heads_q, p.heads_kv, "this call"));
  auto refuse = [&](std::string what, std::string reason) {
    out.add("AK5008", {{"what", std::move(what)}, {"reason", std::move(reason)}});
  };
  if (p.paged_kv) refuse("a paged KV cache", "the sequence is split across ranks; page the KV cache per rank instead");
  if (p.has_gate)
    refuse("a gate input (Problem::has_gate)",
           "the gated backends' gate is not split with the sequence and heads yet; run those layers without sequence "
           "parallelism");
  if (p.mask == MaskKind::custom)
    refuse("a custom mask", "masks given as tensors are not split with the sequence; use causal, a sliding window or none");
  if (p.block_sparse)
    refuse("block-sparse lists", "lists given as tensors are not split with the sequence; use causal, a sliding window or none");
  if (p.diagonal_offsets) refuse("diagonal offsets", "the plan sets the shards' diagonals itself");
  if (p.k_dtype() != p.dtype) refuse("a KV dtype other than q's", "q, k and v travel in one packed buffer of one dtype");
  const int text = sp.replicated_tokens;
  if (text < 0 || (p.layout != Layout::thd && (text > p.seqlen_q || text > p.seqlen_k)))
    refuse("replicated_tokens = " + std::to_string(text), "it must lie in [0, the sequence length]");
  if (text > 0 && p.mask != MaskKind::none)
    refuse("replicated text tokens with a " + std::string(mask_kind_name(p.mask)) + " mask",
           "joint attention is unmasked");
  if (text > 0 && p.layout == Layout::thd)
    refuse("replicated text tokens in the packed (thd) layout", "joint attention uses bshd or bhsd");
  const bool positional = p.mask == MaskKind::causal || p.mask == MaskKind::sliding_window;
  if (sp.ring_degree > 1 && positional && p.layout != Layout::thd && p.seqlen_q != p.seqlen_k)
    refuse("ring attention with a " + std::string(mask_kind_name(p.mask)) + " mask and seqlen_q != seqlen_k",
           "the shards' diagonals are those of self-attention");
  return out;
}

}  // namespace attnkit::dist
