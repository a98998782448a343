#pragma once
// sol_attn (Sol-Attn): dense attention for the first dense_steps steps and
// for the dense_layers, routed tiles after (docs/sparse.md has the exact
// rule). In a routed call, per (sequence, head) and per query block of 64
// queries, the 64-token key tiles are scored by a cheap proxy
//   z_c = scale * mean(q of the block) . mean(k of tile c)
// and tile c is attended exactly when z_c >= mean(z) + tau * std(z), when it
// is the query block's own (diagonal) tile, or when it overlaps the sink
// tokens [sink_start, sink_start + sink_tokens). Every other tile joins the
// softmax as one pooled key: logit scale * q_i . mean(k) + ln(tokens), value
// mean(v). The settings are host values; the rule's arithmetic is sol_rule.hpp,
// which the CPU path and the CUDA kernels share.
#include <span>
#include <string>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/sparse/sol_rule.hpp"

namespace attnkit::sparse {

struct SolSettings {
  static constexpr int kBlock = kSolBlock;  // query block and key tile, in tokens
  // The CPU path's bounds (its routing scratch lives on the stack): 1M tokens, d 512.
  static constexpr int kMaxTiles = 16384, kMaxHeadDim = 512;
  std::string dense_backend = "fa";  // fa (the platform's flash kernel) | sage_attn
  int dense_steps = 10;
  std::vector<int> dense_layers = {0, 1};
  double tau = 1.0;
  int sink_start = 0, sink_tokens = 0;
};
// The sol_attn keys of a deployment's config (validated against its schema).
SolSettings sol_settings(const select::BackendConfig& config);
// The routing rule's part of the settings (host and device).
inline SolRule sol_rule(const SolSettings& s) { return {s.tau, s.sink_start, s.sink_tokens}; }

// Whether the call at `where` runs dense (the first steps, the dense layers);
// when it does, where.stats (if set) records it and why. A call without a
// step or a layer is refused (AK3021).
Result<bool> sol_runs_dense(const SolSettings& s, const CallContext& where);

// The routing of one query block: keep[c] for the key tiles from the proxy
// scores z (one per tile), the block's index and the sequence's keys
// (sol_route_cut, then sol_keeps per tile).
void sol_route(const SolSettings& s, std::span<const double> z, int query_block, int tokens,
               std::span<std::uint8_t> keep);

}  // namespace attnkit::sparse
