// The engine flags and environment variables that request backends, parsed
// into per-level requests: --component-attention-backends (levels 3 and 4),
// --prefill/--decode-attention-backend (level 3), --mm-attention-backend
// (level 4) and the backend variables of the environment (level 5).
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <tuple>

#include "select/json_text.hpp"
#include "select/selection_context.hpp"
#include "select/text_util.hpp"

namespace attnkit::select {
namespace {

// A role override names a layer kind the checkpoint builds (AK3009 otherwise).
bool role_is_built(const ComponentSpec& c, const std::string& role, std::string& why) {
  std::vector<std::string> built;
  const RoleSpec* found = nullptr;
  for (const RoleSpec& r : c.roles) {
    if (r.layers > 0) built.push_back(r.name);
    if (r.name == role) found = &r;
  }
  if (found && found->layers > 0) return true;
  why = found ? "the checkpoint builds no " + c.name + "." + role + " layer (layers: 0)"
              : "component " + c.name + " has no role '" + role + "' (roles: " + join(built) + ")";
  return false;
}

void add_component_override(Context& ctx, const std::string& comp_written, const std::string& role_written,
                            const std::string& backend, const std::string& source, Diagnostics& diags) {
  const ComponentSpec* c = ctx.profile.find_component(comp_written);
  if (c == nullptr) {
    diags.add("AK3006", {{"name", comp_written}, {"flag", source}, {"model", ctx.profile.name},
                         {"valid", join(ctx.profile.component_names())}});
    return;
  }
  if (is_auto_name(backend)) return;  // auto: no override at this level
  if (resolve_backend_name(backend, ctx.platform, ctx.registry).empty() && c->allow_list.empty()) {
    diags.add(unknown_backend(backend, ctx.registry));
    return;
  }
  if (role_written.empty()) {
    if (ctx.overrides.component.count(c->name))
      diags.add("AK3007", {{"entry", source}, {"detail", "component '" + c->name + "' is given twice"}});
    ctx.overrides.component[c->name] = {backend, source};
    return;
  }
  const std::string role = normalise_name(role_written);
  if (std::string why; !role_is_built(*c, role, why)) {
    diags.add("AK3009", {{"entry", source}, {"model", ctx.profile.name}, {"why", why}});
    return;
  }
  ctx.overrides.role[{c->name, role}] = {backend, source};
}

// One "component[.role]=backend" entry.
void add_entry(Context& ctx, const std::string& target_in, const std::string& backend_in, const std::string& source,
               Diagnostics& diags) {
  const std::string target = trim(target_in), backend = trim(backend_in);
  const auto dot = target.find('.');
  const std::string comp = target.substr(0, dot);
  const std::string role = dot == std::string::npos ? "" : target.substr(dot + 1);
  if (comp.empty() || backend.empty() || (dot != std::string::npos && role.empty())) {
    diags.add("AK3007", {{"entry", source}, {"detail", "expected component[.role]=backend"}});
    return;
  }
  add_component_override(ctx, comp, role, backend, source, diags);
}

// The engine's two forms: a JSON object {"text_encoder": "sdpa", ...} or
// comma-separated component[.role]=backend entries, empty entries skipped.
void parse_component_backends(Context& ctx, const std::string& text_in, Diagnostics& diags) {
  const std::string text = trim(text_in);
  if (text.empty()) return;
  const std::string flag = "--component-attention-backends ";
  if (text.front() == '{') {
    const JsonText parsed = parse_json_text(text);
    if (!parsed.value || !parsed.value->is_object()) {
      diags.add("AK3007", {{"entry", shortened(text)},
                           {"detail", parsed.value ? "not a JSON object" : "not a JSON object: " + parsed.problem}});
      return;
    }
    for (const auto& [key, value] : parsed.value->items()) {
      if (!value.is_string()) {
        diags.add("AK3007", {{"entry", key + ": " + shown_json(value)}, {"detail", "the backend must be a string"}});
        continue;
      }
      add_entry(ctx, key, value.get<std::string>(), flag + key + "=" + value.get<std::string>(), diags);
    }
    return;
  }
  for (const std::string& raw : split(text, ',')) {
    const std::string entry = trim(raw);
    if (entry.empty()) continue;  // "text_encoder=sdpa," : the trailing comma names nothing
    const auto eq = entry.find('=');
    if (eq == std::string::npos) {
      diags.add("AK3007", {{"entry", entry}, {"detail", "expected component[.role]=backend"}});
      continue;
    }
    add_entry(ctx, entry.substr(0, eq), entry.substr(eq + 1), flag + entry, diags);
  }
}

// Binds --prefill/--decode-attention-backend to LLM roles and
// --mm-attention-backend to multimodal components (audited when they match none).
void bind_llm_flags(Context& ctx, Diagnostics& diags) {
  const DeploymentConfig& cfg = ctx.config;
  for (const auto& [flag, value, role] :
       {std::tuple<std::string, std::string, std::string>{"--prefill-attention-backend", cfg.prefill_attention_backend, "prefill"},
        {"--decode-attention-backend", cfg.decode_attention_backend, "decode"}}) {
    if (trim(value).empty() || is_auto_name(value)) continue;
    bool bound = false;
    for (const ComponentSpec& c : ctx.profile.components)
      for (const RoleSpec& r : c.roles)
        if (c.llm && r.name == role && r.layers > 0) {
          if (resolve_backend_name(value, ctx.platform, ctx.registry).empty()) {
            diags.add(unknown_backend(value, ctx.registry));
            return;
          }
          if (!ctx.overrides.role.count({c.name, r.name})) ctx.overrides.role[{c.name, r.name}] = {value, flag + " " + value};
          bound = true;
        }
    if (!bound)
      diags.add("AK3008", {{"source", flag + " " + value}, {"why", "model " + ctx.profile.name + " has no LLM " + role + " layers"}});
  }
  if (!trim(cfg.mm_attention_backend).empty() && !is_auto_name(cfg.mm_attention_backend)) {
    bool bound = false;
    for (const ComponentSpec& c : ctx.profile.components)
      if (c.multimodal) {
        bound = true;
        if (!ctx.overrides.component.count(c.name))
          add_component_override(ctx, c.name, "", cfg.mm_attention_backend,
                                 "--mm-attention-backend " + cfg.mm_attention_backend, diags);
      }
    if (!bound)
      diags.add("AK3008", {{"source", "--mm-attention-backend " + cfg.mm_attention_backend},
                           {"why", "model " + ctx.profile.name + " has no multimodal component"}});
  }
}

// The first of `names` set in the environment to a name other than auto.
Request environment_request(const Context& ctx, std::initializer_list<const char*> names, Diagnostics& diags) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (value == nullptr || trim(value).empty()) continue;
    if (is_auto_name(value)) return {};
    if (resolve_backend_name(value, ctx.platform, ctx.registry).empty()) {
      diags.add(unknown_backend(value, ctx.registry));
      return {};
    }
    return {trim(value), std::string(name) + "=" + trim(value) + " (environment)"};
  }
  return {};
}

}  // namespace

