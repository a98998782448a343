// Deployment and AttentionLayer: the selection engine's decisions, planned and
// run, with per-request overrides swapped in by prepare/apply.
#include "attnkit/runtime/deployment.hpp"

#include <algorithm>

#include "runtime/plan_set.hpp"
#include "select/text_util.hpp"

namespace attnkit::runtime {

using select::join;

namespace {

// The flag a Deployment hands the engine for `platform`: this machine's CPU or
// GPU. A named platform is accepted when it is this machine (cuda:sm90 on an
// H200); a name that does not parse is left for the engine, which refuses it
// exactly as `check` does.
Result<std::string> this_machine(const std::string& platform) {
  if (platform.empty() || platform == "cpu" || platform == "cuda") return platform;
  auto named = parse_platform(platform);
  if (!named || named->detected) return platform;
  std::string local;
  for (const Platform& p : detect_local_platforms()) {
    if (p.kind == named->kind && p.sm == named->sm) return std::string(p.kind == PlatformKind::cuda ? "cuda" : "cpu");
    local += (local.empty() ? "" : ", ") + p.label();
  }
  return diagnose("AK3017", {{"platform", platform}, {"local", local}});
}

// The skip-softmax settings of a request, already validated by the engine
// against the skip_softmax schema (threshold_scale_factor required).
SkipSoftmaxParams skip_softmax_of(const select::BackendConfig& config) {
  auto number = [&](const char* key, double fallback) {
    const auto it = config.find(key);
    if (it == config.end()) return fallback;
    if (const auto* i = std::get_if<std::int64_t>(&it->second)) return static_cast<double>(*i);
    if (const auto* d = std::get_if<double>(&it->second)) return *d;
    return fallback;
  };
  return {number("threshold_scale_factor", 0.0), static_cast<std::int64_t>(number("start_step", 0.0))};
}

}  // namespace

// ---- PreparedRequest ----------------------------------------------------------------

const std::string& PreparedRequest::backend() const {
  static const std::string none;
  return state_ ? state_->backend : none;
}

std::int64_t PreparedRequest::step() const { return state_ ? state_->context.step : -1; }

// ---- AttentionLayer -------------------------------------------------------------------

AttentionLayer::AttentionLayer(const Deployment& deployment, detail::RoleSets& sets, std::string component,
                               std::string role, std::int64_t index)
    : deployment_(&deployment), sets_(&sets), component_(std::move(component)), role_(std::move(role)), index_(index) {}

detail::PlanSet& AttentionLayer::in_force() const { return sets_->for_slot(deployment_->active_.state_->slot); }

bool AttentionLayer::switchable() const { return sets_->switchable; }
const select::Decision& AttentionLayer::decision() const { return in_force().decision(); }
const Backend& AttentionLayer::backend() const { return in_force().backend(); }
Result<const Plan*> AttentionLayer::plan(const Problem& p) {
  if (Diagnostics why = missing_gate(p); !why.ok()) return why;
  return in_force().plan(p);
}

// A call without the gate of a gate feature the checkpoint provides and the
// backend reads: zero gates would compute another model (AK2118).
Diagnostics AttentionLayer::missing_gate(const Problem& p) const {
  if (p.has_gate) return {};
  const Capabilities& caps = backend().capabilities();
  const select::Profile& profile = deployment_->profile();
  for (const auto* features : {&caps.requires_weights, &caps.uses_weights})
    for (const std::string& name : *features)
      if (const select::CheckpointFeature* f = select::find_checkpoint_feature(name);
          f && f->gate_input && profile.checkpoint.has(name))
        return Diagnostics(diagnose("AK2118", {{"backend", std::string(backend().name())},
                                               {"model", profile.name},
                                               {"feature", std::string(f->description)}}));
  return {};
}
std::size_t AttentionLayer::planned_shapes() const { return in_force().size(); }

Diagnostics AttentionLayer::run(const Problem& p, const AttentionTensors& t, Workspace ws, StreamHandle stream) {
  const PreparedRequest::State& request = *deployment_->active_.state_;
  if (Diagnostics why = missing_gate(p); !why.ok()) return why;
  auto plan = sets_->for_slot(request.slot).plan(p);
  if (!plan) return plan.diagnostics();
  CallContext where = request.context;
  where.layer_index = index_;
  return (*plan)->run_at(where, t, ws, stream);
}

// ---- Deployment -------------------------------------------------------------------------

Deployment::Deployment(select::DeploymentConfig config, const Registry& registry, LogSink log)
    : registry_(&registry), engine_(std::move(config), registry) {
  if (log) engine_.set_log_sink(std::move(log));
}

Deployment::~Deployment() = default;

Result<std::unique_ptr<Deployment>> Deployment::create(select::DeploymentConfig config, const Registry& registry,
                                                       LogSink log) {
  auto platform = this_machine(config.platform);
  if (!platform) return platform.diagnostics();
  config.platform = *platform;
  auto request = select::request_flags(config);
  std::unique_ptr<Deployment> d(new Deployment(config, registry, std::move(log)));
  // The diagnostics of `check` in its order: the selection's, then the request flags'.
  const select::CheckResult& selected = d->engine_.build();
  if (!selected.ok || !request) {
    Diagnostics why = selected.diagnostics;
    if (!request) why.append(request.diagnostics());
    return why;
  }
  if (Diagnostics why = d->plan_decisions(); !why.ok()) return why;
  if (*request) {
    auto prepared = d->prepare({(*request)->backend, (*request)->skip_softmax, -1});
    if (!prepared) {
      Diagnostics why = selected.diagnostics;
      why.append(prepared.diagnostics());
      return why;
    }
    d->apply(*prepared);
  }
  return d;
}

// Plans every decision's representative problem (the profile's shape of the
// role): a backend without a kernel here, or a plan that disagrees with its
// check, fails at start-up instead of at the first call.
Diagnostics Deployment::plan_decisions() {
  Diagnostics why;
  const select::CheckResult& selected = engine_.result();
  for (const select::Decision& d : selected.selections) {
    auto sets = std::make_unique<detail::RoleSets>();
    const select::ComponentSpec* c = profile().find_component(d.component);
    sets->switchable = c != nullptr && c->switchable;
    sets->by_slot.push_back(std::make_unique<detail::PlanSet>(d, *registry_->find(d.backend), selected.platform,
                                                                 engine_.backend_config()));
    if (auto plan = sets->by_slot[0]->plan(d.problem); !plan) why.append(plan.diagnostics());
    roles_[{d.component, d.role}] = std::move(sets);
  }
  slots_ = {""};
  auto own = std::make_shared<PreparedRequest::State>();
  active_.state_ = std::move(own);
  return why;
}

detail::RoleSets* Deployment::role_sets(std::string_view component, std::string_view role) {
  const auto it = roles_.find({std::string(component), std::string(role)});
  return it == roles_.end() ? nullptr : it->second.get();
}

Result<AttentionLayer*> Deployment::layer(std::string_view component, std::string_view role, std::int64_t index) {
  for (const auto& l : layers_)
    if (l->component() == component && l->role() == role && l->index() == index) return l.get();
  const select::Profile& prof = profile();
  auto refuse = [&](const std::string& detail) {
    return Diagnostics(diagnose("AK3018", {{"layer", std::string(component) + "." + std::string(role) + "[" +
                                                         std::to_string(index) + "]"},
                                           {"model", prof.name},
                                           {"detail", detail}}));
  };
  const select::ComponentSpec* c = prof.find_component(component);
  if (c == nullptr) return refuse("its components are " + join(prof.component_names()));
  std::vector<std::string> roles;
  const select::RoleSpec* r = nullptr;
  for (const select::RoleSpec& x : c->roles) {
    roles.push_back(x.name);
    if (x.name == role) r = &x;
  }
  if (r == nullptr) return refuse(c->name + " has the roles " + join(roles));
  if (index < 0 || index >= r->layers)
    return refuse(c->name + "." + r->name + " has " + std::to_string(r->layers) + " layers (indices 0 to " +
                  std::to_string(r->layers - 1) + ")");
  detail::RoleSets* sets = role_sets(component, role);
  layers_.push_back(std::unique_ptr<AttentionLayer>(
      new AttentionLayer(*this, *sets, c->name, r->name, index)));
  return layers_.back().get();
}

std::vector<const AttentionLayer*> Deployment::layers() const {
  std::vector<const AttentionLayer*> out;
  for (const auto& l : layers_) out.push_back(l.get());
  return out;
}

Diagnostics Deployment::audit() const {
  Diagnostics out;
  for (const select::FlagRequest& request : engine_.flag_requests()) {
    bool built = false, controlled = false;
    std::vector<std::string> roles_built;  // of request.component
    for (const auto& l : layers_) {
      if (!request.component.empty() && l->component() != request.component) continue;
      if (std::find(roles_built.begin(), roles_built.end(), l->role()) == roles_built.end())
        roles_built.push_back(l->role());
      if (!request.role.empty() && l->role() != request.role) continue;
      built = true;
      controlled = controlled || l->sets_->by_slot[0]->decision().decided_by == request.level;
    }
    const std::string where = request.component.empty() ? "the model"
                              : request.role.empty()    ? "component " + request.component
                                                        : request.component + "." + request.role;
    if (!built && request.level == select::Level::component_role_override)
      out.add("AK3009", {{"entry", request.source}, {"model", profile().name},
                         {"why", "no " + where + " layer was built (" +
                                     (roles_built.empty() ? "none has layers built" : "only " + join(roles_built) + " built") +
                                     ")"}});
    else if (!built)
      out.add("AK3008", {{"source", request.source}, {"why", "no layer of " + where + " was built"}});
    else if (!controlled)
      out.add("AK3008", {{"source", request.source},
                         {"why", "every built layer of " + where + " was decided by a higher level or fell back"}});
  }
  return out;
}

Result<PreparedRequest> Deployment::prepare(const Request& request) {
  const std::string& name = request.attention_backend_override;
  const bool overriding = !name.empty() && name != "none";
  std::vector<select::Decision> switched;  // the switchable layers' decisions under this request
  std::string backend;
  if (overriding || request.skip_softmax_params) {
    auto checked = engine_.prepare({overriding ? name : "none", request.skip_softmax_params});
    if (!checked) return checked.diagnostics();
    switched = checked->decisions;
    if (overriding) backend = checked->backend;
  }
  std::optional<SkipSoftmaxParams> skip;
  if (request.skip_softmax_params) {
    Diagnostics why;
    for (const select::Decision& d : switched)
      if (!registry_->find(d.backend)->capabilities().skip_softmax)
        why.add("AK3016", {{"backend", d.backend}, {"layer", d.component + "." + d.role}});
    if (!why.ok()) return why;
    skip = skip_softmax_of(*request.skip_softmax_params);
  }
  std::size_t slot = 0;
  if (overriding) {
    auto planned = plan_override(backend, switched);
    if (!planned) return planned.diagnostics();
    slot = *planned;
  }
  auto state = std::make_shared<PreparedRequest::State>();
  state->slot = slot;
  state->backend = backend;
  state->context = {request.step, -1, skip};
  PreparedRequest out;
  out.state_ = std::move(state);
  return out;
}

Result<std::size_t> Deployment::plan_override(const std::string& backend,
                                              const std::vector<select::Decision>& switched) {
  const auto known = std::find(slots_.begin(), slots_.end(), backend);
  const bool fresh = known == slots_.end();
  const std::size_t slot = static_cast<std::size_t>(known - slots_.begin());
  // Everything is planned into staging first and committed only if all of it
  // succeeded: a failing request leaves the deployment as it was.
  struct Staged {
    detail::PlanSet* set;
    Problem problem;
    std::unique_ptr<Plan> plan;
  };
  std::vector<std::unique_ptr<detail::PlanSet>> fresh_sets;  // [i] for switched[i]
  std::vector<Staged> staged;
  Diagnostics why;
  for (const select::Decision& d : switched) {
    detail::RoleSets* sets = role_sets(d.component, d.role);
    detail::PlanSet* set = nullptr;
    if (fresh) {
      fresh_sets.push_back(std::make_unique<detail::PlanSet>(d, *registry_->find(d.backend), platform(),
                                                                engine_.backend_config()));
      set = fresh_sets.back().get();
    } else {
      set = &sets->for_slot(slot);
    }
    // Every shape the role has planned, the representative problem included.
    for (const Problem& p : sets->by_slot[0]->shapes()) {
      if (set->has(p)) continue;
      auto plan = set->make(p);
      if (!plan) {
        why.append(plan.diagnostics());
        continue;
      }
      staged.push_back({set, p, std::move(*plan)});
    }
  }
  if (!why.ok()) return why;
  if (fresh) {
    slots_.push_back(backend);
    for (std::size_t i = 0; i < switched.size(); ++i) {
      detail::RoleSets* sets = role_sets(switched[i].component, switched[i].role);
      sets->by_slot.resize(slot + 1);
      sets->by_slot[slot] = std::move(fresh_sets[i]);
    }
  }
  for (Staged& s : staged) s.set->adopt(s.problem, std::move(s.plan));
  return slot;
}

void Deployment::apply(const PreparedRequest& prepared) noexcept {
  if (prepared.state_) active_.state_ = prepared.state_;  // a shared_ptr copy: cannot fail
}

PreparedRequest Deployment::active() const noexcept { return active_; }

}  // namespace attnkit::runtime
