#include "attnkit/sparse/sol.hpp"

#include <algorithm>
#include <cmath>

#include "attnkit/select/selector.hpp"

namespace attnkit::sparse {

SolSettings sol_settings(const select::BackendConfig& config) {
  SolSettings s;
  if (auto b = select::config_string(config, "dense_backend")) {
    std::string name = select::normalise_backend_name(*b);
    s.dense_backend = select::is_flash_family(name) ? "fa" : name;
  }
  if (auto n = select::config_int(config, "dense_steps")) s.dense_steps = static_cast<int>(*n);
  if (auto l = select::config_layer_list(config, "dense_layers")) s.dense_layers = *l;
  if (auto t = select::config_number(config, "tau")) s.tau = *t;
  if (auto n = select::config_int(config, "sink_start")) s.sink_start = static_cast<int>(*n);
  if (auto n = select::config_int(config, "sink_tokens")) s.sink_tokens = static_cast<int>(*n);
  return s;
}

Result<std::string> sol_dense_reason(const SolSettings& s, const CallContext& where) {
  if (where.step < 0 || where.layer_index < 0)
    return Diagnostics(diagnose("AK3021", {{"backend", "sol_attn"},
                                           {"missing", where.step < 0 ? "the denoising step" : "the layer index"}}));
  if (where.step < s.dense_steps)
    return "step " + std::to_string(where.step) + " < dense_steps " + std::to_string(s.dense_steps);
  if (std::find(s.dense_layers.begin(), s.dense_layers.end(), where.layer_index) != s.dense_layers.end())
    return "layer " + std::to_string(where.layer_index) + " is in dense_layers";
  return std::string();
}

void sol_route(const SolSettings& s, std::span<const double> z, int query_block, int tokens,
               std::span<std::uint8_t> keep) {
  const std::size_t n = z.size();
  double mean = 0.0;
  for (double x : z) mean += x;
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (double x : z) var += (x - mean) * (x - mean);
  const double cut = mean + s.tau * std::sqrt(var / static_cast<double>(n));
  const int sink_end = s.sink_start + s.sink_tokens;
  for (std::size_t c = 0; c < n; ++c) {
    const int lo = static_cast<int>(c) * SolSettings::kBlock, hi = std::min(tokens, lo + SolSettings::kBlock);
    const bool sink = s.sink_tokens > 0 && lo < sink_end && hi > s.sink_start;
    keep[c] = z[c] >= cut || static_cast<int>(c) == query_block || sink;
  }
}

}  // namespace attnkit::sparse
