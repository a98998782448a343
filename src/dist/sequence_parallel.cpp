// The layout rules of sequence parallelism, shared by `attnkit check` (the
// selector) and the plans: pure functions of the configuration and the problem,
// so every rank reaches the same verdict without communicating.
#include "attnkit/dist/sequence_parallel.hpp"

#include <cstdint>
#include <string>
#include <utility>

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
