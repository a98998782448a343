// The selection engine: the seven priority levels, the fallback policy, the
// model rules of design 2.3, the audit, and per-request overrides.
#include "attnkit/select/selector.hpp"

#include <algorithm>
#include <array>
#include <set>
#include <tuple>
#include <cstdio>
#include <utility>

#include "attnkit/dist/sequence_parallel.hpp"
#include "select/text_util.hpp"

namespace attnkit::select {

std::vector<std::string> platform_preference_order(const Platform& pl, const Problem& p, const LayerTraits& layer) {
  const bool half = p.dtype == DType::f16 || p.dtype == DType::bf16;
  switch (pl.kind) {
    case PlatformKind::cuda: {
      std::vector<std::string> order;
      if (layer.llm) {
        if (layer.sparse_mla) order.push_back("flashinfer_sparse_mla");
        if (pl.sm >= 120) order.insert(order.end(), {"flashinfer", "triton_attn", "sdpa"});
        else order.insert(order.end(), {"fa", "flashinfer", "triton_attn", "sdpa"});
        return order;
      }
      if (pl.sm >= 120) return {"sdpa"};
      if (pl.sm >= 100 && p.mask == MaskKind::none && half) return {"cudnn", "fa", "sdpa"};
      if (pl.sm >= 80) return {"fa", "sdpa"};
      return {"sdpa"};
    }
    case PlatformKind::rocm:
      if (layer.llm) return {"aiter", "fa", "sdpa"};
      return {"fa", "sdpa"};
    case PlatformKind::xpu: return {"xpu_flash", "sdpa"};
    case PlatformKind::musa: return {"fa", "sage_attn", "sdpa"};
    case PlatformKind::mps: return {"sdpa"};
    case PlatformKind::npu:
      if (layer.ring_sequence_parallel) return {"fa", "sdpa"};
      return {"sdpa"};
    case PlatformKind::cpu: return {"cpu_flash"};
  }
  return {};
}

std::string_view level_name(Level l) {
  switch (l) {
    case Level::per_request: return "per_request";
    case Level::global_force: return "global_force";
    case Level::component_role_override: return "component_role_override";
    case Level::component_override: return "component_override";
    case Level::engine_default: return "engine_default";
    case Level::declared_default: return "declared_default";
    case Level::auto_select: return "auto";
  }
  return "?";
}

namespace {

constexpr int kLevels = 7;
int index_of(Level l) { return static_cast<int>(l) - 1; }
Level level_at(int i) { return static_cast<Level>(i + 1); }

// A requested name at one level, with the flag that set it (for messages).
struct Request {
  std::string name;
  std::string source;
};
using LevelRequests = std::array<Request, kLevels - 1>;  // levels 1..6

struct Overrides {
  std::map<std::string, Request> component;                         // level 4
  std::map<std::pair<std::string, std::string>, Request> role;      // level 3
};

// Everything selection reads, resolved once per build.
struct Context {
  const Registry& registry;
  const Profile& profile;
  const Platform& platform;
  const DeploymentConfig& config;
  const BackendConfig& backend_config;
  DType dtype = DType::bf16;
  std::optional<DType> kv_dtype;  // nullopt: auto (same as dtype)
  Overrides overrides;
  std::string force;               // level 2
};

std::string layer_name(const ComponentSpec& c, const RoleSpec& r) { return c.name + "." + r.name; }

bool config_flag(const BackendConfig& cfg, const std::string& key) {
  if (key.empty()) return false;
  const auto it = cfg.find(key);
  return it != cfg.end() && std::holds_alternative<bool>(it->second) && std::get<bool>(it->second);
}

bool sparse_mla_arch(const Platform& p) { return p.kind == PlatformKind::cuda && (p.sm == 120 || p.sm == 121); }

Problem make_problem(const Context& ctx, const ComponentSpec& c, const RoleSpec& r) {
  Problem p;
  p.layout = r.layout;
  p.batch = 1;
  p.seqlen_k = r.seqlen;
  p.seqlen_q = r.name == "decode" ? 1 : r.seqlen;
  p.heads_q = r.heads;
  p.heads_kv = r.kv_heads;
  p.head_dim_qk = r.head_dim;
  p.head_dim_v = r.head_dim_v;
  p.dtype = ctx.dtype;
  p.mask = r.mask;
  if (r.paged_kv) p.paged_kv = PagedKv{16};
  if (c.llm && ctx.kv_dtype && *ctx.kv_dtype != ctx.dtype) p.kv_dtype = ctx.kv_dtype;
  return p;
}

bool in_resolved_list(const Context& ctx, const std::vector<std::string>& list, const std::string& canonical,
                      std::string_view written) {
  for (const std::string& item : list)
    if (item == written || item == canonical || resolve_backend_name(item, ctx.platform, ctx.registry) == canonical)
      return true;
  return false;
}

// Every reason `canonical` cannot run layer (c, r): capabilities plus the rules
// of design 2.3 that the profile switches on. Empty: it can.
Diagnostics evaluate(const Context& ctx, const std::string& canonical, std::string_view written,
                     const ComponentSpec& c, const RoleSpec& r, const Problem& p) {
  Diagnostics why;
  const Backend* backend = ctx.registry.find(canonical);
  if (backend == nullptr) {
    why.add(unknown_backend(written, ctx.registry));
    return why;
  }
  const Capabilities& caps = backend->capabilities();
  const ProfileRules& rules = ctx.profile.rules;
  const DeploymentConfig& cfg = ctx.config;
  const std::string model = ctx.profile.name;
  const std::string layer = layer_name(c, r);
  why.append(backend->check(p, ctx.platform));
  if (!c.only.empty() && !in_resolved_list(ctx, c.only, canonical, written))
    why.add("AK4003", {{"backend", canonical}, {"component", c.name}, {"model", model}, {"allowed", join(c.only)}});
  if (!c.allow_list.empty() && !in_resolved_list(ctx, c.allow_list, canonical, written))
    why.add("AK4014", {{"backend", std::string(written)}, {"component", c.name}, {"model", model},
                       {"allowed", join(c.allow_list)}});
  if (caps.sparse && !c.sparse_allowed)
    why.add("AK4002", {{"backend", canonical}, {"component", c.name}, {"model", model}});
  if (cfg.ring_degree > 1 && r.sequence_parallel) {
    const std::string ring = std::to_string(cfg.ring_degree);
    if (caps.sparse && rules.sparse_rejects_ring)
      why.add("AK4004", {{"backend", canonical}, {"ring", ring}, {"model", model}});
    else if (c.ring_needs_profile_backend && !rules.ring_backend.empty() &&
             !(rules.ring_backend == "fa" ? is_flash_family(canonical) : canonical == rules.ring_backend))
      why.add("AK4001", {{"backend", canonical}, {"layer", layer}, {"model", model}, {"ring", ring},
                         {"needed", rules.ring_backend}});
    else if (!ring_capable(caps))
      why.add("AK5003", {{"backend", canonical}, {"layer", layer}, {"ring", ring}});
  }
  if (caps.sparse && cfg.enable_torch_compile && rules.sparse_rejects_torch_compile)
    why.add("AK4005", {{"backend", canonical}, {"model", model}});
  if (caps.sparse && cfg.enable_breakable_cuda_graph && rules.sparse_rejects_breakable_graph)
    why.add("AK4006", {{"backend", canonical}, {"model", model}});
  const bool required_layer = !rules.required_backend.empty() && c.name == rules.required_component &&
                              (rules.required_role.empty() ? !r.cross : r.name == rules.required_role);
  if (required_layer && canonical != rules.required_backend && !config_flag(ctx.backend_config, rules.dense_escape_key))
    why.add("AK4007", {{"backend", canonical}, {"layer", layer}, {"model", model}, {"required", rules.required_backend},
                       {"escape", rules.dense_escape_key}});
  if (canonical == "hybrid_window_attn_h3" && !rules.linear_branch)
    why.add("AK4009", {{"model", model}});
  if (canonical == "flashinfer_sparse_mla") {
    const std::string kv(dtype_name(p.k_dtype()));
    if (!rules.sparse_mla) why.add("AK4015", {{"model", model}});
    if (p.k_dtype() != DType::f8e4m3) why.add("AK4016", {{"kv_dtype", kv}});
    if (!sparse_mla_arch(ctx.platform)) why.add("AK4017", {{"platform", ctx.platform.label()}});
  } else if (rules.sparse_mla && c.llm && p.k_dtype() == DType::f8e4m3 && sparse_mla_arch(ctx.platform)) {
    why.add("AK4018", {{"backend", canonical}, {"layer", layer}, {"platform", ctx.platform.label()}});
  }
  return why;
}

const Diagnostic* first_error(const Diagnostics& d) {
  for (const Diagnostic& x : d)
    if (x.severity == Severity::error) return &x;
  return d.empty() ? nullptr : &*d.begin();
}

std::string codes_of(const Diagnostics& d) {
  std::vector<std::string> codes;
  for (const Diagnostic& x : d)
    if (std::find(codes.begin(), codes.end(), x.code) == codes.end()) codes.push_back(x.code);
  return join(codes);
}

// The platform's preference order of design 2.1 for layer (c, r).
std::vector<std::string> preference_order(const Context& ctx, const ComponentSpec& c, const RoleSpec& r,
                                          const Problem& p) {
  return platform_preference_order(ctx.platform, p,
                                   {c.llm, ctx.profile.rules.sparse_mla,
                                    ctx.config.ring_degree > 1 && r.sequence_parallel});
}

bool is_sparse(const Context& ctx, const std::string& canonical) {
  const Backend* b = ctx.registry.find(canonical);
  return b != nullptr && b->capabilities().sparse;
}

// `why` of an explicit request for `canonical` on layer (c, r), where a
// backend without a kernel in this binary (AK2111) also names the backends
// that can run the layer here instead.
Diagnostics naming_runnable_alternatives(const Context& ctx, const std::string& canonical, const Diagnostics& why,
                                         const ComponentSpec& c, const RoleSpec& r, const Problem& p) {
  if (!why.has_code("AK2111")) return why;
  std::vector<std::string> runnable;
  for (const Backend* b : ctx.registry.all()) {
    const std::string name(b->name());
    if (!(r.cross && b->capabilities().sparse) && evaluate(ctx, name, name, c, r, p).ok()) runnable.push_back(name);
  }
  const std::string detail = "; on " + ctx.platform.label() + ", " + layer_name(c, r) + " can run " +
                             (runnable.empty() ? "no backend of this build" : join(runnable)) + " instead";
  Diagnostics out;
  for (const Diagnostic& x : why) out.add(x.code == "AK2111" ? diagnose("AK2111", {{"backend", canonical}, {"detail", detail}}) : x);
  return out;
}

// Selects one layer. Errors of an explicit request go to `diags`.
Decision select_layer(const Context& ctx, const ComponentSpec& c, const RoleSpec& r, const LevelRequests& req,
                      Diagnostics& diags) {
  Decision d;
  d.component = c.name;
  d.role = r.name;
  d.layers = r.layers;
  d.problem = make_problem(ctx, c, r);
  const std::string layer = layer_name(c, r);
  const Request& declared = req[index_of(Level::declared_default)];

  int level = 0;
  while (level < kLevels - 1 && req[level].name.empty()) ++level;
  while (level < kLevels - 1) {
    const Request& rq = req[level];
    const Level lv = level_at(level);
    const std::string canonical = resolve_backend_name(rq.name, ctx.platform, ctx.registry);
    Diagnostics why = canonical.empty() ? Diagnostics(unknown_backend(rq.name, ctx.registry))
                                        : evaluate(ctx, canonical, rq.name, c, r, d.problem);
    const bool sparse_cross = !canonical.empty() && r.cross && is_sparse(ctx, canonical);
    if (why.ok() && !sparse_cross) {
      d.backend = canonical;
      d.requested = rq.name;
      d.decided_by = lv;
      return d;
    }
    const std::string shown = canonical.empty() ? rq.name : canonical;
    if (sparse_cross && why.ok()) {
      const Diagnostic fb = diagnose("AK3003", {{"backend", shown}, {"layer", layer}, {"source", rq.source}});
      d.rejected.push_back({shown, fb.code, fb.message});
      if (d.fallback_reason.empty()) d.fallback_reason = fb.code + ": " + fb.message;
      diags.add(fb);
      // Dense instead: the declared default when it is dense, else auto.
      const bool declared_dense = !declared.name.empty() && lv != Level::declared_default &&
                                  !is_sparse(ctx, resolve_backend_name(declared.name, ctx.platform, ctx.registry));
      level = declared_dense ? index_of(Level::declared_default) : kLevels - 1;
      continue;
    }
    const Diagnostic* first = first_error(why);
    d.rejected.push_back({shown, first->code, first->message});
    const bool only_sparse_rule = why.size() == 1 && first->code == "AK4002";
    if (lv == Level::engine_default && (!declared.name.empty() || only_sparse_rule)) {
      const std::string to = !declared.name.empty() ? "its declared default " + declared.name : "auto";
      const Diagnostic fb = diagnose("AK3004", {{"backend", shown}, {"layer", layer}, {"codes", codes_of(why)},
                                                {"reason", first->message}, {"to", to}});
      if (d.fallback_reason.empty()) d.fallback_reason = fb.code + ": " + fb.message;
      diags.add(fb);
      level = !declared.name.empty() ? index_of(Level::declared_default) : kLevels - 1;
      continue;
    }
    if (lv == Level::declared_default) {
      const Diagnostic fb = diagnose("AK3005", {{"backend", shown}, {"layer", layer}, {"codes", codes_of(why)},
                                                {"reason", first->message}});
      if (d.fallback_reason.empty()) d.fallback_reason = fb.code + ": " + fb.message;
      diags.add(fb);
      level = kLevels - 1;
      continue;
    }
    // An explicit request that cannot run: an error with its reasons.
    d.backend = shown;
    d.requested = rq.name;
    d.decided_by = lv;
    d.ok = false;
    diags.add("AK3001", {{"backend", shown}, {"layer", layer}, {"level", std::string(level_name(lv))},
                         {"source", rq.source}, {"codes", codes_of(why)}});
    diags.append(naming_runnable_alternatives(ctx, shown, why, c, r, d.problem));
    return d;
  }

  // Level 7: the platform's preference order.
  std::vector<std::string> tried;
  for (const std::string& name : preference_order(ctx, c, r, d.problem)) {
    const std::string canonical = resolve_backend_name(name, ctx.platform, ctx.registry);
    if (canonical.empty() || std::find(tried.begin(), tried.end(), canonical) != tried.end()) continue;
    tried.push_back(canonical);
    Diagnostics why = evaluate(ctx, canonical, name, c, r, d.problem);
    if (why.ok() && !(r.cross && is_sparse(ctx, canonical))) {
      d.backend = canonical;
      d.decided_by = Level::auto_select;
      return d;
    }
    const Diagnostic* first = first_error(why);
    d.rejected.push_back({canonical, first ? first->code : "AK3003", first ? first->message : "sparse on cross-attention"});
  }
  d.ok = false;
  d.decided_by = Level::auto_select;
  std::string tried_text;
  for (const Rejection& x : d.rejected) tried_text += (tried_text.empty() ? "" : "; ") + x.backend + " (" + x.code + ")";
  diags.add("AK3002", {{"layer", layer}, {"platform", ctx.platform.label()},
                       {"tried", tried_text.empty() ? "no backend for this platform is registered" : tried_text}});
  return d;
}

// ---- parsing of the engine flags --------------------------------------------------

void add_component_override(Context& ctx, const std::string& comp, const std::string& role, const std::string& backend,
                            const std::string& source, Diagnostics& diags) {
  const ComponentSpec* c = ctx.profile.find_component(comp);
  if (c == nullptr) {
    diags.add("AK3006", {{"name", comp}, {"flag", source}, {"model", ctx.profile.name},
                         {"valid", join(ctx.profile.component_names())}});
    return;
  }
  if (resolve_backend_name(backend, ctx.platform, ctx.registry).empty() && c->allow_list.empty()) {
    diags.add(unknown_backend(backend, ctx.registry));
    return;
  }
  if (role.empty()) {
    if (ctx.overrides.component.count(comp))
      diags.add("AK3007", {{"entry", source}, {"detail", "component '" + comp + "' is given twice"}});
    ctx.overrides.component[comp] = {backend, source};
    return;
  }
  bool known = false;
  std::vector<std::string> roles;
  for (const RoleSpec& r : c->roles) {
    roles.push_back(r.name);
    known = known || r.name == role;
  }
  if (!known) {
    diags.add("AK3009", {{"entry", source}, {"component", comp}, {"role", role}, {"roles", join(roles)}});
    return;
  }
  ctx.overrides.role[{comp, role}] = {backend, source};
}

void parse_component_backends(Context& ctx, const std::string& text, Diagnostics& diags) {
  if (trim(text).empty()) return;
  for (const std::string& raw : split(text, ',')) {
    const std::string entry = trim(raw);
    const auto eq = entry.find('=');
    const std::string source = "--component-attention-backends " + entry;
    if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size()) {
      diags.add("AK3007", {{"entry", entry.empty() ? "(empty)" : entry},
                           {"detail", "expected component[.role]=backend"}});
      continue;
    }
    const std::string target = trim(entry.substr(0, eq));
    const std::string backend = trim(entry.substr(eq + 1));
    const auto dot = target.find('.');
    const std::string comp = target.substr(0, dot);
    const std::string role = dot == std::string::npos ? "" : target.substr(dot + 1);
    if (comp.empty() || (dot != std::string::npos && role.empty())) {
      diags.add("AK3007", {{"entry", entry}, {"detail", "expected component[.role]=backend"}});
      continue;
    }
    add_component_override(ctx, comp, role, backend, source, diags);
  }
}

// Binds --prefill/--decode-attention-backend to LLM roles and
// --mm-attention-backend to multimodal components (audited when they match none).
void bind_llm_flags(Context& ctx, Diagnostics& diags) {
  const DeploymentConfig& cfg = ctx.config;
  for (const auto& [flag, value, role] :
       {std::tuple<std::string, std::string, std::string>{"--prefill-attention-backend", cfg.prefill_attention_backend, "prefill"},
        {"--decode-attention-backend", cfg.decode_attention_backend, "decode"}}) {
    if (value.empty()) continue;
    bool bound = false;
    for (const ComponentSpec& c : ctx.profile.components)
      for (const RoleSpec& r : c.roles)
        if (c.llm && r.name == role) {
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
  if (!cfg.mm_attention_backend.empty()) {
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

LevelRequests requests_for(const Context& ctx, const ComponentSpec& c, const RoleSpec& r, const std::string& per_request) {
  LevelRequests req;
  req[index_of(Level::per_request)] = {per_request, "the per-request override " + per_request};
  req[index_of(Level::global_force)] = {ctx.force, "the global force " + ctx.force};
  if (auto it = ctx.overrides.role.find({c.name, r.name}); it != ctx.overrides.role.end())
    req[index_of(Level::component_role_override)] = it->second;
  if (auto it = ctx.overrides.component.find(c.name); it != ctx.overrides.component.end())
    req[index_of(Level::component_override)] = it->second;
  if (c.engine_default_applies && !ctx.config.attention_backend.empty())
    req[index_of(Level::engine_default)] = {ctx.config.attention_backend, "--attention-backend " + ctx.config.attention_backend};
  const std::string declared = !r.default_backend.empty() ? r.default_backend : c.default_backend;
  if (!declared.empty()) req[index_of(Level::declared_default)] = {declared, "the declared default of " + layer_name(c, r)};
  return req;
}

// Removes repeated diagnostics (the same code and message), keeping the first.
Diagnostics unique(const Diagnostics& in) {
  Diagnostics out;
  std::set<std::pair<std::string, std::string>> seen;
  for (const Diagnostic& d : in)
    if (seen.insert({d.code, d.message}).second) out.add(d);
  return out;
}

}  // namespace

// ---- Engine -----------------------------------------------------------------------

struct Engine::Impl {
  // Parses the flags into a Context; deployment-level rules go to `diags`.
  static std::optional<Context> context(Engine& e, const Profile& prof, const Platform& plat, Diagnostics& diags) {
    const DeploymentConfig& cfg = e.config_;
    Context ctx{*e.registry_, prof, plat, cfg, e.backend_config_, DType::bf16, std::nullopt, {}, {}};
    if (auto t = parse_dtype(cfg.dtype)) ctx.dtype = *t;
    else diags.add("AK3014", {{"flag", "--dtype"}, {"value", cfg.dtype}});
    if (!cfg.kv_cache_dtype.empty() && cfg.kv_cache_dtype != "auto") {
      if (auto t = parse_dtype(cfg.kv_cache_dtype)) ctx.kv_dtype = *t;
      else diags.add("AK3014", {{"flag", "--kv-cache-dtype"}, {"value", cfg.kv_cache_dtype}});
      if (!prof.is_llm())
        diags.add("AK3008", {{"source", "--kv-cache-dtype " + cfg.kv_cache_dtype},
                             {"why", "model " + prof.name + " has no KV cache (not an LLM)"}});
      else if (ctx.kv_dtype && !prof.rules.kv_cache_dtypes.empty() &&
               std::find(prof.rules.kv_cache_dtypes.begin(), prof.rules.kv_cache_dtypes.end(),
                         std::string(dtype_name(*ctx.kv_dtype))) == prof.rules.kv_cache_dtypes.end())
        diags.add("AK4019", {{"kv_dtype", cfg.kv_cache_dtype}, {"model", prof.name}, {"allowed", join(prof.rules.kv_cache_dtypes)}});
    }
    ctx.force = global_force_backend();
    if (!ctx.force.empty() && resolve_backend_name(ctx.force, plat, ctx.registry).empty())
      diags.add(unknown_backend(ctx.force, ctx.registry));
    if (!cfg.attention_backend.empty() && resolve_backend_name(cfg.attention_backend, plat, ctx.registry).empty())
      diags.add(unknown_backend(cfg.attention_backend, ctx.registry));
    parse_component_backends(ctx, cfg.component_attention_backends, diags);
    bind_llm_flags(ctx, diags);
    sequence_parallel_rules(ctx, diags);
    if (!diags.ok()) return std::nullopt;
    return ctx;
  }

  static void sequence_parallel_rules(const Context& ctx, Diagnostics& diags) {
    const DeploymentConfig& cfg = ctx.config;
    const ProfileRules& rules = ctx.profile.rules;
    diags.append(dist::check_parallel_degrees(cfg.ring_degree, cfg.ulysses_degree, cfg.sp_degree));
    if (cfg.ulysses_degree > 1) {
      for (const ComponentSpec& c : ctx.profile.components)
        for (const RoleSpec& r : c.roles)
          if (r.sequence_parallel)
            diags.append(dist::check_ulysses_heads(cfg.ulysses_degree, r.heads, r.kv_heads, layer_name(c, r)));
      if (rules.replicated_text_tokens)
        diags.add("AK5006", {{"model", ctx.profile.name}, {"ulysses", std::to_string(cfg.ulysses_degree)}});
    }
    if (rules.rejects_ring && cfg.ring_degree > 1)
      diags.add("AK4010", {{"model", ctx.profile.name}, {"ring", std::to_string(cfg.ring_degree)}});
    if (rules.rejects_torch_compile && cfg.enable_torch_compile) diags.add("AK4011", {{"model", ctx.profile.name}});
    if (rules.rejects_breakable_graph && cfg.enable_breakable_cuda_graph) diags.add("AK4012", {{"model", ctx.profile.name}});
  }

  // After selection: config validation, model notes and the audit.
  static void after_selection(const Engine& e, const Context& ctx, const std::vector<Decision>& decisions,
                              Diagnostics& diags) {
    const ProfileRules& rules = ctx.profile.rules;
    std::vector<const BackendSchema*> schemas;
    std::vector<std::string> owners;
    for (const Decision& d : decisions)
      if (const BackendSchema* s = find_schema(d.backend); s && d.ok &&
          std::find(schemas.begin(), schemas.end(), s) == schemas.end()) {
        schemas.push_back(s);
        owners.push_back(d.backend);
      }
    if (!ctx.profile.config_keys.keys.empty()) {
      schemas.push_back(&ctx.profile.config_keys);
      owners.push_back("model " + ctx.profile.name);
    }
    // Required keys bind only when the backend was selected; other keys only when given.
    if (!e.backend_config_.empty() || !schemas.empty()) {
      Diagnostics v = validate_config(e.backend_config_, schemas,
                                      owners.empty() ? "no selected backend" : join(owners));
      diags.append(v);
    }
    bool dense_smoke_used = false;
    for (const Decision& d : decisions) {
      if (d.backend == "video_sparse_attn_h3" && !rules.gated_compression && d.ok)
        diags.add("AK4013", {{"model", ctx.profile.name}});
      if (d.ok && !rules.required_backend.empty() && d.component == rules.required_component &&
          (rules.required_role.empty() || d.role == rules.required_role) && d.backend != rules.required_backend &&
          config_flag(ctx.backend_config, rules.dense_escape_key))
        dense_smoke_used = true;
    }
    if (dense_smoke_used)
      diags.add("AK4008", {{"model", ctx.profile.name}, {"escape", rules.dense_escape_key}, {"required", rules.required_backend}});
    // Audit: requests that controlled no layer.
    auto controlled = [&](Level lv, const std::string& comp, const std::string& role) {
      for (const Decision& d : decisions)
        if (d.decided_by == lv && (comp.empty() || d.component == comp) && (role.empty() || d.role == role)) return true;
      return false;
    };
    for (const auto& [comp, rq] : ctx.overrides.component)
      if (!controlled(Level::component_override, comp, ""))
        diags.add("AK3008", {{"source", rq.source}, {"why", "every layer of " + comp + " was decided by a higher level or fell back"}});
    for (const auto& [key, rq] : ctx.overrides.role)
      if (!controlled(Level::component_role_override, key.first, key.second))
        diags.add("AK3008", {{"source", rq.source}, {"why", "layer " + key.first + "." + key.second + " was decided by a higher level"}});
    if (!ctx.config.attention_backend.empty() && !controlled(Level::engine_default, "", ""))
      diags.add("AK3008", {{"source", "--attention-backend " + ctx.config.attention_backend},
                           {"why", "every layer was decided by an override, a declared default or a fallback"}});
  }

  static std::vector<Decision> select_all(const Context& ctx, const std::string& per_request, bool only_switchable,
                                          Diagnostics& diags) {
    std::vector<Decision> out;
    for (const ComponentSpec& c : ctx.profile.components) {
      if (only_switchable && !c.switchable) continue;
      for (const RoleSpec& r : c.roles) out.push_back(select_layer(ctx, c, r, requests_for(ctx, c, r, per_request), diags));
    }
    return out;
  }

  static std::vector<FlagRequest> flag_requests(const Context& ctx) {
    std::vector<FlagRequest> out;
    for (const auto& [comp, rq] : ctx.overrides.component) out.push_back({Level::component_override, comp, "", rq.source});
    for (const auto& [key, rq] : ctx.overrides.role)
      out.push_back({Level::component_role_override, key.first, key.second, rq.source});
    if (!ctx.config.attention_backend.empty())
      out.push_back({Level::engine_default, "", "", "--attention-backend " + ctx.config.attention_backend});
    return out;
  }

  static void log_components(Engine& e) {
    if (!e.log_) return;
    std::map<std::string, std::string> lines;
    std::vector<std::string> order;
    for (const Decision& d : e.result_.selections) {
      if (!lines.count(d.component)) order.push_back(d.component);
      std::string& line = lines[d.component];
      line += (line.empty() ? "" : ", ") + d.role + "=" + (d.backend.empty() ? "(none)" : d.backend) + " (" +
              std::string(level_name(d.decided_by)) + (d.ok ? "" : ", refused") +
              (d.fallback_reason.empty() ? "" : ", fallback: " + d.fallback_reason) + ")";
    }
    for (const std::string& comp : order) {
      const std::string line = "attnkit: " + e.result_.model + "/" + comp + " on " + e.result_.platform.label() + ": " + lines[comp];
      if (e.logged_.insert(line).second) e.log_(line);  // once per component (and per distinct outcome)
    }
  }

};

Engine::Engine(DeploymentConfig config, const Registry& registry)
    : config_(std::move(config)), registry_(&registry), active_(std::make_shared<std::vector<Decision>>()) {
  auto p = load_profile(config_.model);
  if (p) profile_ = std::move(*p);
  else profile_error_ = p.diagnostics();
  log_ = [](std::string_view line) { std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data()); };
}

Engine::Engine(DeploymentConfig config, Profile profile, const Registry& registry)
    : config_(std::move(config)), registry_(&registry), profile_(std::move(profile)),
      active_(std::make_shared<std::vector<Decision>>()) {
  log_ = [](std::string_view line) { std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data()); };
}

const CheckResult& Engine::build() {
  result_ = CheckResult{};
  flag_requests_.clear();
  prepared_cache_.clear();
  Diagnostics diags;
  if (config_.model.empty() && !profile_) diags.add("AK3015", {});
  else diags.append(profile_error_);
  if (config_.platform.empty()) {
    result_.platform = detect_local_platform();
  } else if (auto plat = parse_platform(config_.platform)) {
    result_.platform = *plat;
  } else {
    diags.append(plat.diagnostics());
  }
  if (auto parsed = parse_backend_config(config_.attention_backend_config)) backend_config_ = parsed->values;
  else diags.append(parsed.diagnostics());
  if (profile_) result_.model = profile_->name;
  if (diags.ok() && profile_) {
    if (auto ctx = Impl::context(*this, *profile_, result_.platform, diags)) {
      result_.selections = Impl::select_all(*ctx, "", false, diags);
      Impl::after_selection(*this, *ctx, result_.selections, diags);
      flag_requests_ = Impl::flag_requests(*ctx);
    }
  }
  result_.diagnostics = unique(diags);
  result_.ok = result_.diagnostics.ok() && std::all_of(result_.selections.begin(), result_.selections.end(),
                                                       [](const Decision& d) { return d.ok; }) &&
               !result_.selections.empty();
  active_ = std::make_shared<const std::vector<Decision>>(result_.selections);
  Impl::log_components(*this);
  return result_;
}

const Decision* Engine::decision(std::string_view component, std::string_view role) const {
  for (const Decision& d : *active_)
    if (d.component == component && d.role == role) return &d;
  return nullptr;
}

Result<PreparedRequest> Engine::prepare(const RequestOverride& request) {
  if (!result_.ok) {
    Diagnostics why = result_.diagnostics;
    if (why.ok()) why.add("AK3002", {{"layer", "(all)"}, {"platform", result_.platform.label()}, {"tried", "the engine has not been built successfully"}});
    return why;
  }
  auto with_active = [&](PreparedRequest p) {
    auto next = std::make_shared<std::vector<Decision>>(result_.selections);
    for (const Decision& d : p.decisions)
      for (Decision& x : *next)
        if (x.component == d.component && x.role == d.role) x = d;
    p.active = std::move(next);
    return p;
  };
  auto switchable = [&](const Decision& d) {
    const ComponentSpec* c = profile_->find_component(d.component);
    return c != nullptr && c->switchable;
  };
  // Request-scoped skip-softmax: valid settings, and only fa runs it.
  auto skip_softmax_refusals = [&](const std::vector<std::string>& runs) {
    Diagnostics why;
    const BackendSchema* schemas[] = {find_schema("skip_softmax")};
    why.append(validate_config(*request.skip_softmax, schemas, "request-scoped skip-softmax"));
    if (!request.skip_softmax->count("threshold_scale_factor"))
      why.add("AK3104", {{"key", "threshold_scale_factor"}, {"owner", "skip_softmax"}});
    for (const std::string& backend : runs)
      if (!is_flash_family(backend)) why.add("AK3013", {{"backend", backend}});
    return why;
  };
  if (request.backend == "none") {
    PreparedRequest p{"none", {}, nullptr};
    std::vector<std::string> runs;
    for (const Decision& d : result_.selections)
      if (switchable(d)) {
        p.decisions.push_back(d);
        runs.push_back(d.backend);
      }
    if (request.skip_softmax)
      if (Diagnostics why = skip_softmax_refusals(runs); !why.ok()) return unique(why);
    return with_active(std::move(p));
  }
  const Platform& plat = result_.platform;
  const std::string canonical = resolve_backend_name(request.backend, plat, *registry_);
  if (canonical.empty()) return Diagnostics(unknown_backend(request.backend, *registry_));
  Diagnostics why;
  if (config_.enable_torch_compile || config_.enable_breakable_cuda_graph)
    why.add("AK3011", {{"backend", request.backend},
                       {"what", config_.enable_torch_compile ? "torch.compile" : "breakable CUDA graphs"}});
  for (const Decision& d : result_.selections)
    if (switchable(d))
      if (const Backend* b = registry_->find(d.backend); b && b->capabilities().sparse) {
        why.add("AK3012", {{"backend", request.backend}, {"server", d.backend}});
        break;
      }
  const Capabilities& caps = registry_->find(canonical)->capabilities();
  if (!caps.switchable_per_request) why.add("AK3010", {{"backend", canonical}});
  if (config_.ring_degree > 1 && !ring_capable(caps))
    why.add("AK5004", {{"backend", canonical}, {"ring", std::to_string(config_.ring_degree)}});
  if (request.skip_softmax) why.append(skip_softmax_refusals({canonical}));
  if (!why.ok()) return unique(why);
  if (auto it = prepared_cache_.find(canonical); it != prepared_cache_.end()) return it->second;
  Diagnostics scratch;
  auto ctx = Impl::context(*this, *profile_, plat, scratch);
  if (!ctx) return scratch;
  Diagnostics diags;
  PreparedRequest p{canonical, Impl::select_all(*ctx, request.backend, true, diags), nullptr};
  for (const Decision& d : p.decisions)
    if (!d.ok) return unique(diags);
  p = with_active(std::move(p));
  prepared_cache_[canonical] = p;
  return p;
}

void Engine::apply(const PreparedRequest& prepared) noexcept {
  if (prepared.active) active_ = prepared.active;  // a shared_ptr copy: cannot fail
}

Result<std::optional<RequestOverride>> request_flags(const DeploymentConfig& config) {
  if (config.attention_backend_override.empty() && trim(config.skip_softmax_params).empty())
    return std::optional<RequestOverride>();
  RequestOverride request{config.attention_backend_override.empty() ? "none" : config.attention_backend_override,
                          std::nullopt};
  if (!trim(config.skip_softmax_params).empty()) {
    auto parsed = parse_backend_config(config.skip_softmax_params);
    if (!parsed) return parsed.diagnostics();
    request.skip_softmax = parsed->values;
  }
  return std::optional<RequestOverride>(std::move(request));
}

CheckResult check_deployment(const DeploymentConfig& config, const Registry& registry) {
  Engine engine(config, registry);
  engine.set_log_sink(nullptr);
  CheckResult result = engine.build();
  auto request = request_flags(config);
  if (!request) {
    result.diagnostics.append(request.diagnostics());
  } else if (*request && result.ok) {
    auto prepared = engine.prepare(**request);
    if (prepared) {
      engine.apply(*prepared);
      result.selections = engine.active();
    } else {
      result.diagnostics.append(prepared.diagnostics());
    }
  }
  result.ok = result.ok && result.diagnostics.ok();
  return result;
}

}  // namespace attnkit::select
