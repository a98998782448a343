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

Result<bool> sol_runs_dense(const SolSettings& s, const CallContext& where) {
  if (where.step < 0 || where.layer_index < 0)
    return Diagnostics(diagnose("AK3021", {{"backend", "sol_attn"},
                                           {"missing", where.step < 0 ? "the denoising step" : "the layer index"}}));
  std::string why;
  if (where.step < s.dense_steps)
    why = "step " + std::to_string(where.step) + " < dense_steps " + std::to_string(s.dense_steps);
  else if (std::find(s.dense_layers.begin(), s.dense_layers.end(), where.layer_index) != s.dense_layers.end())
    why = "layer " + std::to_string(where.layer_index) + " is in dense_layers";
  if (why.empty()) return false;
  if (where.stats) {
    where.stats->dense = true;
    where.stats->dense_reason = std::move(why);
  }
  return true;
}

void sol_route(const SolSettings& s, std::span<const double> z, int query_block, int tokens,
               std::span<std::uint8_t> keep) {
  const SolRule rule = sol_rule(s);
  const int n = static_cast<int>(z.size());
  const double cut = sol_route_cut(rule, z.data(), n);
  for (int c = 0; c < n; ++c) keep[c] = sol_keeps(rule, z[c], cut, c, query_block, tokens);
}

}  // namespace attnkit::sparse