void parse_requests(Context& ctx, Diagnostics& diags) {
  EngineDefaults& level5 = ctx.engine_default;
  if (const std::string& flag = ctx.config.attention_backend; !trim(flag).empty() && !is_auto_name(flag)) {
    if (resolve_backend_name(flag, ctx.platform, ctx.registry).empty()) diags.add(unknown_backend(flag, ctx.registry));
    level5.flag = {trim(flag), "--attention-backend " + trim(flag)};
  }
  parse_component_backends(ctx, ctx.config.component_attention_backends, diags);
  bind_llm_flags(ctx, diags);
  if (ctx.config.read_environment) {  // below the flags: read only what they leave unset
    if (level5.flag.name.empty()) {
      level5.attnkit = environment_request(ctx, {"ATTNKIT_ATTENTION_BACKEND"}, diags);
      level5.diffusion = environment_request(ctx, {"SGLANG_DIFFUSION_ATTENTION_BACKEND"}, diags);
    }
    level5.mm = environment_request(ctx, {"ATTNKIT_MM_ATTENTION_BACKEND", "SGLANG_MM_ATTENTION_BACKEND"}, diags);
  }
}

const Request* role_request(const Context& ctx, const ComponentSpec& c, const RoleSpec& r) {
  auto it = ctx.overrides.role.find({c.name, r.name});
  if (it == ctx.overrides.role.end() && c.name.ends_with("_2"))
    it = ctx.overrides.role.find({c.name.substr(0, c.name.size() - 2), r.name});
  return it == ctx.overrides.role.end() ? nullptr : &it->second;
}

const Request* component_request(const Context& ctx, const ComponentSpec& c) {
  auto it = ctx.overrides.component.find(c.name);
  // Two-transformer video models: transformer_2 follows the transformer entry unless named.
  if (it == ctx.overrides.component.end() && c.name.ends_with("_2"))
    it = ctx.overrides.component.find(c.name.substr(0, c.name.size() - 2));
  return it == ctx.overrides.component.end() ? nullptr : &it->second;
}

const Request* engine_default_request(const Context& ctx, const ComponentSpec& c) {
  const EngineDefaults& level5 = ctx.engine_default;
  auto set = [](const Request& r) { return r.name.empty() ? nullptr : &r; };
  if (c.multimodal) return set(level5.mm);
  if (!c.engine_default_applies) return nullptr;
  if (const Request* r = set(level5.flag)) return r;
  if (const Request* r = set(level5.attnkit)) return r;
  return c.llm ? nullptr : set(level5.diffusion);
}

}  // namespace attnkit::select
