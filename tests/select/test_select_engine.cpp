// The selector: the seven levels, names and families, the fallback policy, the
// audit, per-request prepare/apply, logging, bad input, and properties.
#include <random>

#include "select_test_util.hpp"

namespace attnkit::select {
namespace {

using testing::check;
using testing::find;

TEST(SelectNames, FamiliesFollowTheArch) {
  const Registry& reg = default_registry();
  auto on = [&](const char* plat) { return *parse_platform(plat); };
  EXPECT_EQ(resolve_backend_name("fa", on("cuda:sm80"), reg), "fa2");
  EXPECT_EQ(resolve_backend_name("fa", on("cuda:sm86"), reg), "fa2");
  EXPECT_EQ(resolve_backend_name("fa", on("cuda:sm89"), reg), "fa2");
  EXPECT_EQ(resolve_backend_name("fa", on("cuda:sm90"), reg), "fa3");
  EXPECT_EQ(resolve_backend_name("fa", on("cuda:sm100"), reg), "fa4");
  EXPECT_EQ(resolve_backend_name("fa", on("xpu"), reg), "xpu_flash");
  EXPECT_EQ(resolve_backend_name("fa", on("rocm"), reg), "fa");
  EXPECT_EQ(resolve_backend_name("sdpa", on("cuda:sm90"), reg), "cuda_sdpa");
  EXPECT_EQ(resolve_backend_name("sdpa", on("cpu"), reg), "cpu_flash");
  EXPECT_EQ(resolve_backend_name("sdpa", on("mps"), reg), "sdpa");
  EXPECT_EQ(resolve_backend_name("torch_sdpa", on("cuda:sm90"), reg), "cuda_sdpa");
  EXPECT_EQ(resolve_backend_name("cudnn_sdpa", on("cuda:sm90"), reg), "cudnn");
  EXPECT_EQ(resolve_backend_name("triton", on("cuda:sm90"), reg), "triton_attn");
  EXPECT_EQ(resolve_backend_name("fa3", on("cuda:sm80"), reg), "fa3");  // explicit names stay; the check refuses
  EXPECT_EQ(resolve_backend_name("flash", on("cuda:sm90"), reg), "");
}

TEST(SelectNames, OnThisMachineAnUnbuiltArchKernelGivesWayToFa2) {
  const Registry& reg = default_registry();
  // fa3 is built in CUDA builds (ATTNKIT_ENABLE_SM90A), not in CPU-only ones.
  const bool fa3_built = reg.find("fa3")->capabilities().built;
  Platform h200 = *parse_platform("cuda:sm90");
  EXPECT_EQ(resolve_backend_name("fa", h200, reg), "fa3");  // named: the deployment's own kernel
  h200.detected = true;
  EXPECT_EQ(resolve_backend_name("fa", h200, reg), fa3_built ? "fa3" : "fa2");  // this machine: what this binary has
  EXPECT_EQ(resolve_backend_name("fa3", h200, reg), "fa3");  // an explicit kernel name is not substituted
}

// `fa` on sm_90 is fa3 for every problem fa3 supports and fa2 for the rest, the
// refusal of fa3 recorded (issue 15); an explicit fa3 is not substituted.
TEST(SelectNames, FaOnSm90IsFa3ThenFa2) {
  const Registry& reg = default_registry();
  const Platform h200 = *parse_platform("cuda:sm90");
  EXPECT_EQ(resolve_backend_candidates("fa", h200, reg), (std::vector<std::string>{"fa3", "fa2"}));
  EXPECT_EQ(resolve_backend_candidates("flash_attn", h200, reg), (std::vector<std::string>{"fa3", "fa2"}));
  EXPECT_EQ(resolve_backend_candidates("fa", *parse_platform("cuda:sm80"), reg), (std::vector<std::string>{"fa2"}));
  EXPECT_EQ(resolve_backend_candidates("fa3", h200, reg), (std::vector<std::string>{"fa3"}));
  EXPECT_EQ(resolve_backend_candidates("fa", *parse_platform("cpu"), reg).size(), 1u);
  EXPECT_TRUE(resolve_backend_candidates("flsh", h200, reg).empty());

  Problem p;
  p.seqlen_q = p.seqlen_k = 512;
  p.heads_q = p.heads_kv = 4;
  p.head_dim_qk = p.head_dim_v = 128;
  p.dtype = DType::bf16;
  auto dense = select_for_call(p, {h200}, "fa");
  ASSERT_TRUE(dense.ok()) << dense.diagnostics().summary();
  EXPECT_EQ(dense->backend->name(), "fa3");
  EXPECT_TRUE(dense->rejected.empty());

  // Block-sparse lists in 64-key blocks run on fa3's 64-key-tile instances (fa3bsk64) at d128.
  p.block_sparse = BlockSparse{128, 64, 1, 1};
  ASSERT_TRUE(reg.find("fa3")->check(p, h200).empty()) << reg.find("fa3")->check(p, h200).summary();
  auto sparse = select_for_call(p, {h200}, "fa");
  ASSERT_TRUE(sparse.ok()) << sparse.diagnostics().summary();
  EXPECT_EQ(sparse->backend->name(), "fa3");
  EXPECT_TRUE(sparse->rejected.empty());
  // 64-query blocks (sol_attn's, VSA's) run on fa3's 64 x 64 tiles (fa3bsq64); fa2 refuses them (AK2117).
  p.block_sparse = BlockSparse{64, 64, 1, 1};
  auto q64 = select_for_call(p, {h200}, "fa");
  ASSERT_TRUE(q64.ok()) << q64.diagnostics().summary();
  EXPECT_EQ(q64->backend->name(), "fa3");
  EXPECT_TRUE(reg.find("fa2")->check(p, h200).has_code("AK2117"));
  // 32-key blocks split the key tiles of both (AK2117 from each): `fa` is refused with both reasons.
  p.block_sparse = BlockSparse{128, 32, 1, 1};
  EXPECT_TRUE(reg.find("fa3")->check(p, h200).has_code("AK2117"));
  EXPECT_TRUE(reg.find("fa2")->check(p, h200).has_code("AK2117"));
  auto split = select_for_call(p, {h200}, "fa");
  ASSERT_FALSE(split.ok());
  EXPECT_TRUE(split.diagnostics().has_code("AK2117")) << split.diagnostics().summary();
  // At d64 fa3 has no block-sparse instance and fa2 none either: the fallback order shows in the reasons.
  p.block_sparse = BlockSparse{128, 64, 1, 1};
  p.head_dim_qk = p.head_dim_v = 64;
  auto d64 = select_for_call(p, {h200}, "fa");
  ASSERT_FALSE(d64.ok());
  EXPECT_TRUE(d64.diagnostics().has_code("AK2105")) << d64.diagnostics().summary();
}

TEST(SelectNames, ExplicitKernelValidatedAgainstArch) {
  const CheckResult old = check({.model = "wan", .platform = "cuda:sm80", .attention_backend = "fa3"});
  ASSERT_FALSE(old.ok);
  EXPECT_TRUE(old.diagnostics.has_code("AK2102"));
  bool suggests = false;
  for (const Diagnostic& d : old.diagnostics)
    if (d.code == "AK2102")
      for (const std::string& s : d.solutions) suggests |= s.find("flashinfer") != std::string::npos && s.find("triton") != std::string::npos;
  EXPECT_TRUE(suggests);
  const CheckResult blackwell = check({.model = "wan", .platform = "cuda:sm100", .attention_backend = "fa3"});
  EXPECT_TRUE(blackwell.diagnostics.has_code("AK2103"));
  const CheckResult family = check({.model = "wan", .platform = "cuda:sm80", .attention_backend = "fa"});
  EXPECT_TRUE(family.ok) << family.diagnostics.summary();
  EXPECT_EQ(find(family, "transformer", "self")->backend, "fa2");
  EXPECT_EQ(find(family, "transformer", "self")->requested, "fa");
}

TEST(SelectNames, ModelledBackendsAreNotBuilt) {
  for (const char* name : {"fa4", "sage_attn", "video_sparse_attn",
                           "subblock_sparse_attn", "flashinfer",
                           "flashinfer_cudnn", "flashinfer_sparse_mla", "triton_attn", "aiter", "xpu_flash", "fa", "sdpa"}) {
    const Backend* b = default_registry().find(name);
    ASSERT_NE(b, nullptr) << name;
    EXPECT_FALSE(b->capabilities().built) << name;
    Problem p;
    auto plan = b->plan(p, *parse_platform("cuda:sm90"));
    EXPECT_FALSE(plan.ok()) << name;
    EXPECT_TRUE(plan.diagnostics().has_code("AK2111")) << name;
  }
  EXPECT_EQ(default_registry().find("fa3")->capabilities().min_sm, 90);
  EXPECT_EQ(default_registry().find("fa3")->capabilities().max_sm, 90);
  EXPECT_EQ(default_registry().find("cudnn")->capabilities().required_library, "cudnn");
}

// A backend is real or modelled, not both: the sparse backends with a CPU
// path are built and plan on the CPU (their configuration decides the rest).
TEST(SelectNames, SparseBackendsWithKernelsAreBuilt) {
  for (const char* name : {"sliding_tile_attn", "sparge_attn", "sol_attn", "video_sparse_attn_h3", "hybrid_window_attn_h3"}) {
    const Backend* b = default_registry().find(name);
    ASSERT_NE(b, nullptr) << name;
    EXPECT_TRUE(b->capabilities().built) << name;
    EXPECT_TRUE(b->capabilities().sparse) << name;
    EXPECT_TRUE(b->capabilities().platforms.contains(PlatformKind::cpu)) << name;
  }
  // Each declares its CUDA path (verified on the H200, 2026-12-02): `check` on a
  // named CUDA platform validates a d128 bf16 call, and a plan for one is never
  // "modelled only" (AK2111); without a GPU here it may fail on its first CUDA call.
  // (sliding_tile_attn plans only with its tile geometry: test_sliding_tile.cpp.)
  for (const char* name : {"sparge_attn", "video_sparse_attn_h3", "hybrid_window_attn_h3", "sol_attn"}) {
    Problem p;
    p.seqlen_q = p.seqlen_k = 512;
    p.head_dim_qk = p.head_dim_v = 128;
    p.video = VideoGrid{8, 8, 8};
    const Backend* b = default_registry().find(name);
    const Diagnostics checked = b->check(p, *parse_platform("cuda:sm90"));
    EXPECT_TRUE(checked.ok()) << name << ": " << checked.summary();
    auto plan = b->plan(p, *parse_platform("cuda:sm90"));
    EXPECT_FALSE(plan.diagnostics().has_code("AK2111")) << name << ": " << plan.diagnostics().summary();
    EXPECT_TRUE(b->plan(p, *parse_platform("cpu")).ok()) << name;
  }
}

TEST(SelectLevels, PriorityOrder) {
  // level 5 engine default
  CheckResult r = check({.model = "wan", .platform = "cuda:sm90", .attention_backend = "sage_attn"});
  ASSERT_TRUE(r.ok) << r.diagnostics.summary();
  EXPECT_EQ(find(r, "transformer", "self")->decided_by, Level::engine_default);
  EXPECT_EQ(find(r, "transformer", "self")->backend, "sage_attn");
  // level 4 beats 5, level 3 beats 4
  r = check({.model = "wan", .platform = "cuda:sm90", .attention_backend = "sage_attn",
             .component_attention_backends = "transformer=fa,transformer.cross=sdpa"});
  ASSERT_TRUE(r.ok) << r.diagnostics.summary();
  EXPECT_EQ(find(r, "transformer", "self")->backend, "fa3");
  EXPECT_EQ(find(r, "transformer", "self")->decided_by, Level::component_override);
  EXPECT_EQ(find(r, "transformer", "cross")->backend, "cuda_sdpa");
  EXPECT_EQ(find(r, "transformer", "cross")->decided_by, Level::component_role_override);
  EXPECT_EQ(find(r, "text_encoder", "self")->decided_by, Level::engine_default);
  // level 6 declared default, level 7 auto
  r = check({.model = "minimax-h3", .platform = "cuda:sm90"});
  EXPECT_EQ(find(r, "text_encoder", "self")->decided_by, Level::declared_default);
  EXPECT_EQ(find(r, "vae", "self")->decided_by, Level::auto_select);
}

TEST(SelectLevels, GlobalForceAndScopedGuard) {
  ASSERT_EQ(global_force_backend(), "");
  {
    ScopedForceBackend force("sdpa");
    EXPECT_EQ(global_force_backend(), "sdpa");
    const CheckResult r = check({.model = "wan", .platform = "cuda:sm90", .component_attention_backends = "transformer=fa"});
    ASSERT_TRUE(r.ok) << r.diagnostics.summary();
    for (const Decision& d : r.selections) {
      EXPECT_EQ(d.decided_by, Level::global_force);
      EXPECT_EQ(d.backend, "cuda_sdpa");
    }
    EXPECT_TRUE(r.diagnostics.has_code("AK3008"));  // the component override controlled nothing
    {
      ScopedForceBackend inner("fa");
      EXPECT_EQ(global_force_backend(), "fa");
    }
    EXPECT_EQ(global_force_backend(), "sdpa");
  }
  EXPECT_EQ(global_force_backend(), "");
  set_global_force_backend("fa3");
  const CheckResult bad = check({.model = "wan", .platform = "cuda:sm80"});
  set_global_force_backend("");
  EXPECT_FALSE(bad.ok);
  EXPECT_TRUE(bad.diagnostics.has_code("AK3001"));
}

TEST(SelectFallback, ExplicitNeverSubstitutes) {
  const CheckResult r = check({.model = "minimax-h3", .platform = "cuda:sm90", .component_attention_backends = "audio_vae=fa"});
  ASSERT_FALSE(r.ok);
  const Decision* d = find(r, "audio_vae", "self");
  EXPECT_FALSE(d->ok);
  EXPECT_EQ(d->backend, "fa3");
  EXPECT_EQ(d->decided_by, Level::component_override);
  ASSERT_EQ(d->rejected.size(), 1u);
  EXPECT_EQ(d->rejected[0].code, "AK2105");
  EXPECT_TRUE(r.diagnostics.has_code("AK3001"));
  EXPECT_TRUE(r.diagnostics.has_code("AK2105"));
}

TEST(SelectFallback, EngineDefaultFallsBackToDeclaredDefault) {
  const CheckResult r = check({.model = "minimax-h3", .platform = "cuda:sm90", .attention_backend = "fa"});
  ASSERT_TRUE(r.ok) << r.diagnostics.summary();
  const Decision* d = find(r, "audio_vae", "self");
  EXPECT_EQ(d->backend, "cuda_sdpa");
  EXPECT_EQ(d->decided_by, Level::declared_default);
  EXPECT_NE(d->fallback_reason.find("AK3004"), std::string::npos);
  EXPECT_EQ(find(r, "transformer", "self")->backend, "fa3");
}

TEST(SelectFallback, SparseStaysInTheDiT) {
  const CheckResult r = check({.model = "minimax-h3", .platform = "cuda:sm90", .attention_backend = "sparge_attn"});
  ASSERT_TRUE(r.ok) << r.diagnostics.summary();
  EXPECT_EQ(find(r, "transformer", "self")->backend, "sparge_attn");
  const Decision* cross = find(r, "transformer", "cross");
  EXPECT_EQ(cross->backend, "fa3");
  EXPECT_NE(cross->fallback_reason.find("AK3003"), std::string::npos);
  for (const char* comp : {"token_refiner", "vae"}) {
    const Decision* d = find(r, comp, "self");
    EXPECT_EQ(d->backend, "fa3") << comp;
    EXPECT_NE(d->fallback_reason.find("AK3004"), std::string::npos) << comp;
  }
  EXPECT_EQ(find(r, "text_encoder", "self")->backend, "cuda_sdpa");
}

// A dense engine-wide backend on VDN-H3 weights would skip the linear branch:
// an error at the engine-default level too (no fallback to the declared default).
TEST(SelectFallback, VdnEngineDefaultDenseIsAnError) {
  const CheckResult r = check({.model = "vdn-h3", .platform = "cuda:sm90", .attention_backend = "fa"});
  ASSERT_FALSE(r.ok);
  const Decision* d = find(r, "transformer", "self");
  EXPECT_FALSE(d->ok);
  EXPECT_EQ(d->backend, "fa3");
  EXPECT_EQ(d->decided_by, Level::engine_default);
  EXPECT_EQ(d->rejected.at(0).code, "AK4007");
  EXPECT_TRUE(r.diagnostics.has_code("AK3001"));
  EXPECT_TRUE(r.diagnostics.has_code("AK4007"));
  EXPECT_EQ(find(r, "transformer", "cross")->backend, "fa3");  // cross-attention has no linear branch
  const CheckResult smoke = check({.model = "vdn-h3", .platform = "cuda:sm90", .attention_backend = "fa",
                                   .attention_backend_config = "vdn_h3_dense_smoke=true"});
  ASSERT_TRUE(smoke.ok) << smoke.diagnostics.summary();
  EXPECT_EQ(find(smoke, "transformer", "self")->backend, "fa3");
  EXPECT_TRUE(smoke.diagnostics.has_code("AK4008"));
}

TEST(SelectAudit, UnusedOverridesAreReported) {
  const CheckResult llm = check({.model = "llama", .platform = "cuda:sm90", .mm_attention_backend = "sdpa"});
  EXPECT_TRUE(llm.ok);
  EXPECT_TRUE(llm.diagnostics.has_code("AK3008"));
  const CheckResult dit = check({.model = "wan", .platform = "cuda:sm90", .kv_cache_dtype = "fp8_e4m3"});
  EXPECT_TRUE(dit.diagnostics.has_code("AK3008"));
  const CheckResult all = check({.model = "wan", .platform = "cuda:sm90", .attention_backend = "fa",
                                 .component_attention_backends = "transformer=sdpa,text_encoder=sdpa,vae=sdpa"});
  EXPECT_TRUE(all.diagnostics.has_code("AK3008"));  // the engine default decided nothing
  const CheckResult used = check({.model = "wan", .platform = "cuda:sm90", .attention_backend = "fa"});
  EXPECT_FALSE(used.diagnostics.has_code("AK3008"));
}

TEST(SelectBadInput, UnknownBackendListsValidAndNearest) {
  const CheckResult r = check({.model = "wan", .platform = "cuda:sm90", .attention_backend = "sage_atn"});
  ASSERT_FALSE(r.ok);
  ASSERT_TRUE(r.diagnostics.has_code("AK2002"));
  const std::string msg = r.diagnostics.items()[0].message;
  EXPECT_NE(msg.find("did you mean 'sage_attn'"), std::string::npos) << msg;
  for (const char* name : {"fa", "sdpa", "cudnn", "sliding_tile_attn", "cpu_flash", "torch_sdpa"})
    EXPECT_NE(msg.find(name), std::string::npos) << name;
  const CheckResult comp = check({.model = "wan", .platform = "cuda:sm90", .component_attention_backends = "transformer=flsh"});
  EXPECT_TRUE(comp.diagnostics.has_code("AK2002"));
}

TEST(SelectBadInput, UnknownComponentListsTheProfiles) {
  const CheckResult r = check({.model = "minimax-h3", .platform = "cuda:sm90", .component_attention_backends = "dit=fa"});
  ASSERT_FALSE(r.ok);
  ASSERT_TRUE(r.diagnostics.has_code("AK3006"));
  const std::string msg = r.diagnostics.items()[0].message;
  for (const char* c : {"transformer", "token_refiner", "text_encoder", "vae", "audio_vae"})
    EXPECT_NE(msg.find(c), std::string::npos) << msg;
}

TEST(SelectBadInput, MalformedListsAndPlatforms) {
  for (const char* bad : {"transformer", "=fa", "transformer=", "transformer.=fa", "transformer=fa,transformer=sdpa",
                          "{\"transformer\": 3}", "{\"transformer\": "}) {
    const CheckResult r = check({.model = "wan", .platform = "cuda:sm90", .component_attention_backends = bad});
    EXPECT_FALSE(r.ok) << bad;
    EXPECT_TRUE(r.diagnostics.has_code("AK3007")) << bad << ": " << r.diagnostics.summary();
  }
  const CheckResult plat = check({.model = "wan", .platform = "cuda:hopper"});
  EXPECT_FALSE(plat.ok);
  EXPECT_TRUE(plat.diagnostics.has_code("AK2112"));
}

TEST(SelectProfiles, LoadFromFile) {
  const std::string path = testing::write_temp("tiny.yaml", R"(name: tiny
kind: test
components:
  - name: blocks
    default: sdpa
    roles:
      - {name: self, heads: 8, head_dim: 96}
)");
  const CheckResult r = check({.model = path, .platform = "cuda:sm90"});
  ASSERT_TRUE(r.ok) << r.diagnostics.summary();
  EXPECT_EQ(r.model, "tiny");
  EXPECT_EQ(find(r, "blocks", "self")->backend, "cuda_sdpa");
  const std::string bad = testing::write_temp("bad_mask.yaml", "name: x\ncomponents:\n  - name: a\n    roles: [{name: s, mask: diagonal}]\n");
  EXPECT_TRUE(check({.model = bad, .platform = "cpu"}).diagnostics.has_code("AK4024"));
}

TEST(SelectRequest, PrepareApplyAndRestore) {
  Engine e({.model = "wan", .platform = "cuda:sm90"});
  e.set_log_sink(nullptr);
  ASSERT_TRUE(e.build().ok);
  EXPECT_EQ(e.decision("transformer", "self")->backend, "fa3");
  auto p = e.prepare({"sparge_attn", std::nullopt});
  ASSERT_TRUE(p.ok()) << p.diagnostics().summary();
  EXPECT_EQ(e.decision("transformer", "self")->backend, "fa3");  // prepare changes nothing
  e.apply(*p);
  EXPECT_EQ(e.decision("transformer", "self")->backend, "sparge_attn");
  EXPECT_EQ(e.decision("transformer", "self")->decided_by, Level::per_request);
  EXPECT_EQ(e.decision("transformer", "cross")->backend, "fa3");  // sparse on cross falls back
  EXPECT_NE(e.decision("transformer", "cross")->fallback_reason.find("AK3003"), std::string::npos);
  EXPECT_EQ(e.decision("text_encoder", "self")->backend, "fa3");  // not switchable: untouched
  // A failing prepare leaves the applied state alone.
  auto bad = e.prepare({"nope", std::nullopt});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.diagnostics().has_code("AK2002"));
  EXPECT_EQ(e.decision("transformer", "self")->backend, "sparge_attn");
  auto fa3_on_layer = e.prepare({"fa3", BackendConfig{{"threshold_scale_factor", 2.0}}});
  ASSERT_TRUE(fa3_on_layer.ok()) << fa3_on_layer.diagnostics().summary();
  auto restore = e.prepare({"none", std::nullopt});
  ASSERT_TRUE(restore.ok());
  e.apply(*restore);
  EXPECT_EQ(e.decision("transformer", "self")->backend, "fa3");
  EXPECT_EQ(e.decision("transformer", "self")->decided_by, Level::auto_select);
}

TEST(SelectRequest, RequestThatCannotRunALayerIsRefused) {
  Engine e({.model = "wan", .platform = "cuda:sm80"});
  e.set_log_sink(nullptr);
  ASSERT_TRUE(e.build().ok);
  auto p = e.prepare({"fa3", std::nullopt});
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(p.diagnostics().has_code("AK3001"));
  EXPECT_TRUE(p.diagnostics().has_code("AK2102"));
  auto skip = e.prepare({"fa", BackendConfig{{"threshold_scale_factor", -1.0}}});
  ASSERT_FALSE(skip.ok());
  EXPECT_TRUE(skip.diagnostics().has_code("AK3103"));
}

TEST(SelectRequest, CheckValidatesTheRequestFlags) {
  // Accepted: the selections show what the request runs.
  const CheckResult ok = check({.model = "wan", .platform = "cuda:sm90", .attention_backend_override = "sage_attn"});
  ASSERT_TRUE(ok.ok) << ok.diagnostics.summary();
  EXPECT_EQ(find(ok, "transformer", "self")->backend, "sage_attn");
  EXPECT_EQ(find(ok, "transformer", "self")->decided_by, Level::per_request);
  EXPECT_EQ(find(ok, "text_encoder", "self")->decided_by, Level::auto_select);  // not switchable
  const CheckResult skip = check({.model = "wan", .platform = "cuda:sm90", .attention_backend_override = "fa",
                                  .skip_softmax_params = "{\"threshold_scale_factor\": 2, \"start_step\": 3}"});
  EXPECT_TRUE(skip.ok) << skip.diagnostics.summary();
  // Every refusal of design 2.2, through the flags.
  struct Case {
    DeploymentConfig config;
    const char* code;
  };
  const Case refusals[] = {
      {{.model = "wan", .platform = "cuda:sm90", .attention_backend_override = "sage_atn"}, "AK2002"},
      {{.model = "wan", .platform = "cuda:sm90", .attention_backend_override = "hybrid_window_attn_h3"}, "AK3010"},
      {{.model = "wan", .platform = "cuda:sm90", .enable_torch_compile = true, .attention_backend_override = "fa"}, "AK3011"},
      {{.model = "wan", .platform = "cuda:sm90", .enable_breakable_cuda_graph = true, .attention_backend_override = "fa"},
       "AK3011"},
      {{.model = "wan", .platform = "cuda:sm90", .attention_backend = "sparge_attn", .attention_backend_override = "fa"},
       "AK3012"},
      // The platform sdpa returns no LSE (cuda_sdpa does, and is ring-capable).
      {{.model = "wan", .platform = "npu", .ring_degree = 2, .attention_backend_override = "sdpa"}, "AK5004"},
      {{.model = "wan", .platform = "cuda:sm90", .attention_backend_override = "sage_attn",
        .skip_softmax_params = "threshold_scale_factor=2"}, "AK3013"},
      {{.model = "wan", .platform = "cuda:sm90", .attention_backend = "sdpa", .skip_softmax_params = "threshold_scale_factor=2"},
       "AK3013"},  // no override: the layers' own backend must be fa
      {{.model = "wan", .platform = "cuda:sm90", .skip_softmax_params = "start_step=2"}, "AK3104"},
      {{.model = "wan", .platform = "cuda:sm90", .skip_softmax_params = "threshold_scale_factor=2,start=1"}, "AK3101"},
      {{.model = "wan", .platform = "cuda:sm90", .skip_softmax_params = "{\"threshold_scale_factor\": 2"}, "AK3106"},
  };
  for (const Case& c : refusals) {
    const CheckResult r = check(c.config);
    EXPECT_FALSE(r.ok) << c.code;
    EXPECT_TRUE(r.diagnostics.has_code(c.code)) << c.code << ": " << testing::codes(r.diagnostics);
  }
}

TEST(SelectLog, OncePerComponent) {
  std::vector<std::string> lines;
  Engine e({.model = "minimax-h3", .platform = "cuda:sm90", .attention_backend = "sparge_attn"});
  e.set_log_sink([&](std::string_view l) { lines.emplace_back(l); });
  e.build();
  EXPECT_EQ(lines.size(), 5u);  // transformer, token_refiner, text_encoder, vae, audio_vae
  EXPECT_NE(lines[0].find("transformer"), std::string::npos);
  EXPECT_NE(lines[0].find("fallback"), std::string::npos);
  e.build();
  EXPECT_EQ(lines.size(), 5u);
}

// ---- properties -------------------------------------------------------------------

TEST(SelectProperty, AutoIsValidWhereTheGoldenSaysSoAndDeterministic) {
  std::mt19937 rng(1234);
  const std::vector<std::string> models = shipped_profile_names();
  const char* platforms[] = {"cuda:sm80", "cuda:sm86", "cuda:sm89", "cuda:sm90", "cuda:sm100", "cuda:sm120", "rocm", "xpu", "musa", "mps", "npu"};
  const char* backends[] = {"", "", "fa", "sdpa", "fa3", "fa2", "cudnn", "sage_attn", "sparge_attn", "sliding_tile_attn",
                            "torch_sdpa", "triton", "flashinfer", "aiter", "hybrid_window_attn_h3", "video_sparse_attn_h3"};
  const char* dtypes[] = {"bf16", "fp16", "fp32"};
  const char* kvs[] = {"auto", "auto", "fp8_e4m3", "bf16"};
  int valid = 0;
  for (int i = 0; i < 300; ++i) {
    DeploymentConfig c;
    c.model = models[rng() % models.size()];
    c.platform = platforms[rng() % std::size(platforms)];
    c.dtype = dtypes[rng() % std::size(dtypes)];
    c.attention_backend = backends[rng() % std::size(backends)];
    c.kv_cache_dtype = kvs[rng() % std::size(kvs)];
    c.ulysses_degree = 1 << (rng() % 3);
    c.ring_degree = 1 + rng() % 2;
    c.enable_torch_compile = rng() % 4 == 0;
    const CheckResult a = check(c);
    const CheckResult b = check(c);
    // Deterministic: the same decisions and diagnostics every time.
    ASSERT_EQ(a.ok, b.ok);
    ASSERT_EQ(a.selections.size(), b.selections.size());
    for (std::size_t k = 0; k < a.selections.size(); ++k) {
      EXPECT_EQ(a.selections[k].backend, b.selections[k].backend);
      EXPECT_EQ(a.selections[k].decided_by, b.selections[k].decided_by);
      EXPECT_EQ(a.selections[k].rejected.size(), b.selections[k].rejected.size());
    }
    EXPECT_EQ(testing::codes(a.diagnostics), testing::codes(b.diagnostics));
    if (!a.ok) continue;
    ++valid;
    // A valid configuration yields no error, and every chosen backend accepts its layer.
    EXPECT_TRUE(a.diagnostics.ok()) << a.diagnostics.summary();
    const Platform plat = *parse_platform(c.platform);
    for (const Decision& d : a.selections) {
      ASSERT_TRUE(d.ok);
      const Backend* backend = default_registry().find(d.backend);
      ASSERT_NE(backend, nullptr) << d.backend;
      EXPECT_TRUE(backend->check(d.problem, plat).ok()) << c.model << " " << c.platform << " " << d.component << "." << d.role
                                                        << " " << d.backend;
      if (c.ring_degree > 1 && d.role == "self" && d.component == "transformer")
        EXPECT_TRUE(ring_capable(backend->capabilities())) << d.backend;
    }
  }
  EXPECT_GT(valid, 30);
}

TEST(SelectProperty, DefaultDeploymentsOfEveryProfileAreValidOnCuda) {
  for (const std::string& m : shipped_profile_names())
    for (const char* p : {"cuda:sm80", "cuda:sm90", "cuda:sm100"})
      for (const char* dt : {"bf16", "fp16"}) {
        const CheckResult r = check({.model = m, .platform = p, .dtype = dt});
        EXPECT_TRUE(r.ok) << m << " " << p << " " << dt << "\n" << r.diagnostics.summary();
        EXPECT_TRUE(r.diagnostics.ok());
      }
}

}  // namespace
}  // namespace attnkit::select
