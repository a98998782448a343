// Deployment: the selection drives execution. Every level decides what really
// runs, a shape is planned once, requests prepare (changing nothing when they
// fail) and apply (noexcept), the audit sees the layers the engine built, and
// the request's context reaches the backend. On the CPU: the default registry
// (cpu_flash, reference) and probe backends that record their calls.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "attnkit/core/host_tensor.hpp"
#include "attnkit/runtime/deployment.hpp"
#include "testing/probe_backends.hpp"
#include "testing/reference_check.hpp"

namespace attnkit::runtime {
namespace {

using select::DeploymentConfig;
using select::Level;
using testing::ProbeLog;

void quiet(std::string_view) {}

std::unique_ptr<Deployment> deploy(DeploymentConfig c, const Registry& registry = default_registry()) {
  auto d = Deployment::create(std::move(c), registry, quiet);
  EXPECT_TRUE(d.ok()) << d.diagnostics().summary();
  return d ? std::move(*d) : nullptr;
}

AttentionLayer& layer(Deployment& d, const char* component, const char* role, std::int64_t index = 0) {
  auto l = d.layer(component, role, index);
  EXPECT_TRUE(l.ok()) << l.diagnostics().summary();
  return **l;
}

// A small fp32 call of the shape the engine's toy model runs (not the profile's).
Problem small(int seqlen_k = 33, int head_dim = 64, int heads = 4) {
  Problem p;
  p.batch = 2;
  p.seqlen_q = 17;
  p.seqlen_k = seqlen_k;
  p.heads_q = p.heads_kv = heads;
  p.head_dim_qk = p.head_dim_v = head_dim;
  p.dtype = DType::f32;
  return p;
}

// Runs `l` on random inputs of `p`, checks the output against the exact
// reference, and returns the name of the backend whose plan ran.
std::string run_checked(AttentionLayer& l, const Problem& p) {
  auto data = HostProblemData::create(p);
  EXPECT_TRUE(data.ok()) << data.diagnostics().summary();
  auto plan = l.plan(p);
  EXPECT_TRUE(plan.ok()) << plan.diagnostics().summary();
  if (!plan || !data) return "";
  std::vector<std::byte> ws((*plan)->workspace_bytes());
  const Diagnostics ran = l.run(p, data->tensors(), ws, nullptr);
  EXPECT_TRUE(ran.ok()) << ran.summary();
  testing::expect_matches_reference(*data);
  return std::string(l.backend().name());
}

std::string codes(const Diagnostics& d) {
  std::string out;
  for (const Diagnostic& x : d) out += (out.empty() ? "" : " ") + x.code;
  return out;
}

std::string write_profile(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("attnkit_runtime_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path.string();
}

// ---- each level of design 2 decides what runs ------------------------------------

TEST(DeploymentLevels, AutoRunsThePlatformsChoice) {
  auto d = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32"});
  ASSERT_TRUE(d);
  AttentionLayer& self0 = layer(*d, "transformer", "self");
  EXPECT_EQ(self0.decision().decided_by, Level::auto_select);
  EXPECT_EQ(run_checked(self0, small()), "cpu_flash");
}

TEST(DeploymentLevels, EngineComponentAndRoleOverridesRunTheirBackends) {
  ProbeLog log;
  auto registry = testing::make_probe_registry(log);
  auto d = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "probe",
                   .component_attention_backends = "text_encoder=probe_d64,transformer.cross=reference"},
                  *registry);
  ASSERT_TRUE(d);
  AttentionLayer& self0 = layer(*d, "transformer", "self");
  AttentionLayer& cross0 = layer(*d, "transformer", "cross");
  AttentionLayer& text0 = layer(*d, "text_encoder", "self");
  AttentionLayer& vae = layer(*d, "vae", "self");
  EXPECT_EQ(self0.decision().decided_by, Level::engine_default);
  EXPECT_EQ(cross0.decision().decided_by, Level::component_role_override);
  EXPECT_EQ(text0.decision().decided_by, Level::component_override);
  EXPECT_EQ(vae.decision().decided_by, Level::engine_default);
  EXPECT_EQ(run_checked(self0, small()), "probe");
  EXPECT_EQ(run_checked(cross0, small()), "reference");
  EXPECT_EQ(run_checked(text0, small()), "probe_d64");
  EXPECT_EQ(run_checked(vae, small()), "probe");
  // What the probes saw run: the engine default twice, the component override once.
  ASSERT_EQ(log.runs.size(), 3u);
  EXPECT_EQ(log.runs[0].backend, "probe");
  EXPECT_EQ(log.runs[1].backend, "probe_d64");
  EXPECT_EQ(log.runs[2].backend, "probe");
}

TEST(DeploymentLevels, DeclaredDefaultAndGlobalForceRunTheirBackends) {
  const std::string path = write_profile("declared.yaml", R"(name: declared
kind: test
components:
  - name: blocks
    default: reference
    roles:
      - {name: self, layers: 2, heads: 4, head_dim: 64, seqlen: 256}
  - name: head
    roles:
      - {name: self, layers: 1, heads: 4, head_dim: 64, seqlen: 256}
)");
  auto d = deploy({.model = path, .platform = "cpu", .dtype = "fp32"});
  ASSERT_TRUE(d);
  AttentionLayer& blocks1 = layer(*d, "blocks", "self", 1);
  EXPECT_EQ(blocks1.decision().decided_by, Level::declared_default);
  EXPECT_EQ(run_checked(blocks1, small()), "reference");
  EXPECT_EQ(run_checked(layer(*d, "head", "self"), small()), "cpu_flash");

  select::ScopedForceBackend force("reference");
  auto forced = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "sdpa"});
  ASSERT_TRUE(forced);
  AttentionLayer& self0 = layer(*forced, "transformer", "self");
  EXPECT_EQ(self0.decision().decided_by, Level::global_force);
  EXPECT_EQ(run_checked(self0, small()), "reference");
}

