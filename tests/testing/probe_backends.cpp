#include "testing/probe_backends.hpp"

#include "attnkit/backends/reference.hpp"

namespace attnkit::testing {
namespace {

class ProbePlan final : public Plan {
 public:
  ProbePlan(const Problem& p, std::string backend, ProbeLog& log) : Plan(p), backend_(std::move(backend)), log_(&log) {}
  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    return run_at({}, t, ws, stream);
  }
  Diagnostics run_at(const CallContext& where, const AttentionTensors& t, Workspace, StreamHandle) const override {
    log_->runs.push_back({backend_, where});
    return reference_attention(problem(), t);
  }

 private:
  std::string backend_;
  ProbeLog* log_;
};

class ProbeBackend final : public Backend {
 public:
  ProbeBackend(ProbeSpec spec, ProbeLog& log) : spec_(std::move(spec)), log_(&log) {
    caps_.platforms = {PlatformKind::cpu};
    caps_.dtypes = {DType::f32, DType::f16, DType::bf16};
    caps_.max_head_dim = spec_.max_head_dim;
    caps_.masks = {MaskKind::none, MaskKind::causal, MaskKind::sliding_window};
    caps_.layouts = {Layout::bshd, Layout::bhsd, Layout::thd};
    caps_.paged_kv = true;
    caps_.switchable_per_request = spec_.switchable;
    caps_.skip_softmax = spec_.skip_softmax;
    caps_.built = spec_.built;
    caps_.auto_selectable = false;
  }
  std::string_view name() const override { return spec_.name; }
  std::string_view description() const override { return "test probe: the reference, recording its calls"; }
  const Capabilities& capabilities() const override { return caps_; }
  Result<std::unique_ptr<Plan>> plan(const Problem& p, const Platform& platform) const override {
    ++log_->plans[spec_.name];
    Diagnostics why = validate_problem(p);
    why.append(check(p, platform));
    if (!caps_.built && !why.has_code("AK2111")) why.add("AK2111", {{"backend", spec_.name}, {"detail", ""}});
    if (spec_.max_plan_seqlen > 0 && p.seqlen_k > spec_.max_plan_seqlen)
      why.add("AK2109", {{"backend", spec_.name}, {"feature", "more than " + std::to_string(spec_.max_plan_seqlen) + " keys"}});
    if (!why.ok()) return why;
    return std::unique_ptr<Plan>(std::make_unique<ProbePlan>(p, spec_.name, *log_));
  }

 private:
  ProbeSpec spec_;
  ProbeLog* log_;
  Capabilities caps_;
};

}  // namespace

std::unique_ptr<Backend> make_probe_backend(ProbeSpec spec, ProbeLog& log) {
  return std::make_unique<ProbeBackend>(std::move(spec), log);
}

std::unique_ptr<Registry> make_probe_registry(ProbeLog& log, bool fa_skips) {
  auto r = std::make_unique<Registry>();
  r->add(make_probe_backend({.name = "probe"}, log));
  r->add(make_probe_backend({.name = "probe_fixed", .switchable = false}, log));
  r->add(make_probe_backend({.name = "probe_d64", .max_head_dim = 64}, log));
  r->add(make_probe_backend({.name = "probe_short", .max_plan_seqlen = 64}, log));
  r->add(make_probe_backend({.name = "probe_unbuilt", .built = false}, log));
  r->add(make_probe_backend({.name = "fa", .skip_softmax = fa_skips}, log));
  register_builtin_backends(*r);
  return r;
}

}  // namespace attnkit::testing
