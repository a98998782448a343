// Selection fidelity (issue 14): the cases of fidelity_cases.json, which the
// CLI and the Python module run too (python/tests/test_fidelity.py), here
// through the engine flags parser and check_deployment; plus what `check`
// cannot express yet (request-scoped skip-softmax) and the catalog search.
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "select/deployment_flags.hpp"
#include "select_test_util.hpp"

namespace attnkit::select {
namespace {

using json = nlohmann::json;

const json& cases() {
  static const json all = json::parse(std::ifstream(std::string(ATTNKIT_SOURCE_DIR) + "/tests/select/fidelity_cases.json"));
  return all;
}

std::string substitute(std::string arg) {
  static const std::string mask = testing::write_temp("fidelity_mask.json", R"({"0_0_0": [3, 3, 3]})");
  static const std::string profiles = std::string(ATTNKIT_SOURCE_DIR) + "/tests/select/profiles";
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"{mask_file}", mask}, {"{profiles}", profiles}})
    for (std::size_t at; (at = arg.find(key)) != std::string::npos;) arg.replace(at, key.size(), value);
  return arg;
}

// Sets the case's environment for its lifetime.
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(const json& env) {
    for (const auto& [k, v] : env.items()) {
      ::setenv(k.c_str(), v.get<std::string>().c_str(), 1);
      names_.push_back(k);
    }
  }
  ~ScopedEnvironment() {
    for (const std::string& k : names_) ::unsetenv(k.c_str());
  }

 private:
  std::vector<std::string> names_;
};

// A field of a case (an empty object when absent), by reference: no temporaries to iterate.
const json& part_of(const json& c, const std::string& field) {
  static const json none = json::object();
  const auto it = c.find(field);
  return it == c.end() ? none : *it;
}

// The case called `name` in the list `list` ("check" or "explain"), or null.
const json* case_named(const char* list, const std::string& name) {
  for (const json& x : cases()[list])
    if (x["name"] == name) return &x;
  return nullptr;
}

class FidelityCase : public ::testing::TestWithParam<std::string> {};

TEST_P(FidelityCase, ThroughTheEngine) {
  const json* c = case_named("check", GetParam());
  ASSERT_NE(c, nullptr);
  std::vector<std::string> args;
  for (const json& a : (*c)["args"]) args.push_back(substitute(a.get<std::string>()));
  ScopedEnvironment env(part_of(*c, "env"));
  auto config = parse_deployment_args(args);
  ASSERT_TRUE(config.ok()) << config.diagnostics().summary();
  const CheckResult r = check_deployment(*config);
  const json out = json::parse(check_result_json(r));  // the JSON `check --format json` prints
  const std::string summary = r.diagnostics.summary();
  EXPECT_EQ(out["ok"].get<bool>(), (*c)["ok"].get<bool>()) << summary;
  auto selection = [&](const std::string& layer) -> const json* {
    for (const json& s : out["selections"])
      if (s["component"].get<std::string>() + "." + s["role"].get<std::string>() == layer) return &s;
    return nullptr;
  };
  for (const auto& [field, key] : {std::pair<std::string, std::string>{"select", "backend"}, {"decided_by", "decided_by"}})
    for (const auto& [layer, want] : part_of(*c, field).items()) {
      const json* s = selection(layer);
      ASSERT_NE(s, nullptr) << layer;
      EXPECT_EQ((*s)[key], want) << layer << " " << key << "\n" << summary;
    }
  for (const auto& [layer, part] : part_of(*c, "requested_by").items()) {
    const json* s = selection(layer);
    ASSERT_NE(s, nullptr) << layer;
    ASSERT_TRUE((*s)["requested_by"].is_string()) << layer;
    EXPECT_NE((*s)["requested_by"].get<std::string>().find(part.get<std::string>()), std::string::npos)
        << (*s)["requested_by"];
  }
  for (const auto& [layer, code] : part_of(*c, "fallback").items()) {
    const json* s = selection(layer);
    ASSERT_NE(s, nullptr) << layer;
    ASSERT_TRUE((*s)["fallback_reason"].is_string()) << layer;
    EXPECT_EQ((*s)["fallback_reason"].get<std::string>().rfind(code.get<std::string>(), 0), 0u) << (*s)["fallback_reason"];
  }
  for (const auto& [layer, want] : part_of(*c, "rejected").items()) {
    const json* s = selection(layer);
    ASSERT_NE(s, nullptr) << layer;
    bool found = false;
    for (const json& x : (*s)["rejected"])
      if (x["backend"] == want["backend"]) {
        found = true;
        for (const json& part : want["reason_contains"])
          EXPECT_NE(x["reason"].get<std::string>().find(part.get<std::string>()), std::string::npos) << x["reason"];
      }
    EXPECT_TRUE(found) << layer << " did not reject " << want["backend"];
  }
  for (const json& code : part_of(*c, "codes")) EXPECT_TRUE(r.diagnostics.has_code(code.get<std::string>())) << code << "\n" << summary;
  for (const json& code : part_of(*c, "no_codes")) EXPECT_FALSE(r.diagnostics.has_code(code.get<std::string>())) << code << "\n" << summary;
  for (const auto& [code, parts] : part_of(*c, "message_contains").items()) {
    bool seen = false;
    for (const Diagnostic& d : r.diagnostics)
      if (d.code == code) {
        seen = true;
        for (const json& part : parts) EXPECT_NE(d.message.find(part.get<std::string>()), std::string::npos) << d.message;
      }
    EXPECT_TRUE(seen) << code << "\n" << summary;
  }
  for (const json& text : part_of(*c, "no_text"))
    EXPECT_EQ(out.dump().find(text.get<std::string>()), std::string::npos) << text;
}