TEST(DeploymentLevels, PerRequestOverrideRunsOnlyInSwitchableLayers) {
  auto d = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "reference"});
  ASSERT_TRUE(d);
  AttentionLayer& self0 = layer(*d, "transformer", "self");
  AttentionLayer& text0 = layer(*d, "text_encoder", "self");
  EXPECT_EQ(run_checked(self0, small()), "reference");
  auto request = d->prepare({.attention_backend_override = "cpu_flash", .step = 3});
  ASSERT_TRUE(request.ok()) << request.diagnostics().summary();
  EXPECT_EQ(run_checked(self0, small()), "reference");  // prepared, not applied
  d->apply(*request);
  EXPECT_EQ(self0.decision().decided_by, Level::per_request);
  EXPECT_EQ(run_checked(self0, small()), "cpu_flash");
  EXPECT_EQ(run_checked(text0, small()), "reference");  // text_encoder is not switchable
  auto restore = d->prepare({.attention_backend_override = "none"});
  ASSERT_TRUE(restore.ok());
  d->apply(*restore);
  EXPECT_EQ(self0.decision().decided_by, Level::engine_default);
  EXPECT_EQ(run_checked(self0, small()), "reference");
}

TEST(DeploymentLevels, RequestFlagsAtCreationAreInForce) {
  auto d = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "reference",
                   .attention_backend_override = "cpu_flash"});
  ASSERT_TRUE(d);
  AttentionLayer& self0 = layer(*d, "transformer", "self");
  EXPECT_EQ(d->active().backend(), "cpu_flash");
  EXPECT_EQ(run_checked(self0, small()), "cpu_flash");
  d->apply(*d->prepare({}));
  EXPECT_EQ(run_checked(self0, small()), "reference");
}

// ---- plans: once per shape ----------------------------------------------------------

TEST(DeploymentPlans, NoSecondPlanForAShapeAlreadyPlanned) {
  ProbeLog log;
  auto registry = testing::make_probe_registry(log);
  auto d = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "probe"}, *registry);
  ASSERT_TRUE(d);
  EXPECT_EQ(log.plans_of("probe"), 4);  // each decision's representative problem, at start-up
  AttentionLayer& self0 = layer(*d, "transformer", "self", 0);
  AttentionLayer& self1 = layer(*d, "transformer", "self", 1);
  const Problem a = small(33), b = small(50);
  for (int i = 0; i < 3; ++i) run_checked(self0, a);
  EXPECT_EQ(log.plans_of("probe"), 5);
  run_checked(self1, a);  // another layer of the same role shares the plan
  EXPECT_EQ(log.plans_of("probe"), 5);
  run_checked(self1, b);
  EXPECT_EQ(log.plans_of("probe"), 6);
  EXPECT_EQ(self0.planned_shapes(), 3u);  // representative, a, b

  // prepare plans the override for every shape of the switchable roles, once.
  auto fa = d->prepare({.attention_backend_override = "fa"});
  ASSERT_TRUE(fa.ok()) << fa.diagnostics().summary();
  EXPECT_EQ(log.plans_of("fa"), 4);  // transformer.self: 3 shapes; transformer.cross: its representative
  d->apply(*fa);
  run_checked(self0, a);
  run_checked(self1, b);
  EXPECT_EQ(log.plans_of("fa"), 4);
  EXPECT_EQ(log.runs.back().backend, "fa");
  auto again = d->prepare({.attention_backend_override = "fa", .step = 2});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(log.plans_of("fa"), 4);  // kept from the first prepare
  // A shape first met during a request is planned on first use, once.
  const Problem c = small(70);
  run_checked(self0, c);
  run_checked(self1, c);
  EXPECT_EQ(log.plans_of("fa"), 5);
  d->apply(*d->prepare({}));
  run_checked(self0, a);
  EXPECT_EQ(log.plans_of("probe"), 6);
  EXPECT_EQ(log.runs.back().backend, "probe");
}

