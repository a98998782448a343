// The selection engine: the seven priority levels, the fallback policy, the
// audit, and per-request overrides. The requests per level come from
// requests.cpp, the model rules of design 2.3 from model_rules.cpp.
#include "attnkit/select/selector.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <set>
#include <utility>

#include "attnkit/dist/sequence_parallel.hpp"
#include "select/selection_context.hpp"
#include "select/text_util.hpp"

namespace attnkit::select {

std::vector<std::string> platform_preference_order(const Platform& pl, const Problem& p, const LayerTraits& layer) {
  const bool half = p.dtype == DType::f16 || p.dtype == DType::bf16;
  switch (pl.kind) {
    case PlatformKind::cuda: {
      std::vector<std::string> order;
      if (layer.llm) {
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
// The largest --page-size accepted: SGLang's pages are 1 to a few hundred
// tokens; a page past 64k tokens is a typo, not a cache layout.
constexpr int kMaxPageSize = 1 << 16;
int index_of(Level l) { return static_cast<int>(l) - 1; }
Level level_at(int i) { return static_cast<Level>(i + 1); }

using LevelRequests = std::array<Request, kLevels - 1>;  // levels 1..6

// The call one rank of the deployment makes for layer (c, r): the profile's
// shape under the deployment's dtypes, page size and tensor parallelism.
Problem make_problem(const Context& ctx, const ComponentSpec& c, const RoleSpec& r) {
  Problem p = r.problem();
  p.dtype = ctx.dtype;
  if (c.llm && ctx.kv_dtype && *ctx.kv_dtype != ctx.dtype) p.kv_dtype = ctx.kv_dtype;
  if (p.paged_kv && ctx.config.page_size) p.paged_kv->page_size = *ctx.config.page_size;
  if (ctx.attention_tp > 1)  // context() refused a split that does not work
    if (const auto rank = dist::tensor_parallel_heads(ctx.attention_tp, r.heads, r.kv_heads, layer_name(c, r))) {
      p.heads_q = rank->heads;
      p.heads_kv = rank->kv_heads;
    }
  return p;
}

// Every reason `canonical` cannot run layer (c, r): its capabilities and the
// model rules, then, when nothing else refuses it, what its plan would refuse
// under the deployment's backend config. Empty: it can.
Diagnostics evaluate(const Context& ctx, const std::string& canonical, std::string_view written,
                     const ComponentSpec& c, const RoleSpec& r, const Problem& p) {
  const Backend* backend = ctx.registry.find(canonical);
  if (backend == nullptr) return unknown_backend(written, ctx.registry);
  const Diagnostics rules = model_rules(ctx, *backend, written, c, r, p);
  // check_configured() is check() first (its refusals alone when it refuses).
  // A sparse backend on a layer it runs dense (cross-attention, too short)
  // plans nothing there: its config's geometry does not apply.
  const bool configured = rules.ok() && sparse_runs_dense(*backend, r, p).empty();
  Diagnostics why = configured ? backend->check_configured(p, ctx.platform, ctx.backend_config)
                               : backend->check(p, ctx.platform);
  why.append(rules);
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
    if (sparse_runs_dense(*b, r, p).empty() && evaluate(ctx, name, name, c, r, p).ok()) runnable.push_back(name);
  }
  const std::string detail = "; on " + ctx.platform.label() + ", " + layer_name(c, r) + " can run " +
                             (runnable.empty() ? "no backend of this build" : join(runnable)) + " instead";
  Diagnostics out;
  for (const Diagnostic& x : why) out.add(x.code == "AK2111" ? diagnose("AK2111", {{"backend", canonical}, {"detail", detail}}) : x);
  return out;
}

// The auto level's candidates for layer (c, r): the backends the checkpoint
// calls for, then the component's declared order or the platform's (design 2.1).
std::vector<std::string> preference_order(const Context& ctx, const ComponentSpec& c, const RoleSpec& r,
                                          const Problem& p) {
  std::vector<std::string> order = checkpoint_backends(ctx, c, r);
  const std::vector<std::string> rest =
      !c.auto_order.empty() ? c.auto_order
                            : platform_preference_order(ctx.platform, p, {c.llm, ctx.config.ring_degree > 1 && r.sequence_parallel});
  order.insert(order.end(), rest.begin(), rest.end());
  return order;
}

// Level 7: the first candidate that can run the layer as a sparse-or-dense
// choice of its own; "" when none can. Each refused candidate joins
// `rejected`; one refused already (at a higher level) is not tried again.
std::string auto_choice(const Context& ctx, const ComponentSpec& c, const RoleSpec& r, const Problem& p,
                        std::vector<Rejection>& rejected) {
  std::vector<std::string> tried;
  for (const Rejection& x : rejected) tried.push_back(x.backend);
  for (const std::string& name : preference_order(ctx, c, r, p))
    for (const std::string& canonical : resolve_backend_candidates(name, ctx.platform, ctx.registry)) {
      if (std::find(tried.begin(), tried.end(), canonical) != tried.end()) continue;
      tried.push_back(canonical);
      const Diagnostics why = evaluate(ctx, canonical, name, c, r, p);
      const std::string dense = sparse_runs_dense(*ctx.registry.find(canonical), r, p);
      if (why.ok() && dense.empty()) return canonical;
      const Diagnostic* first = first_error(why);
      rejected.push_back({canonical, first ? first->code : dense,
                          first ? first->message : "a sparse backend would run this layer dense"});
    }
  return "";
}

// What the request `name` runs layer (c, r) with, and why not where it cannot:
// the first of its candidates (resolve_backend_candidates) whose check passes,
// the refusals of those before it joining `rejected` (the Decision says why
// `fa` is fa2 here); else the first candidate and its reasons.
struct Resolved {
  std::string canonical;
  Diagnostics why;
};
Resolved resolve_for_layer(const Context& ctx, const std::string& name, const ComponentSpec& c, const RoleSpec& r,
                           const Problem& p, std::vector<Rejection>& rejected) {
  const std::vector<std::string> candidates = resolve_backend_candidates(name, ctx.platform, ctx.registry);
  if (candidates.empty()) return {"", Diagnostics(unknown_backend(name, ctx.registry))};
  Resolved first{candidates.front(), evaluate(ctx, candidates.front(), name, c, r, p)};
  for (std::size_t i = 1; i < candidates.size() && !first.why.ok(); ++i) {
    Diagnostics why = evaluate(ctx, candidates[i], name, c, r, p);
    if (!why.ok()) continue;
    const Diagnostic* refused = first_error(first.why);
    rejected.push_back({first.canonical, refused->code, refused->message});
    return {candidates[i], std::move(why)};
  }
  return first;
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
  auto record_fallback = [&](const Diagnostic& fb) {
    if (d.fallback_reason.empty()) d.fallback_reason = fb.code + ": " + fb.message;
    diags.add(fb);
  };

  int level = 0;
  while (level < kLevels - 1 && req[level].name.empty()) ++level;
  while (level < kLevels - 1) {
    const Request& rq = req[level];
    const Level lv = level_at(level);
    const auto [canonical, why] = resolve_for_layer(ctx, rq.name, c, r, d.problem, d.rejected);
    const std::string dense = canonical.empty() ? "" : sparse_runs_dense(*ctx.registry.find(canonical), r, d.problem);
    if (why.ok() && dense.empty()) {
      d.backend = canonical;
      d.requested = rq.name;
      d.decided_by = lv;
      d.source = rq.source;
      return d;
    }
    const std::string shown = canonical.empty() ? rq.name : canonical;
    if (!dense.empty() && why.ok()) {
      // A sparse backend on a layer it runs dense: a dense backend instead,
      // the declared default when it is dense, else auto.
      const Diagnostic fb = diagnose(dense, {{"backend", shown}, {"layer", layer}, {"source", rq.source},
                                             {"seqlen_q", std::to_string(d.problem.seqlen_q)},
                                             {"seqlen_k", std::to_string(d.problem.seqlen_k)},
                                             {"min", std::to_string(ctx.registry.find(canonical)->capabilities().dense_below_seqlen)}});
      d.rejected.push_back({shown, fb.code, fb.message});
      record_fallback(fb);
      const bool declared_dense = !declared.name.empty() && lv != Level::declared_default &&
                                  !is_sparse(ctx, resolve_backend_name(declared.name, ctx.platform, ctx.registry));
      level = declared_dense ? index_of(Level::declared_default) : kLevels - 1;
      continue;
    }
    // A sparse engine default outside the components that allow sparse
    // attention (AK4002) never applies there, whatever else its check says
    // (a kernel it lacks at this layer's head dim, say): that rule is the reason.
    const auto sparse_rule = std::find_if(why.begin(), why.end(), [](const Diagnostic& x) { return x.code == "AK4002"; });
    const bool sparse_rule_refuses = sparse_rule != why.end();
    const Diagnostic* first = sparse_rule_refuses ? &*sparse_rule : first_error(why);
    d.rejected.push_back({shown, first->code, first->message});
    // The engine default is a default, not a command for every layer, except
    // where the layer's weights need what it skips (a model rule, AK4007).
    const bool weights_refuse = why.has_code("AK4007");
    if (lv == Level::engine_default && (!declared.name.empty() || sparse_rule_refuses) && !weights_refuse) {
      const std::string to = !declared.name.empty() ? "its declared default " + declared.name : "auto";
      record_fallback(diagnose("AK3004", {{"backend", shown}, {"layer", layer}, {"codes", codes_of(why)},
                                          {"reason", first->message}, {"to", to}}));
      level = !declared.name.empty() ? index_of(Level::declared_default) : kLevels - 1;
      continue;
    }
    if (lv == Level::declared_default) {
      record_fallback(diagnose("AK3005", {{"backend", shown}, {"layer", layer}, {"codes", codes_of(why)},
                                          {"reason", first->message}}));
      level = kLevels - 1;
      continue;
    }
    // An explicit request that cannot run: an error with its reasons, and
    // what would run the layer instead.
    d.backend = shown;
    d.requested = rq.name;
    d.decided_by = lv;
    d.source = rq.source;
    d.ok = false;
    std::vector<Rejection> scratch;
    const std::string instead = auto_choice(ctx, c, r, d.problem, scratch);
    diags.add("AK3001", {{"backend", shown}, {"layer", layer}, {"level", std::string(level_name(lv))},
                         {"source", rq.source}, {"codes", codes_of(why)},
                         {"instead", instead.empty() ? "; no backend can run this layer here"
                                                     : "; " + instead + " can (the auto choice for this layer)"}});
    diags.append(naming_runnable_alternatives(ctx, shown, why, c, r, d.problem));
    return d;
  }

  // Level 7: the preference order.
  d.decided_by = Level::auto_select;
  d.backend = auto_choice(ctx, c, r, d.problem, d.rejected);
  if (!d.backend.empty()) return d;
  d.ok = false;
  std::string tried_text;
  for (const Rejection& x : d.rejected) tried_text += (tried_text.empty() ? "" : "; ") + x.backend + " (" + x.code + ")";
  diags.add("AK3002", {{"layer", layer}, {"platform", ctx.platform.label()},
                       {"tried", tried_text.empty() ? "no backend for this platform is registered" : tried_text}});
  return d;
}

LevelRequests requests_for(const Context& ctx, const ComponentSpec& c, const RoleSpec& r, const std::string& per_request) {
  LevelRequests req;
  if (!per_request.empty()) req[index_of(Level::per_request)] = {per_request, "the per-request override " + per_request};
  if (!ctx.force.empty()) req[index_of(Level::global_force)] = {ctx.force, "the global force " + ctx.force};
  if (const Request* rq = role_request(ctx, c, r)) req[index_of(Level::component_role_override)] = *rq;
  if (const Request* rq = component_request(ctx, c)) req[index_of(Level::component_override)] = *rq;
  if (const Request* rq = engine_default_request(ctx, c)) req[index_of(Level::engine_default)] = *rq;
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

// The engine runs request-scoped skip-softmax in FlashInfer's TRT-LLM
// attention kernels: Hopper sm_90 and Blackwell sm_100 / sm_103 / sm_107 only,
// fp16 or bf16, head dims 128 and 256 (AK3019 otherwise, naming where).
Diagnostics skip_softmax_support(const Platform& platform, const std::vector<Decision>& decisions, const Profile& profile) {
  constexpr int kSms[] = {90, 100, 103, 107};
  constexpr int kHeadDims[] = {128, 256};
  Diagnostics why;
  if (platform.kind != PlatformKind::cuda || std::find(std::begin(kSms), std::end(kSms), platform.sm) == std::end(kSms))
    why.add("AK3019", {{"where", "on " + platform.label()}, {"why", "the GPU is not sm_90, sm_100, sm_103 or sm_107"}});
  for (const Decision& d : decisions) {
    const ComponentSpec* c = profile.find_component(d.component);
    if (c == nullptr || !c->switchable) continue;
    const Problem& p = d.problem;
    const std::string layer = d.component + "." + d.role;
    if (std::find(std::begin(kHeadDims), std::end(kHeadDims), p.head_dim_qk) == std::end(kHeadDims))
      why.add("AK3019", {{"where", "for " + layer}, {"why", "its head dim is " + std::to_string(p.head_dim_qk)}});
    else if (p.dtype != DType::f16 && p.dtype != DType::bf16)
      why.add("AK3019", {{"where", "for " + layer}, {"why", "its dtype is " + std::string(dtype_name(p.dtype))}});
  }
  return why;
}

}  // namespace

// ---- Engine -----------------------------------------------------------------------

struct Engine::Impl {
  // Parses the flags into a Context; deployment-level rules go to `diags`.
  static std::optional<Context> context(Engine& e, const Profile& prof, const Platform& plat, Diagnostics& diags) {
    const DeploymentConfig& cfg = e.config_;
    Context ctx{*e.registry_, prof, plat, cfg, e.backend_config_, DType::bf16, std::nullopt, {}, {}, {}};
    // SGLang's default spelling: "auto" is the checkpoint's dtype, bf16 for every shipped profile.
    if (cfg.dtype == "auto") ctx.dtype = DType::bf16;
    else if (auto t = parse_dtype(cfg.dtype)) ctx.dtype = *t;
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
    parse_requests(ctx, diags);
    sequence_parallel_rules(ctx, diags);
    kv_cache_and_tensor_parallel_rules(ctx, diags);
    if (!diags.ok()) return std::nullopt;
    return ctx;
  }

  // SGLang's --page-size and tensor parallelism: the page size of the paged
  // layers, and the attention TP size that splits the heads of every component
  // of an LLM profile (decoders and vision towers alike, as SGLang shards them).
  static void kv_cache_and_tensor_parallel_rules(Context& ctx, Diagnostics& diags) {
    const DeploymentConfig& cfg = ctx.config;
    const Profile& prof = ctx.profile;
    if (cfg.page_size) {
      const std::string flag = "--page-size " + std::to_string(*cfg.page_size);
      bool paged = false;
      for (const ComponentSpec& c : prof.components)
        for (const RoleSpec& r : c.roles) paged |= r.layers > 0 && r.paged_kv;
      if (*cfg.page_size < 1 || *cfg.page_size > kMaxPageSize)
        diags.add("AK3022", {{"value", std::to_string(*cfg.page_size)}, {"limit", std::to_string(kMaxPageSize)}});
      else if (!paged)
        diags.add("AK3008", {{"source", flag}, {"why", "model " + prof.name + " has no paged KV cache"}});
    }
    const auto tp = dist::attention_tp_size(cfg.tp_size, cfg.dp_size, cfg.enable_dp_attention);
    if (!tp) {
      diags.append(tp.diagnostics());
      return;
    }
    if (*tp == 1) return;
    if (!prof.is_llm()) {
      diags.add("AK3008", {{"source", "--tp-size " + std::to_string(cfg.tp_size)},
                           {"why", "model " + prof.name + " is not an LLM (check models the tensor parallelism of LLM attention)"}});
      return;
    }
    ctx.attention_tp = *tp;
    for (const ComponentSpec& c : prof.components)
      for (const RoleSpec& r : c.roles)
        if (r.layers > 0)
          if (auto rank = dist::tensor_parallel_heads(*tp, r.heads, r.kv_heads, layer_name(c, r)); !rank)
            diags.append(rank.diagnostics());
  }

  static void sequence_parallel_rules(const Context& ctx, Diagnostics& diags) {
    const DeploymentConfig& cfg = ctx.config;
    const ProfileRules& rules = ctx.profile.rules;
    diags.append(dist::check_parallel_degrees(cfg.ring_degree, cfg.ulysses_degree, cfg.sp_degree));
    if (cfg.ulysses_degree > 1) {
      for (const ComponentSpec& c : ctx.profile.components)
        for (const RoleSpec& r : c.roles)
          if (r.layers > 0 && r.sequence_parallel)
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
    // A refused request (an error already) still owns its keys: they are not "unknown".
    for (const Decision& d : decisions)
      if (const BackendSchema* s = find_schema(d.backend); s &&
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
    // Model notes: checkpoint features a chosen backend would read but the
    // checkpoint lacks, and decisions made under the dense escape key.
    std::set<std::string> noted;
    bool escape_used = false;
    for (const Decision& d : decisions) {
      const Backend* b = d.ok ? ctx.registry.find(d.backend) : nullptr;
      if (b == nullptr) continue;
      for (const std::string& f : b->capabilities().uses_weights)
        if (!ctx.profile.checkpoint.has(f) && noted.insert(d.backend + "/" + f).second) {
          const CheckpointFeature* feature = find_checkpoint_feature(f);
          diags.add("AK4013", {{"model", ctx.profile.name}, {"backend", d.backend},
                               {"feature", feature ? std::string(feature->description) : f}});
        }
      if (escape_used || rules.dense_escape_key.empty()) continue;
      if (const ComponentSpec* c = ctx.profile.find_component(d.component))
        for (const RoleSpec& r : c->roles)
          if (const std::string skipped = r.name == d.role ? skipped_weights(*b, *c, r) : ""; !skipped.empty()) {
            diags.add("AK4008", {{"model", ctx.profile.name}, {"escape", rules.dense_escape_key}, {"backend", d.backend},
                                 {"layer", layer_name(*c, r)}, {"feature", skipped}});
            escape_used = true;
          }
    }
    // Audit: requests that controlled no layer (a decision names who decided it).
    auto controlled = [&](const Request& rq) {
      for (const Decision& d : decisions)
        if (d.source == rq.source) return true;
      return false;
    };
    for (const auto& [comp, rq] : ctx.overrides.component)
      if (!controlled(rq))
        diags.add("AK3008", {{"source", rq.source}, {"why", "every layer of " + comp + " was decided by a higher level or fell back"}});
    for (const auto& [key, rq] : ctx.overrides.role)
      if (!controlled(rq))
        diags.add("AK3008", {{"source", rq.source}, {"why", "layer " + key.first + "." + key.second + " was decided by a higher level"}});
    const EngineDefaults& level5 = ctx.engine_default;
    for (const Request* rq : {&level5.flag, &level5.attnkit, &level5.diffusion, &level5.mm})
      if (!rq->name.empty() && !controlled(*rq))
        diags.add("AK3008", {{"source", rq->source},
                             {"why", "every layer it reaches was decided by an override, a declared default or a fallback"}});
  }

  static std::vector<Decision> select_all(const Context& ctx, const std::string& per_request, bool only_switchable,
                                          Diagnostics& diags) {
    std::vector<Decision> out;
    for (const ComponentSpec& c : ctx.profile.components) {
      if (only_switchable && !c.switchable) continue;
      for (const RoleSpec& r : c.roles)
        if (r.layers > 0) out.push_back(select_layer(ctx, c, r, requests_for(ctx, c, r, per_request), diags));
    }
    return out;
  }

  static std::vector<FlagRequest> flag_requests(const Context& ctx) {
    std::vector<FlagRequest> out;
    for (const auto& [comp, rq] : ctx.overrides.component) out.push_back({Level::component_override, comp, "", rq.source});
    for (const auto& [key, rq] : ctx.overrides.role)
      out.push_back({Level::component_role_override, key.first, key.second, rq.source});
    const EngineDefaults& level5 = ctx.engine_default;
    for (const Request* rq : {&level5.flag, &level5.attnkit, &level5.diffusion, &level5.mm})
      if (!rq->name.empty()) out.push_back({Level::engine_default, "", "", rq->source});
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
  if (!config_.ignored_flags.empty()) diags.add("AK3023", {{"flags", join(config_.ignored_flags)}});
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
    // A named platform is validated as the engine runs skip-softmax; on this
    // machine the kernels' own skip_softmax capability decides (runtime::Deployment).
    if (!result_.platform.detected) why.append(skip_softmax_support(result_.platform, result_.selections, *profile_));
    return why;
  };
  if (normalise_name(request.backend) == "none") {
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