std::vector<std::string> case_names(const char* list) {
  std::vector<std::string> out;
  for (const json& c : cases()[list]) out.push_back(c["name"].get<std::string>());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fidelity, FidelityCase, ::testing::ValuesIn(case_names("check")),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

class ExplainCase : public ::testing::TestWithParam<std::string> {};

TEST_P(ExplainCase, FindsThePage) {
  const json* c = case_named("explain", GetParam());
  ASSERT_NE(c, nullptr);
  const std::vector<CatalogMatch> found = search_catalog((*c)["text"].get<std::string>());
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found.front().entry->code, (*c)["first"]) << found.front().matched;
  for (const json& code : part_of(*c, "includes")) {
    bool listed = false;
    for (const CatalogMatch& m : found) listed |= m.entry->code == code;
    EXPECT_TRUE(listed) << code;
  }
}

INSTANTIATE_TEST_SUITE_P(Fidelity, ExplainCase, ::testing::ValuesIn(case_names("explain")),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(SelectFidelity, UnrelatedTextFindsNothing) {
  EXPECT_TRUE(search_catalog("the weather in paris is lovely").empty());
  EXPECT_TRUE(search_catalog("").empty());
}

// explain_text, what `attnkit explain` and attnkit.explain() answer: a code's
// page, a typo of a code AK0001 with the nearest, a text no page covers AK0004.
TEST(SelectFidelity, ExplainTextAnswersAPageOrACode) {
  const Result<Explanation> page = explain_text(" ak3104 ");
  ASSERT_TRUE(page.ok()) << page.diagnostics().summary();
  ASSERT_NE(page->page, nullptr);
  EXPECT_EQ(page->page->code, "AK3104");
  const Result<Explanation> typo = explain_text("AK1O02");
  ASSERT_FALSE(typo.ok());
  EXPECT_TRUE(typo.diagnostics().has_code("AK0001"));
  EXPECT_NE(typo.diagnostics().summary().find("AK1002"), std::string::npos) << typo.diagnostics().summary();
  const Result<Explanation> ring = explain_text("ring parallelism requires the FlashAttention");
  ASSERT_TRUE(ring.ok());
  EXPECT_EQ(ring->page, nullptr);
  EXPECT_EQ(ring->matches.front().entry->code, "AK4001");
  for (const char* text : {"the weather in paris is lovely", "", "   "}) {
    const Result<Explanation> none = explain_text(text);
    EXPECT_TRUE(none.diagnostics().has_code("AK0004")) << text << none.diagnostics().summary();
  }
}

// Every engine message listed in the catalog finds its own page among the matches.
TEST(SelectFidelity, EveryEngineMessageFindsItsPage) {
  int messages = 0;
  for (const CatalogEntry& e : diagnostic_catalog())
    for (const std::string& m : e.engine_messages) {
      ++messages;
      bool listed = false;
      for (const CatalogMatch& x : search_catalog(m)) listed |= x.entry == &e;
      EXPECT_TRUE(listed) << e.code << ": " << m;
    }
  EXPECT_GE(messages, 30);
}

// Request-scoped skip-softmax: sm_90 / sm_100-class GPUs and head dims 128 / 256
// only (`check` takes no request flags yet; the engine's prepare() does).
TEST(SelectFidelity, SkipSoftmaxPlatformsAndHeadDims) {
  auto prepare = [](DeploymentConfig c) {
    Engine e(std::move(c));
    e.set_log_sink(nullptr);
    EXPECT_TRUE(e.build().ok);
    return e.prepare({"fa", BackendConfig{{"threshold_scale_factor", 2.0}}});
  };
  EXPECT_TRUE(prepare({.model = "wan", .platform = "cuda:sm90"}).ok());
  EXPECT_TRUE(prepare({.model = "wan", .platform = "cuda:sm100"}).ok());
  const auto ampere = prepare({.model = "wan", .platform = "cuda:sm80"});
  ASSERT_FALSE(ampere.ok());
  EXPECT_TRUE(ampere.diagnostics().has_code("AK3019"));
  EXPECT_NE(ampere.diagnostics().items()[0].message.find("sm_90, sm_100"), std::string::npos);
  const std::string d64 = testing::write_temp("d64.yaml", R"(name: d64
components:
  - name: transformer
    switchable: true
    roles: [{name: self, heads: 8, head_dim: 64, seqlen: 4096}]
)");
  const auto small_heads = prepare({.model = d64, .platform = "cuda:sm90"});
  ASSERT_FALSE(small_heads.ok());
  EXPECT_TRUE(small_heads.diagnostics().has_code("AK3019"));
  EXPECT_NE(small_heads.diagnostics().items()[0].message.find("head dim is 64"), std::string::npos);
}

// Volta and Turing: auto takes the sdpa-class path (the generic CUDA kernel)
// where this build compiles it (sm_70 with a CUDA 12 toolkit, sm_75 with
// CUDA 13), and bf16 is refused there with its reason; below the build's
// floor the generic kernel's refusal names the floor.
TEST(SelectFidelity, OldGpusTakeTheGenericKernel) {
  const int floor = default_registry().find("cuda_sdpa")->capabilities().min_sm;
  ASSERT_LE(floor, 75);
  for (int sm : {70, 75}) {
    const std::string platform = "cuda:sm" + std::to_string(sm);
    const CheckResult fp16 = testing::check({.model = "wan", .platform = platform, .dtype = "fp16"});
    const Decision* d = testing::find(fp16, "transformer", "self");
    ASSERT_NE(d, nullptr);
    if (sm >= floor) {
      EXPECT_TRUE(fp16.ok) << platform << "\n" << fp16.diagnostics.summary();
      for (const Decision& x : fp16.selections) EXPECT_EQ(x.backend, "cuda_sdpa") << platform << " " << x.component;
    } else {
      EXPECT_FALSE(fp16.ok);
      ASSERT_FALSE(d->rejected.empty());
      EXPECT_EQ(d->rejected[0].backend, "cuda_sdpa");
      EXPECT_EQ(d->rejected[0].code, "AK2102");
      EXPECT_NE(d->rejected[0].reason.find("sm_" + std::to_string(floor)), std::string::npos) << d->rejected[0].reason;
    }
    const CheckResult bf16 = testing::check({.model = "wan", .platform = platform, .dtype = "bf16"});
    EXPECT_FALSE(bf16.ok) << platform;
    const Decision* b = testing::find(bf16, "transformer", "self");
    ASSERT_FALSE(b->rejected.empty());
    EXPECT_EQ(b->rejected[0].backend, "cuda_sdpa");
    if (sm >= floor) EXPECT_NE(b->rejected[0].reason.find("bf16 needs sm_80"), std::string::npos) << b->rejected[0].reason;
  }
}

// The profile parser refuses a misspelt key and a wrong type, each with its code.
TEST(SelectFidelity, ProfileSchemaIsStrict) {
  const std::string typo = testing::write_temp("typo.yaml", "name: t\ncomponents:\n  - name: a\n    sparse_alowed: true\n    roles: [{name: s}]\n");
  const auto unknown = load_profile(typo);
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(unknown.diagnostics().has_code("AK4023"));
  EXPECT_NE(unknown.diagnostics().items()[0].message.find("did you mean 'sparse_allowed'"), std::string::npos);
  const std::string role_typo = testing::write_temp("role_typo.yaml", "name: t\ncomponents:\n  - name: a\n    roles: [{name: s, head: 8}]\n");
  EXPECT_TRUE(load_profile(role_typo).diagnostics().has_code("AK4023"));
  const std::string rules_typo = testing::write_temp("rules_typo.yaml", "name: t\nrules: {ring_backed: fa}\ncomponents: [{name: a, roles: [{name: s}]}]\n");
  EXPECT_TRUE(load_profile(rules_typo).diagnostics().has_code("AK4023"));
  for (const char* bad : {"name: t\ncomponents: [{name: a, roles: [{name: s, heads: many}]}]\n",
                          "name: t\ncomponents: [{name: a, sparse_allowed: sometimes, roles: [{name: s}]}]\n",
                          "name: t\ncomponents: [{name: a, only: sdpa, roles: [{name: s}]}]\n",
                          "name: t\ncheckpoint: {provides: [wings]}\ncomponents: [{name: a, roles: [{name: s}]}]\n",
                          "name: t\ncomponents: [{name: a, roles: [{name: s, heads: 0}]}]\n"}) {
    const auto r = parse_profile(bad, "inline");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(r.diagnostics().has_code("AK4024")) << bad << r.diagnostics().summary();
  }
  for (const std::string& name : shipped_profile_names()) EXPECT_TRUE(load_profile(name).ok()) << name;
  EXPECT_EQ(shipped_profile_names().size(), 8u);  // a shipped profile the parser refused would be missing
}

// No backend name is compared in the model rules: a new model family with
// the VDN-H3 kind of rule is a YAML file.
TEST(SelectFidelity, ANewModelFamilyIsAYamlFile) {
  const std::string path = testing::write_temp("hybrid_family.yaml", R"(name: other-hybrid
checkpoint:
  provides: [linear_branch]
rules:
  dense_escape_key: other_smoke
config_keys:
  - {key: other_smoke, type: bool}
components:
  - name: blocks
    sparse_allowed: true
    roles:
      - {name: self, heads: 16, head_dim: 128, seqlen: 8192, weights_need: [linear_branch]}
)");
  const CheckResult auto_pick = testing::check({.model = path, .platform = "cuda:sm90"});
  ASSERT_TRUE(auto_pick.ok) << auto_pick.diagnostics.summary();
  EXPECT_EQ(testing::find(auto_pick, "blocks", "self")->backend, "hybrid_window_attn_h3");  // the checkpoint calls for it
  const CheckResult dense = testing::check({.model = path, .platform = "cuda:sm90", .attention_backend = "fa"});
  EXPECT_FALSE(dense.ok);
  EXPECT_TRUE(dense.diagnostics.has_code("AK4007"));
  const CheckResult smoke = testing::check({.model = path, .platform = "cuda:sm90", .attention_backend = "fa",
                                            .attention_backend_config = "other_smoke=true"});
  EXPECT_TRUE(smoke.ok) << smoke.diagnostics.summary();
  EXPECT_TRUE(smoke.diagnostics.has_code("AK4008"));
}

}  // namespace
}  // namespace attnkit::select