// ---- requests: prepare changes nothing on failure, apply cannot fail ------------------

static_assert(noexcept(std::declval<Deployment&>().apply(std::declval<const PreparedRequest&>())));

struct Snapshot {
  std::string active;
  std::vector<std::pair<std::string, Level>> decisions;
  std::vector<std::size_t> shapes;
  static Snapshot of(const Deployment& d) {
    Snapshot s{d.active().backend(), {}, {}};
    for (const AttentionLayer* l : d.layers()) {
      s.decisions.emplace_back(l->decision().backend, l->decision().decided_by);
      s.shapes.push_back(l->planned_shapes());
    }
    return s;
  }
  bool operator==(const Snapshot&) const = default;
};

TEST(DeploymentRequest, FailingPrepareChangesNothing) {
  ProbeLog log;
  auto registry = testing::make_probe_registry(log);
  auto d = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "probe"}, *registry);
  ASSERT_TRUE(d);
  AttentionLayer& self0 = layer(*d, "transformer", "self");
  AttentionLayer& text0 = layer(*d, "text_encoder", "self");
  run_checked(self0, small());
  run_checked(text0, small());
  const Snapshot before = Snapshot::of(*d);
  struct Case {
    const char* backend;
    const char* code;
  };
  for (const Case& c : {Case{"probe_fixed", "AK3010"},   // the backend cannot be switched in per request
                        Case{"probe_d64", "AK3001"},     // it cannot run a switchable layer (head dim 128)
                        Case{"probe_short", "AK2109"},   // its check passes, its plan of a known shape fails
                        Case{"probe_sho", "AK2002"}}) {  // unknown name
    auto p = d->prepare({.attention_backend_override = c.backend});
    ASSERT_FALSE(p.ok()) << c.backend;
    EXPECT_TRUE(p.diagnostics().has_code(c.code)) << c.backend << ": " << codes(p.diagnostics());
    EXPECT_TRUE(Snapshot::of(*d) == before) << c.backend;
    EXPECT_EQ(run_checked(self0, small()), "probe") << c.backend;
  }
  // After an applied request, a failing prepare leaves that request in force.
  d->apply(*d->prepare({.attention_backend_override = "fa"}));
  const Snapshot applied = Snapshot::of(*d);
  EXPECT_FALSE(d->prepare({.attention_backend_override = "probe_short"}).ok());
  EXPECT_TRUE(Snapshot::of(*d) == applied);
  EXPECT_EQ(run_checked(self0, small()), "fa");
  d->apply(PreparedRequest{});  // a default-constructed request does nothing
  EXPECT_EQ(run_checked(self0, small()), "fa");
}

TEST(DeploymentRequest, RefusalsOfDesign22) {
  auto refused = [](DeploymentConfig c, Request r) {
    auto d = Deployment::create(std::move(c), default_registry(), quiet);
    EXPECT_TRUE(d.ok()) << d.diagnostics().summary();
    auto p = (*d)->prepare(r);
    return p ? std::string("(prepared)") : codes(p.diagnostics());
  };
  const DeploymentConfig wan{.model = "wan", .platform = "cpu", .dtype = "fp32"};
  EXPECT_EQ(refused(wan, {.attention_backend_override = "reference"}), "AK3010");
  DeploymentConfig compiled = wan;
  compiled.enable_torch_compile = true;
  EXPECT_NE(refused(compiled, {.attention_backend_override = "cpu_flash"}).find("AK3011"), std::string::npos);
  EXPECT_EQ(refused(wan, {.skip_softmax_params = select::BackendConfig{{"threshold_scale_factor", 2.0}}}), "AK3013");
  EXPECT_NE(refused(wan, {.attention_backend_override = "fa3"}).find("AK3001"), std::string::npos);
}

// ---- the request context reaches the backend ---------------------------------------------

