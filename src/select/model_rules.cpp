// The model rules of design 2.3 as data: each rule reads a declaration of the
// profile (components' SDPA-only lists and allow-lists, where sparse attention
// runs, what ring attention needs, what the checkpoint provides and which
// layers' weights need it) and of the backend's capabilities (what it
// requires from or uses of the checkpoint). No backend is named here.
#include <algorithm>

#include "select/selection_context.hpp"
#include "select/text_util.hpp"

namespace attnkit::select {
namespace {

bool listed(const Context& ctx, const std::vector<std::string>& names, const std::string& canonical,
            std::string_view written) {
  for (const std::string& name : names)
    if (normalise_backend_name(name) == normalise_backend_name(written) ||
        names_backend(name, canonical, ctx.platform, ctx.registry))
      return true;
  return false;
}

bool contains(const std::vector<std::string>& v, std::string_view x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The backend reads the checkpoint feature (it requires or uses it).
bool consumes(const Capabilities& caps, std::string_view feature) {
  return contains(caps.requires_weights, feature) || contains(caps.uses_weights, feature);
}

std::vector<std::string> layer_weights_need(const ComponentSpec& c, const RoleSpec& r) {
  std::vector<std::string> out = c.weights_need;
  for (const std::string& f : r.weights_need)
    if (!contains(out, f)) out.push_back(f);
  return out;
}

bool config_flag(const BackendConfig& cfg, const std::string& key) {
  if (key.empty()) return false;
  const auto it = cfg.find(key);
  return it != cfg.end() && std::holds_alternative<bool>(it->second) && std::get<bool>(it->second);
}

// Registered backends that consume (or require) `feature`.
std::vector<std::string> backends_for(const Context& ctx, std::string_view feature, bool require_only) {
  std::vector<std::string> out;
  for (const Backend* b : ctx.registry.all()) {
    const Capabilities& caps = b->capabilities();
    if (require_only ? contains(caps.requires_weights, feature) : consumes(caps, feature)) out.emplace_back(b->name());
  }
  return out;
}

std::string feature_text(std::string_view feature) {
  const CheckpointFeature* f = find_checkpoint_feature(feature);
  return f ? std::string(f->description) : std::string(feature);
}

}  // namespace

Diagnostics model_rules(const Context& ctx, const Backend& backend, std::string_view written, const ComponentSpec& c,
                        const RoleSpec& r, const Problem& p) {
  Diagnostics why;
  const std::string canonical(backend.name());
  const Capabilities& caps = backend.capabilities();
  const ProfileRules& rules = ctx.profile.rules;
  const DeploymentConfig& cfg = ctx.config;
  const std::string& model = ctx.profile.name;
  const std::string layer = layer_name(c, r);
  if (!c.only.empty() && !listed(ctx, c.only, canonical, written))
    why.add("AK4003", {{"backend", canonical}, {"component", c.name}, {"model", model}, {"allowed", join(c.only)}});
  if (!c.allow_list.empty() && !listed(ctx, c.allow_list, canonical, written))
    why.add("AK4014", {{"backend", std::string(written)}, {"component", c.name}, {"model", model},
                       {"allowed", join(c.allow_list)}});
  if (caps.sparse && !c.sparse_allowed)
    why.add("AK4002", {{"backend", canonical}, {"component", c.name}, {"model", model}});
  if (cfg.ring_degree > 1 && r.sequence_parallel) {
    const std::string ring = std::to_string(cfg.ring_degree);
    if (caps.sparse && rules.sparse_rejects_ring)
      why.add("AK4004", {{"backend", canonical}, {"ring", ring}, {"model", model}});
    else if (c.ring_needs_profile_backend && !rules.ring_backend.empty() &&
             !names_backend(rules.ring_backend, canonical, ctx.platform, ctx.registry))
      why.add("AK4001", {{"backend", canonical}, {"layer", layer}, {"model", model}, {"ring", ring},
                         {"needed", rules.ring_backend}});
    else if (!ring_capable(caps))
      why.add("AK5003", {{"backend", canonical}, {"layer", layer}, {"ring", ring}});
  }
  if (caps.sparse && cfg.enable_torch_compile && rules.sparse_rejects_torch_compile)
    why.add("AK4005", {{"backend", canonical}, {"model", model}});
  if (caps.sparse && cfg.enable_breakable_cuda_graph && rules.sparse_rejects_breakable_graph)
    why.add("AK4006", {{"backend", canonical}, {"model", model}});
  // What the backend needs from the checkpoint.
  for (const std::string& f : caps.requires_weights)
    if (!ctx.profile.checkpoint.has(f)) {
      const CheckpointFeature* feature = find_checkpoint_feature(f);
      why.add(feature ? feature->missing_code : "AK4009",
              {{"model", model}, {"backend", canonical}, {"feature", feature_text(f)}});
    }
  // What these layers' weights need from the backend: one that skips it
  // computes another model (allowed only under the profile's escape key).
  for (const std::string& f : layer_weights_need(c, r))
    if (!consumes(caps, f) && !config_flag(ctx.backend_config, rules.dense_escape_key))
      why.add("AK4007", {{"backend", canonical}, {"layer", layer}, {"model", model}, {"feature", feature_text(f)},
                         {"required", join(backends_for(ctx, f, false))},
                         {"escape", rules.dense_escape_key.empty() ? "(no escape key)" : rules.dense_escape_key}});
  // Where a backend of an exclusive feature can run this layer, only it is accepted.
  for (const std::string& f : ctx.profile.checkpoint.exclusive_where_runnable) {
    if (consumes(caps, f)) continue;
    for (const std::string& name : backends_for(ctx, f, true))
      if (const Backend* b = ctx.registry.find(name); b && b->check(p, ctx.platform).ok()) {
        why.add("AK4018", {{"model", model}, {"backend", canonical}, {"layer", layer}, {"allowed", name},
                           {"platform", ctx.platform.label()}, {"feature", feature_text(f)}});
        break;
      }
  }
  return why;
}

std::string skipped_weights(const Backend& backend, const ComponentSpec& c, const RoleSpec& r) {
  for (const std::string& f : layer_weights_need(c, r))
    if (!consumes(backend.capabilities(), f)) return feature_text(f);
  return "";
}

std::vector<std::string> checkpoint_backends(const Context& ctx, const ComponentSpec& c, const RoleSpec& r) {
  std::vector<std::string> features = layer_weights_need(c, r);
  for (const std::string& f : ctx.profile.checkpoint.exclusive_where_runnable)
    if (!contains(features, f)) features.push_back(f);
  std::vector<std::string> out;
  for (const std::string& f : features)
    for (const std::string& name : backends_for(ctx, f, true))
      if (!contains(out, name)) out.push_back(name);
  return out;
}

std::string sparse_runs_dense(const Backend& backend, const RoleSpec& r, const Problem& p) {
  const Capabilities& caps = backend.capabilities();
  if (!caps.sparse) return "";
  if (r.cross) return "AK3003";
  if (caps.dense_below_seqlen > 0 && (p.seqlen_q < caps.dense_below_seqlen || p.seqlen_q != p.seqlen_k)) return "AK3020";
  return "";
}

}  // namespace attnkit::select
