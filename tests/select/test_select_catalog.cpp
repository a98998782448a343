// Every AK3xxx-AK5xxx catalog entry is triggered by a case below that asserts
// its code, and a walk over the catalog fails for any entry no case triggers.
#include <functional>
#include <regex>
#include <set>
#include <thread>

#include "attnkit/backends/registry.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "attnkit/dist/sequence_parallel.hpp"

#include "attnkit/runtime/deployment.hpp"
#include "select/deployment_flags.hpp"
#include "select_test_util.hpp"
#include "testing/probe_backends.hpp"

namespace attnkit::select {
namespace {

using testing::check;
using testing::write_temp;

struct CodeCase {
  std::string code;
  std::string name;
  std::function<Diagnostics()> run;
};

Diagnostics of(const CheckResult& r) { return r.diagnostics; }

// Probe backends (tests/testing/probe_backends.hpp) that outlive the cases.
struct ProbeLogHolder {
  explicit ProbeLogHolder(bool fa_skips) : registry(attnkit::testing::make_probe_registry(log, fa_skips)) {}
  attnkit::testing::ProbeLog log;
  std::unique_ptr<Registry> registry;
};

// Builds an engine for `c` and prepares `req`, returning the refusal.
Diagnostics prepare(DeploymentConfig c, RequestOverride req) {
  Engine e(std::move(c));
  e.set_log_sink(nullptr);
  const CheckResult& r = e.build();
  if (!r.ok) return r.diagnostics;
  auto p = e.prepare(req);
  return p ? Diagnostics{} : p.diagnostics();
}

// Creates a Deployment on this machine for `c` (with `registry`) and, when it
// exists, prepares `req`; returns the refusal.
Diagnostics deploy(DeploymentConfig c, runtime::Request req = {}, const Registry& registry = default_registry()) {
  auto d = runtime::Deployment::create(std::move(c), registry, [](std::string_view) {});
  if (!d) return d.diagnostics();
  auto p = (*d)->prepare(req);
  return p ? Diagnostics{} : p.diagnostics();
}

std::string sta_mask_file() { return write_temp("sta_mask.json", "{\"mask\": []}"); }

// sliding_tile_attn on the CPU over the sta-video test profile (whole 2x4x4
// tiles), with a mask strategy for steps 2.. of layer 0 and `extra` config.
DeploymentConfig sta_video(const std::string& extra = "") {
  const std::string mask = write_temp("sta_video_mask.json", R"({"2_0_0": [1, 1, 1], "2_0_1": [2, 2, 2]})");
  return {.model = std::string(ATTNKIT_SOURCE_DIR) + "/tests/select/profiles/sta-video.yaml", .platform = "cpu",
          .dtype = "fp32", .attention_backend = "sliding_tile_attn",
          .attention_backend_config = "mask_strategy_file_path=" + mask + ",skip_time_steps=2,tile_size=2,4,4" + extra};
}

// Runs layer `layer` of transformer.self of the sta_video() deployment under
// a request at `step` (-1: none); returns the refusal.
Diagnostics run_sta_video(std::int64_t step, std::int64_t layer) {
  auto d = runtime::Deployment::create(sta_video(), default_registry(), [](std::string_view) {});
  if (!d) return d.diagnostics();
  auto req = (*d)->prepare({.step = step});
  if (!req) return req.diagnostics();
  (*d)->apply(*req);
  runtime::AttentionLayer& l = **(*d)->layer("transformer", "self", layer);
  const Problem p = l.decision().problem;
  auto data = HostProblemData::create(p);
  if (!data) return data.diagnostics();
  auto plan = l.plan(p);
  if (!plan) return plan.diagnostics();
  std::vector<std::byte> ws((*plan)->workspace_bytes());
  return l.run(p, data->tensors(), ws, nullptr);
}

// Runs fn(rank's communicator) on two in-process ranks and returns rank `which`'s diagnostics.
Diagnostics on_two_ranks(int which, const std::function<Diagnostics(dist::Communicator&)>& fn) {
  const auto comms = dist::make_in_process_group(2);
  Diagnostics got[2];
  std::thread other([&] { got[1] = fn(*comms[1]); });
  got[0] = fn(*comms[0]);
  other.join();
  return got[which];
}

Problem small_problem() {
  Problem p;
  p.batch = 1;
  p.seqlen_q = p.seqlen_k = 64;
  p.heads_q = p.heads_kv = 4;
  p.head_dim_qk = p.head_dim_v = 32;
  return p;
}

const std::vector<CodeCase>& cases() {
  static const std::vector<CodeCase> all = {
      {"AK3001", "explicit fa3 on sm80", [] { return of(check({.model = "wan", .platform = "cuda:sm80", .attention_backend = "fa3"})); }},
      {"AK3002", "LLM with an fp8 KV cache on the CPU", [] { return of(check({.model = "llama", .platform = "cpu", .kv_cache_dtype = "fp8_e4m3"})); }},
      {"AK3107", "an unknown engine flag from the Python module", [] {
         return parse_deployment_args({"--model", "wan", "--ring", "2"}).diagnostics();
       }},
      {"AK3003", "sparse engine default on cross-attention", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .attention_backend = "sparge_attn"}));
       }},
      {"AK3004", "engine default fa on the head-dim-80 audio VAE", [] {
         return of(check({.model = "minimax-h3", .platform = "cuda:sm90", .attention_backend = "fa"}));
       }},
      {"AK3005", "declared default not available on MPS", [] { return of(check({.model = "vdn-h3", .platform = "mps"})); }},
      {"AK3006", "typo in a component name", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .component_attention_backends = "text_encodr=sdpa"}));
       }},
      {"AK3007", "colon instead of =", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .component_attention_backends = "text_encoder:sdpa"}));
       }},
      {"AK3008", "prefill flag on a DiT", [] {
         return of(check({.model = "flux", .platform = "cuda:sm90", .prefill_attention_backend = "fa"}));
       }},
      {"AK3009", "cross role on a joint-attention model", [] {
         return of(check({.model = "flux", .platform = "cuda:sm90", .component_attention_backends = "transformer.cross=sdpa"}));
       }},
      {"AK3010", "hybrid backend per request", [] {
         return prepare({.model = "wan", .platform = "cuda:sm90"}, {"hybrid_window_attn_h3", std::nullopt});
       }},
      {"AK3011", "per request with torch.compile", [] {
         return prepare({.model = "wan", .platform = "cuda:sm90", .enable_torch_compile = true}, {"fa", std::nullopt});
       }},
      {"AK3012", "per request on a sparse server", [] {
         return prepare({.model = "wan", .platform = "cuda:sm90", .attention_backend = "sparge_attn"}, {"fa", std::nullopt});
       }},
      {"AK3013", "skip-softmax with sage_attn", [] {
         return prepare({.model = "wan", .platform = "cuda:sm90"},
                        {"sage_attn", BackendConfig{{"threshold_scale_factor", 2.0}}});
       }},
      {"AK3014", "unknown dtype", [] { return of(check({.model = "wan", .platform = "cuda:sm90", .dtype = "bfloat15"})); }},
      {"AK3015", "no model", [] { return of(check({.platform = "cuda:sm90"})); }},
      {"AK3016", "skip-softmax on a flash kernel that does not skip", [] {
         static ProbeLogHolder probes(false);
         return deploy({.model = "wan", .platform = "cpu", .attention_backend = "fa"},
                       {.skip_softmax_params = BackendConfig{{"threshold_scale_factor", 2.0}}}, *probes.registry);
       }},
      {"AK3017", "a Deployment for another machine", [] { return deploy({.model = "wan", .platform = "rocm"}); }},
      {"AK3018", "a layer the profile does not declare", [] {
         auto d = runtime::Deployment::create({.model = "wan", .platform = "cpu"}, default_registry(),
                                              [](std::string_view) {});
         if (!d) return d.diagnostics();
         auto l = (*d)->layer("transformer", "self", 40);
         return l ? Diagnostics{} : l.diagnostics();
       }},
      {"AK3019", "request-scoped skip-softmax on sm80", [] {
         return prepare({.model = "wan", .platform = "cuda:sm80"}, {"fa", BackendConfig{{"threshold_scale_factor", 2.0}}});
       }},
      {"AK3020", "sparge_attn on a 64-token layer", [] {
         return of(check({.model = write_temp("short.yaml", "name: short\ncomponents:\n  - name: transformer\n    sparse_allowed: true\n"
                                                            "    roles: [{name: audio, heads: 8, head_dim: 128, seqlen: 64}]\n"),
                          .platform = "cuda:sm90", .attention_backend = "sparge_attn"}));
       }},
      {"AK3021", "sliding_tile_attn run without the request's step", [] { return run_sta_video(-1, 0); }},
      {"AK3022", "a page size of no token", [] { return of(check({.model = "llama", .platform = "cuda:sm90", .page_size = 0})); }},
      {"AK3023", "SGLang serving flags in a check", [] {
         auto c = parse_deployment_args({"--model", "llama", "--platform", "cuda:sm90", "--port", "30000"});
         return c ? of(check(*c)) : c.diagnostics();
       }},
      {"AK3108", "a mask strategy file that is not step_layer_head: [t, h, w]", [] {
         DeploymentConfig c = sta_video();
         c.attention_backend_config = "mask_strategy_file_path=" + sta_mask_file() + ",tile_size=2,4,4";
         return deploy(c);
       }},
      {"AK3109", "a step the mask strategy does not cover", [] { return run_sta_video(7, 0); }},
      {"AK3111", "sparge_attn given topk and cdfthreshd", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .attention_backend = "sparge_attn",
                          .attention_backend_config = "topk=0.3,cdfthreshd=0.9"}));
       }},
      {"AK3110", "a mask-search sta_mode", [] { return deploy(sta_video(",sta_mode=STA_tuning")); }},
      {"AK3101", "config key typo", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .attention_backend = "sparge_attn",
                          .attention_backend_config = "topK=0.5"}));
       }},
      {"AK3102", "string where an int is expected", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .attention_backend = "sliding_tile_attn",
                          .attention_backend_config = "{\"skip_time_steps\": \"15\", \"mask_strategy_file_path\": \"" +
                                                      sta_mask_file() + "\"}"}));
       }},
      {"AK3103", "topk above 1", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .attention_backend = "sparge_attn",
                          .attention_backend_config = "topk=1.5"}));
       }},
      {"AK3104", "sliding tile without its mask file", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .attention_backend = "sliding_tile_attn"}));
       }},
      {"AK3105", "unreadable config file", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .attention_backend_config = "/nonexistent/attn.yaml"}));
       }},
      {"AK3106", "truncated JSON", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .attention_backend_config = "{\"topk\": 0.5"}));
       }},
      {"AK4001", "MiniMax-H3 ring with sage_attn", [] {
         return of(check({.model = "minimax-h3", .platform = "cuda:sm90", .attention_backend = "sage_attn", .ring_degree = 2}));
       }},
      {"AK4002", "sparse text encoder", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .component_attention_backends = "text_encoder=sparge_attn"}));
       }},
      {"AK4003", "MiniMax-H3 text_encoder=fa", [] {
         return of(check({.model = "minimax-h3", .platform = "cuda:sm90", .component_attention_backends = "text_encoder=fa"}));
       }},
      {"AK4004", "sparse with ring", [] {
         return of(check({.model = "minimax-h3", .platform = "cuda:sm90", .attention_backend = "sparge_attn", .ring_degree = 2}));
       }},
      {"AK4005", "sparse with torch.compile", [] {
         return of(check({.model = "minimax-h3", .platform = "cuda:sm90", .attention_backend = "sparge_attn",
                          .enable_torch_compile = true}));
       }},
      {"AK4006", "sparse with breakable graphs", [] {
         return of(check({.model = "minimax-h3", .platform = "cuda:sm90", .attention_backend = "sparge_attn",
                          .enable_breakable_cuda_graph = true}));
       }},
      {"AK4007", "VDN-H3 transformer with a dense backend", [] {
         return of(check({.model = "vdn-h3", .platform = "cuda:sm90", .component_attention_backends = "transformer=fa"}));
       }},
      {"AK4008", "VDN-H3 dense smoke", [] {
         return of(check({.model = "vdn-h3", .platform = "cuda:sm90", .attention_backend = "fa",
                          .attention_backend_config = "vdn_h3_dense_smoke=true"}));
       }},
      {"AK4009", "hybrid on FastH3 weights", [] {
         return of(check({.model = "fast-h3", .platform = "cuda:sm90", .attention_backend = "hybrid_window_attn_h3"}));
       }},
      {"AK4010", "VDN-H3 with ring", [] { return of(check({.model = "vdn-h3", .platform = "cuda:sm90", .ring_degree = 2})); }},
      {"AK4011", "VDN-H3 with torch.compile", [] {
         return of(check({.model = "vdn-h3", .platform = "cuda:sm90", .enable_torch_compile = true}));
       }},
      {"AK4012", "VDN-H3 with breakable graphs", [] {
         return of(check({.model = "vdn-h3", .platform = "cuda:sm90", .enable_breakable_cuda_graph = true}));
       }},
      {"AK4013", "video_sparse_attn_h3 on base weights", [] {
         return of(check({.model = "minimax-h3", .platform = "cuda:sm90", .attention_backend = "video_sparse_attn_h3"}));
       }},
      {"AK4014", "vision tower outside its allow-list", [] {
         return of(check({.model = "kimi-k3-vl", .platform = "cuda:sm90", .mm_attention_backend = "sage_attn"}));
       }},
      {"AK4015", "sparse MLA on llama", [] {
         return of(check({.model = "llama", .platform = "cuda:sm120", .attention_backend = "flashinfer_sparse_mla",
                          .kv_cache_dtype = "fp8_e4m3"}));
       }},
      {"AK4016", "sparse MLA with a bf16 cache", [] {
         return of(check({.model = "glm-dsa", .platform = "cuda:sm120", .attention_backend = "flashinfer_sparse_mla"}));
       }},
      {"AK4017", "sparse MLA on ROCm", [] {
         return of(check({.model = "glm-dsa", .platform = "rocm", .attention_backend = "flashinfer_sparse_mla",
                          .kv_cache_dtype = "fp8_e4m3"}));
       }},
      {"AK4018", "GLM-DSA fp8 on sm120 decodes with flashinfer", [] {
         return of(check({.model = "glm-dsa", .platform = "cuda:sm120", .decode_attention_backend = "flashinfer",
                          .kv_cache_dtype = "fp8_e4m3"}));
       }},
      {"AK4019", "GLM-DSA with an e5m2 cache", [] {
         return of(check({.model = "glm-dsa", .platform = "cuda:sm90", .kv_cache_dtype = "fp8_e5m2"}));
       }},
      {"AK4020", "unknown model", [] { return of(check({.model = "wan2", .platform = "cuda:sm90"})); }},
      {"AK4021", "profile without components", [] {
         return of(check({.model = write_temp("nocomp.yaml", "name: broken\nkind: test\n"), .platform = "cuda:sm90"}));
       }},
      {"AK4022", "missing profile file", [] { return of(check({.model = "/nonexistent/model.yaml", .platform = "cuda:sm90"})); }},
      {"AK4023", "misspelt profile key", [] {
         return of(check({.model = write_temp("typo.yaml", "name: t\ncomponents: [{name: a, sparse_alowed: true, roles: [{name: s}]}]\n"),
                          .platform = "cuda:sm90"}));
       }},
      {"AK4024", "profile value of the wrong type", [] {
         return of(check({.model = write_temp("type.yaml", "name: t\ncomponents: [{name: a, roles: [{name: s, heads: many}]}]\n"),
                          .platform = "cuda:sm90"}));
       }},
      {"AK5001", "sp != ring * ulysses", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .ring_degree = 2, .ulysses_degree = 1, .sp_degree = 4}));
       }},
      {"AK5002", "ulysses does not divide 40 heads", [] {
         return of(check({.model = "wan", .platform = "cuda:sm90", .ulysses_degree = 3}));
       }},
      {"AK5003", "ring with a backend that returns no LSE", [] {
         return of(check({.model = "wan", .platform = "npu", .attention_backend = "sdpa", .ring_degree = 2}));
       }},
      {"AK5004", "per request to a non-ring backend under ring", [] {
         return prepare({.model = "wan", .platform = "cuda:sm90", .ring_degree = 2}, {"sparge_attn", std::nullopt});
       }},
      {"AK5005", "ring degree 0", [] { return of(check({.model = "wan", .platform = "cuda:sm90", .ring_degree = 0})); }},
      {"AK5013", "tensor parallelism of 6 over 32 q heads", [] {
         return of(check({.model = "llama", .platform = "cuda:sm90", .tp_size = 6}));
       }},
      {"AK5014", "DP attention over a dp size that does not divide tp", [] {
         return of(check({.model = "llama", .platform = "cuda:sm90", .tp_size = 8, .dp_size = 3, .enable_dp_attention = true}));
       }},
      {"AK5006", "flux under Ulysses", [] { return of(check({.model = "flux", .platform = "cuda:sm90", .ulysses_degree = 2})); }},
      {"AK5007", "4 ranks for ring 2 x ulysses 1", [] { return dist::check_world_size({2, 1, 0}, 4); }},
      {"AK5008", "a paged KV cache under ring attention", [] {
         Problem p = small_problem();
         p.paged_kv = PagedKv{16};
         return dist::check_sequence_parallel(p, {2, 1, 0}, 2);
       }},
      {"AK5009", "the other rank refused", [] {
         return on_two_ranks(0, [](dist::Communicator& c) {
           return dist::agree(c, c.rank() == 1 ? Diagnostics(diagnose("AK1103", {{"name", "q"}})) : Diagnostics{});
         });
       }},
      {"AK5010", "a sequence-parallel plan on a platform without a communicator", [] {
         auto plan = dist::plan_sequence_parallel(small_problem(), {2, 1, 0}, *default_registry().find("cpu_flash"),
                                                  detect_cpu_platform());
         return plan ? Diagnostics{} : plan.diagnostics();
       }},
      {"AK5011", "an all-to-all whose sizes do not match", [] {
         return on_two_ranks(0, [](dist::Communicator& c) {
           std::vector<std::byte> send(8), recv(8);
           const std::size_t sizes[2] = {4, 4};
           const std::size_t wrong[2] = {2, 4};  // rank 1 sends rank 0 two bytes, four expected
           return c.all_to_all(send.data(), c.rank() == 1 ? std::span(wrong) : std::span(sizes), recv.data(), sizes, nullptr);
         });
       }},
      {"AK5012", "ranks with different cu_seqlens", [] {
         return on_two_ranks(1, [](dist::Communicator& c) { return dist::agree(c, {}, 100 + c.rank()); });
       }},
  };
  return all;
}