TEST(DeploymentContext, StepLayerAndSkipSoftmaxReachTheBackend) {
  ProbeLog log;
  auto registry = testing::make_probe_registry(log, /*fa_skips=*/true);
  auto d = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "fa"}, *registry);
  ASSERT_TRUE(d);
  AttentionLayer& self5 = layer(*d, "transformer", "self", 5);
  run_checked(self5, small());
  EXPECT_EQ(log.runs.back().where.step, -1);
  EXPECT_EQ(log.runs.back().where.layer_index, 5);
  EXPECT_FALSE(log.runs.back().where.skip_softmax);
  auto request = d->prepare({.skip_softmax_params = select::BackendConfig{{"threshold_scale_factor", 2.5},
                                                                          {"start_step", std::int64_t{3}}},
                             .step = 7});
  ASSERT_TRUE(request.ok()) << request.diagnostics().summary();
  d->apply(*request);
  run_checked(self5, small());
  const CallContext& where = log.runs.back().where;
  EXPECT_EQ(where.step, 7);
  EXPECT_EQ(where.layer_index, 5);
  ASSERT_TRUE(where.skip_softmax);
  EXPECT_DOUBLE_EQ(where.skip_softmax->threshold_scale_factor, 2.5);
  EXPECT_EQ(where.skip_softmax->start_step, 3);
  d->apply(*d->prepare({.step = 8}));
  run_checked(layer(*d, "transformer", "cross", 2), small());
  EXPECT_EQ(log.runs.back().where.step, 8);
  EXPECT_EQ(log.runs.back().where.layer_index, 2);
  EXPECT_FALSE(log.runs.back().where.skip_softmax);
  // Bad skip-softmax settings are refused before anything changes.
  auto bad = d->prepare({.skip_softmax_params = select::BackendConfig{{"threshold_scale_factor", -1.0}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.diagnostics().has_code("AK3103"));
  EXPECT_EQ(d->active().step(), 8);
}

TEST(DeploymentContext, AKernelThatWouldIgnoreSkipSoftmaxIsRefused) {
  ProbeLog log;
  auto registry = testing::make_probe_registry(log, /*fa_skips=*/false);
  auto d = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "fa"}, *registry);
  ASSERT_TRUE(d);
  auto p = d->prepare({.skip_softmax_params = select::BackendConfig{{"threshold_scale_factor", 2.0}}});
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(p.diagnostics().has_code("AK3016")) << codes(p.diagnostics());
  // `check` accepts the same request: fa is the flash family (design 2.2).
  const select::CheckResult checked = select::check_deployment(
      {.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "fa",
       .skip_softmax_params = "threshold_scale_factor=2"}, *registry);
  EXPECT_TRUE(checked.ok) << checked.diagnostics.summary();
}

// ---- the audit on the layers the engine built ---------------------------------------------

TEST(DeploymentAudit, ReportsRequestsThatControlledNoBuiltLayer) {
  auto d = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "sdpa",
                   .component_attention_backends = "text_encoder=reference,transformer.cross=reference"});
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->selection().diagnostics.empty()) << d->selection().diagnostics.summary();  // every flag decides a profile role
  Diagnostics nothing_built = d->audit();
  EXPECT_EQ(codes(nothing_built), "AK3008 AK3009 AK3008");  // component, role, engine default
  layer(*d, "transformer", "self", 0);
  layer(*d, "transformer", "self", 1);
  const Diagnostics dit_only = d->audit();
  EXPECT_EQ(codes(dit_only), "AK3008 AK3009");
  EXPECT_NE(dit_only.items()[0].message.find("text_encoder"), std::string::npos) << dit_only.items()[0].message;
  EXPECT_NE(dit_only.items()[1].message.find("only self built"), std::string::npos) << dit_only.items()[1].message;
  layer(*d, "text_encoder", "self");
  layer(*d, "transformer", "cross", 0);
  EXPECT_TRUE(d->audit().empty()) << d->audit().summary();
}

TEST(DeploymentAudit, AComponentOverrideShadowedOnEveryBuiltLayer) {
  auto d = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32",
                   .component_attention_backends = "transformer=reference,transformer.self=cpu_flash"});
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->selection().diagnostics.empty());  // transformer.cross is decided by the component override
  layer(*d, "transformer", "self");
  const Diagnostics audit = d->audit();
  ASSERT_EQ(codes(audit), "AK3008");
  EXPECT_NE(audit.items()[0].message.find("every built layer of component transformer"), std::string::npos)
      << audit.items()[0].message;
}

// ---- creation fails as `check` does ----------------------------------------------------------

