#pragma once
// Deployments that run (design sections 2 and 5): the selection `attnkit check`
// makes is the one that executes. A Deployment runs the whole selection for a
// model profile, the engine flags and this machine, and hands out an
// AttentionLayer for every attention layer the engine builds. A layer holds its
// Decision and the Plans of the chosen backend, one per problem shape: nothing
// is decided twice and no shape is planned twice.
//
// Per-request overrides (design 2.2) come in two phases: prepare() checks the
// request and plans its backend for every switchable layer, changing nothing
// when it fails; apply() swaps the prepared plans in and cannot fail. The
// request's context (denoising step, skip-softmax settings) and each layer's
// index reach the backend at run time (CallContext).
//
//   auto dep = runtime::Deployment::create({.model = "wan", .dtype = "fp32"});
//   if (!dep) { /* dep.diagnostics(): the same as `attnkit check` */ }
//   runtime::AttentionLayer& self0 = **(*dep)->layer("transformer", "self", 0);
//   self0.run(problem, tensors, workspace, stream);          // plans `problem` on first use
//   auto req = (*dep)->prepare({.attention_backend_override = "reference", .step = 7});
//   if (req) (*dep)->apply(*req);                             // noexcept
//
// A Deployment is driven by one thread at a time: apply() and prepare() must
// not race with run() (an engine switches requests between forward passes).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/backends/registry.hpp"
#include "attnkit/select/selector.hpp"

namespace attnkit::runtime {

namespace detail {
class PlanSet;
struct RoleSets;
}  // namespace detail

// One request of an engine (e.g. one denoising call).
struct Request {
  std::string attention_backend_override;                   // "" or "none": the deployment's own backends
  std::optional<select::BackendConfig> skip_softmax_params;  // threshold_scale_factor (> 0), start_step (>= 0)
  std::int64_t step = -1;                                    // the denoising step; -1: none
};

// What prepare() checked and planned; apply() swaps it in. Copies share it.
class PreparedRequest {
 public:
  // The canonical override ("" : the deployment's own backends) and the step.
  const std::string& backend() const;
  std::int64_t step() const;

 private:
  friend class Deployment;
  friend class AttentionLayer;
  struct State {
    std::size_t slot = 0;  // which plan sets run: 0 the deployment's own, else a prepared override's
    std::string backend;
    CallContext context;
  };
  std::shared_ptr<const State> state_;
};

class Deployment;

// One attention layer of the engine's model: (component, role, index).
class AttentionLayer {
 public:
  const std::string& component() const { return component_; }
  const std::string& role() const { return role_; }
  std::int64_t index() const { return index_; }
  // Whether per-request overrides switch this layer (the profile's `switchable`).
  bool switchable() const;

  // The decision in force: the deployment's own, or the applied request's.
  const select::Decision& decision() const;
  const Backend& backend() const;  // the backend of decision()

  // The plan for `p` under the decision in force: planned on the first call
  // with an equal Problem (by any layer of this component and role), then
  // returned from the cache. A backend that refuses `p` gives its reasons;
  // a call without the gate the checkpoint provides for the backend is AK2118.
  Result<const Plan*> plan(const Problem& p);
  // How many problem shapes the decision in force has planned.
  std::size_t planned_shapes() const;

  // Runs `t`, bound to `p`, with the plan of `p`; the backend learns the
  // request's step, its skip-softmax settings and this layer's index.
  Diagnostics run(const Problem& p, const AttentionTensors& t, Workspace ws, StreamHandle stream);

 private:
  friend class Deployment;
  AttentionLayer(const Deployment& deployment, detail::RoleSets& sets, std::string component, std::string role,
                 std::int64_t index);
  detail::PlanSet& in_force() const;
  Diagnostics missing_gate(const Problem& p) const;

  const Deployment* deployment_;
  detail::RoleSets* sets_;
  std::string component_, role_;
  std::int64_t index_;
};

class Deployment {
 public:
  using LogSink = select::Engine::LogSink;

  // Runs the selection of `config` (the flags of `attnkit check`) on this
  // machine and plans each decision's representative problem. Fails with the
  // diagnostics `check` gives (same codes, same messages), plus what only
  // execution finds: a platform that is not this machine (AK3017) and a plan
  // that fails. Request flags in `config` are prepared and applied. `log`
  // receives the decisions once per component (default: stderr).
  static Result<std::unique_ptr<Deployment>> create(select::DeploymentConfig config,
                                                    const Registry& registry = default_registry(), LogSink log = {});
  ~Deployment();
  Deployment(const Deployment&) = delete;
  Deployment& operator=(const Deployment&) = delete;

  // The deployment's own decisions and the warnings of its selection.
  const select::CheckResult& selection() const { return engine_.result(); }
  const Platform& platform() const { return engine_.result().platform; }
  const select::Profile& profile() const { return *engine_.profile(); }
  const Registry& registry() const { return *registry_; }

  // Layer `index` of (component, role): made on the first call, the same
  // object after. Names outside the profile, or an index past the role's
  // layer count, are refused (AK3018).
  Result<AttentionLayer*> layer(std::string_view component, std::string_view role, std::int64_t index = 0);
  std::vector<const AttentionLayer*> layers() const;

  // The audit of design 2 on the layers made so far: a flag request that
  // decided none of them (AK3008), a role override whose role has no layer
  // (AK3009). Warnings only; empty when every request controlled a layer.
  Diagnostics audit() const;

  // Phase 1: checks `request` (every refusal of design 2.2, and AK3016 when a
  // kernel would ignore its skip-softmax settings) and plans its backend for
  // every switchable layer, for each shape already planned. Changes nothing
  // when it fails. The plans of an override are kept for later requests.
  Result<PreparedRequest> prepare(const Request& request);
  // Phase 2: swaps `prepared` in. A default-constructed PreparedRequest does nothing.
  void apply(const PreparedRequest& prepared) noexcept;
  // The request in force, e.g. to restore it after a scoped request.
  PreparedRequest active() const noexcept;

 private:
  friend class AttentionLayer;
  Deployment(select::DeploymentConfig config, const Registry& registry, LogSink log);
  Diagnostics plan_decisions();
  Result<std::size_t> plan_override(const std::string& backend, const std::vector<select::Decision>& switched);
  detail::RoleSets* role_sets(std::string_view component, std::string_view role);

  const Registry* registry_;
  select::Engine engine_;
  // Per (component, role): the plan sets of the own decision and of each prepared override.
  std::map<std::pair<std::string, std::string>, std::unique_ptr<detail::RoleSets>> roles_;
  std::vector<std::string> slots_;  // [slot] the override backend ("" for slot 0)
  std::vector<std::unique_ptr<AttentionLayer>> layers_;
  PreparedRequest active_;
};

}  // namespace attnkit::runtime