void PrintTo(const CodeCase& c, std::ostream* os) { *os << c.code << " (" << c.name << ")"; }

class CatalogCodeTest : public ::testing::TestWithParam<CodeCase> {};

TEST_P(CatalogCodeTest, TriggersItsCode) {
  const CodeCase& c = GetParam();
  const Diagnostics d = c.run();
  EXPECT_TRUE(d.has_code(c.code)) << c.name << ": got " << testing::codes(d) << "\n" << d.summary();
  EXPECT_FALSE(d.has_code("AK0000")) << d.summary();
  // Every placeholder of the message was filled in.
  static const std::regex placeholder(R"(\{[a-z_]+\})");
  for (const Diagnostic& x : d) EXPECT_FALSE(std::regex_search(x.message, placeholder)) << x.code << ": " << x.message;
}

INSTANTIATE_TEST_SUITE_P(Select, CatalogCodeTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<CodeCase>& i) { return i.param.code; });

TEST(SelectCatalog, EveryAK3ToAK5EntryHasATriggeringCase) {
  std::set<std::string> covered;
  for (const CodeCase& c : cases()) covered.insert(c.code);
  int owned = 0;
  for (const CatalogEntry& e : diagnostic_catalog()) {
    if (e.code < "AK3000" || e.code >= "AK6000") continue;
    ++owned;
    EXPECT_TRUE(covered.count(e.code)) << e.code << " (" << e.title << ") has no test that triggers it";
  }
  EXPECT_GE(owned, 40);
  for (const std::string& code : covered) EXPECT_NE(find_catalog_entry(code), nullptr) << code << " is not in the catalog";
}

}  // namespace
}  // namespace attnkit::select