TEST(DeploymentCreate, FailsWithTheDiagnosticsOfCheck) {
  const std::vector<DeploymentConfig> invalid = {
      {.model = "wan", .platform = "cpu", .attention_backend = "fa3"},
      {.model = "wan", .platform = "cpu", .attention_backend = "sage_atn"},
      {.model = "wan", .platform = "cpu", .dtype = "bfloat15"},
      {.model = "wan", .platform = "cpu", .ring_degree = 0},
      {.platform = "cpu"},
      {.model = "wan2", .platform = "cpu"},
      {.model = "wan", .platform = "cpu", .component_attention_backends = "text_encodr=sdpa"},
      {.model = "wan", .platform = "cpu", .attention_backend_override = "reference"},
      {.model = "wan", .platform = "cpu", .skip_softmax_params = "{\"threshold_scale_factor\": 2"},
      {.model = "wan", .platform = "cpu", .skip_softmax_params = "start_step=2"},
  };
  for (const DeploymentConfig& c : invalid) {
    const select::CheckResult checked = select::check_deployment(c);
    ASSERT_FALSE(checked.ok) << c.model << " " << c.attention_backend;
    auto d = Deployment::create(c, default_registry(), quiet);
    ASSERT_FALSE(d.ok());
    ASSERT_EQ(codes(d.diagnostics()), codes(checked.diagnostics)) << c.model << " " << c.attention_backend;
    for (std::size_t i = 0; i < checked.diagnostics.size(); ++i)
      EXPECT_EQ(d.diagnostics().items()[i].message, checked.diagnostics.items()[i].message);
  }
}

TEST(DeploymentCreate, ABackendWithoutAKernelNamesWhatCanRunInstead) {
  ProbeLog log;
  auto registry = testing::make_probe_registry(log);
  const DeploymentConfig c{.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "probe_unbuilt"};
  auto d = Deployment::create(c, *registry, quiet);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(codes(d.diagnostics()), codes(select::check_deployment(c, *registry).diagnostics));
  const Diagnostic* unbuilt = nullptr;
  for (const Diagnostic& x : d.diagnostics())
    if (x.code == "AK2111" && x.message.find("transformer.self") != std::string::npos) unbuilt = &x;
  ASSERT_NE(unbuilt, nullptr) << d.diagnostics().summary();
  for (const char* runs : {"probe", "cpu_flash", "reference", "fa"})
    EXPECT_NE(unbuilt->message.find(runs), std::string::npos) << runs << ": " << unbuilt->message;
  const std::string runnable = unbuilt->message.substr(unbuilt->message.find(" can run "));
  EXPECT_EQ(runnable.find("probe_d64"), std::string::npos) << runnable;  // head dim 128 is too big for it
  EXPECT_EQ(runnable.find("probe_unbuilt"), std::string::npos) << runnable;
}

TEST(DeploymentCreate, APlanThatFailsWhereCheckPassedFailsAtStartUp) {
  ProbeLog log;
  auto registry = testing::make_probe_registry(log);
  auto d = Deployment::create({.model = "wan", .platform = "cpu", .dtype = "fp32", .attention_backend = "probe_short"},
                              *registry, quiet);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(d.diagnostics().has_code("AK2109")) << d.diagnostics().summary();
}

TEST(DeploymentCreate, RunsOnThisMachineOnly) {
  auto d = Deployment::create({.model = "wan", .platform = "rocm"}, default_registry(), quiet);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(codes(d.diagnostics()), "AK3017");
  // The local CPU may be named.
  EXPECT_TRUE(Deployment::create({.model = "wan", .platform = "cpu", .dtype = "fp32"}, default_registry(), quiet).ok());
}

TEST(DeploymentLayer, OnlyTheProfilesLayers) {
  auto d = deploy({.model = "wan", .platform = "cpu", .dtype = "fp32"});
  ASSERT_TRUE(d);
  for (auto [component, role, index] : {std::tuple<const char*, const char*, int>{"decoder", "self", 0},
                                        {"transformer", "joint", 0},
                                        {"transformer", "self", 40},
                                        {"transformer", "self", -1}}) {
    auto l = d->layer(component, role, index);
    ASSERT_FALSE(l.ok()) << component << "." << role << "[" << index << "]";
    EXPECT_EQ(codes(l.diagnostics()), "AK3018");
  }
  EXPECT_EQ(*d->layer("transformer", "self", 39), *d->layer("transformer", "self", 39));
  EXPECT_EQ(d->layers().size(), 1u);
}

}  // namespace
}  // namespace attnkit::runtime
