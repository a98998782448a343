// SGLang server command lines through `check`'s flag parser: the attention
// flags change each layer's Problem (--page-size, --tp-size, DP attention),
// the serving flags are accepted and named by a note (AK3023), and a flag
// known neither way stays AK3107. The CLI and Python run the same cases in
// fidelity_cases.json; here, what the JSON does not show (the per-rank Problem).
#include "select/deployment_flags.hpp"
#include "attnkit/dist/sequence_parallel.hpp"
#include "select_test_util.hpp"

namespace attnkit::select {
namespace {

using testing::codes;
using testing::find;

DeploymentConfig parsed(const std::vector<std::string>& args) {
  auto c = parse_deployment_args(args);
  EXPECT_TRUE(c.ok()) << c.diagnostics().summary();
  return c ? *c : DeploymentConfig{};
}

// A server command line as SGLang's docs write them, after the model's name.
const std::vector<std::string> kServerLine = {
    "--model", "llama", "--platform", "cuda:sm90", "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
    "--host", "0.0.0.0", "--port", "30000", "--api-key", "do-not-echo", "--trust-remote-code",
    "--mem-fraction-static", "0.85", "--max-running-requests", "256", "--chunked-prefill-size", "8192",
    "--context-length", "32768", "--disable-radix-cache", "--pipeline-parallel-size", "1",
    "--tp", "2", "--page-size", "32", "--attention-backend", "fa3", "--dtype", "auto"};

TEST(SelectEngineFlags, AServerCommandLineChecks) {
  const DeploymentConfig c = parsed(kServerLine);
  EXPECT_EQ(c.tp_size, 2);
  EXPECT_EQ(c.page_size, 32);
  EXPECT_EQ(c.ignored_flags,
            (std::vector<std::string>{"--model-path", "--trust-remote-code", "--context-length", "--host", "--port",
                                      "--api-key", "--mem-fraction-static", "--max-running-requests",
                                      "--chunked-prefill-size", "--disable-radix-cache", "--pp-size"}));
  const CheckResult r = check_deployment(c);
  EXPECT_TRUE(r.ok) << r.diagnostics.summary();
  ASSERT_TRUE(r.diagnostics.has_code("AK3023"));
  EXPECT_EQ(r.diagnostics.summary().find("do-not-echo"), std::string::npos);  // names only, never values
  const Decision* decode = find(r, "decoder", "decode");
  ASSERT_NE(decode, nullptr);
  EXPECT_EQ(decode->backend, "fa3");
  EXPECT_EQ(decode->problem.paged_kv->page_size, 32);
  EXPECT_EQ(decode->problem.heads_q, 16);
  EXPECT_EQ(decode->problem.heads_kv, 4);
}

TEST(SelectEngineFlags, AliasesAndUnknownFlags) {
  for (const char* tp : {"--tp-size", "--tensor-parallel-size", "--tp"})
    EXPECT_EQ(parsed({"--model", "llama", tp, "4"}).tp_size, 4) << tp;
  for (const char* dp : {"--dp-size", "--data-parallel-size", "--dp"})
    EXPECT_EQ(parsed({"--model", "llama", dp, "4"}).dp_size, 4) << dp;
  EXPECT_FALSE(parsed({"--model", "llama"}).page_size.has_value());  // PagedKv's default stays
  EXPECT_TRUE(parsed({"--model", "llama"}).ignored_flags.empty());
  // Flags that could change attention and that check does not model stay refused.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--model", "llama", "--speculative-algorithm", "EAGLE"},
        {"--model", "llama", "--enable-deterministic-inference"}, {"--model", "llama", "--device", "npu"},
        {"--model", "llama", "--page-size", "sixteen"}, {"--model", "llama", "--port"}})
    EXPECT_TRUE(parse_deployment_args(args).diagnostics().has_code("AK3107")) << args[2];
}

// One rank's heads, as SGLang shards attention: q heads / tp, kv heads / tp
// or one replicated kv head; AK5013 names the sizes that work.
TEST(SelectEngineFlags, TensorParallelHeads) {
  struct Split {
    int tp, heads, kv_heads, rank_heads, rank_kv_heads;
  };
  for (const Split& s : {Split{1, 32, 8, 32, 8}, {2, 32, 8, 16, 4}, {8, 32, 8, 4, 1}, {16, 32, 8, 2, 1},
                         {32, 32, 8, 1, 1}, {12, 24, 6, 2, 1}, {4, 16, 16, 4, 4}}) {
    const auto r = dist::tensor_parallel_heads(s.tp, s.heads, s.kv_heads, "l");
    ASSERT_TRUE(r.ok()) << s.tp << " " << s.heads << "/" << s.kv_heads << r.diagnostics().summary();
    EXPECT_EQ(r->heads, s.rank_heads) << s.tp;
    EXPECT_EQ(r->kv_heads, s.rank_kv_heads) << s.tp;
  }
  const auto q = dist::tensor_parallel_heads(6, 32, 8, "decoder.decode");
  ASSERT_TRUE(q.diagnostics().has_code("AK5013"));
  EXPECT_NE(q.diagnostics().summary().find("32 q heads are not a multiple of 6; attention TP sizes that can: 1, 2, 4, 8, 16, 32"),
            std::string::npos) << q.diagnostics().summary();
  // 24 q / 6 kv heads: 4 divides the q heads, neither divides nor is a multiple of 6 kv heads.
  const auto kv = dist::tensor_parallel_heads(4, 24, 6, "l");
  ASSERT_TRUE(kv.diagnostics().has_code("AK5013"));
  EXPECT_NE(kv.diagnostics().summary().find("6 kv heads neither split into 4 parts nor replicate over them; "
                                            "attention TP sizes that can: 1, 2, 3, 6, 12, 24"),
            std::string::npos) << kv.diagnostics().summary();
  EXPECT_TRUE(dist::tensor_parallel_heads(0, 8, 8, "l").diagnostics().has_code("AK5005"));
  // A large head count lists its divisors without walking every size below it.
  EXPECT_TRUE(dist::tensor_parallel_heads(3, 1 << 30, 1 << 30, "l").diagnostics().has_code("AK5013"));
}

// Every component of an LLM profile is split (the vision tower too), by the
// attention TP size: tp, or tp / dp under DP attention.
TEST(SelectEngineFlags, EachLayerIsOneRanksShare) {
  const CheckResult kimi = testing::check({.model = "kimi-k3-vl", .platform = "cuda:sm90", .tp_size = 8});
  ASSERT_TRUE(kimi.ok) << kimi.diagnostics.summary();
  EXPECT_EQ(find(kimi, "vision", "self")->problem.heads_q, 2);
  EXPECT_EQ(find(kimi, "vision", "self")->problem.heads_kv, 2);
  EXPECT_EQ(find(kimi, "decoder", "prefill")->problem.heads_q, 8);
  EXPECT_EQ(find(kimi, "decoder", "prefill")->problem.heads_kv, 1);
  EXPECT_FALSE(find(kimi, "vision", "self")->problem.paged_kv.has_value());
  const CheckResult dp = testing::check(
      {.model = "glm-dsa", .platform = "cuda:sm90", .tp_size = 8, .dp_size = 4, .enable_dp_attention = true});
  ASSERT_TRUE(dp.ok) << dp.diagnostics.summary();
  EXPECT_EQ(find(dp, "decoder", "decode")->problem.heads_q, 32);  // attention TP 2
  const CheckResult replicas = testing::check({.model = "glm-dsa", .platform = "cuda:sm90", .tp_size = 8, .dp_size = 4});
  EXPECT_EQ(find(replicas, "decoder", "decode")->problem.heads_q, 8);  // data parallelism alone replicates the model
  const CheckResult wan = testing::check({.model = "wan", .platform = "cuda:sm90", .page_size = 64, .tp_size = 2});
  EXPECT_TRUE(wan.ok) << wan.diagnostics.summary();
  EXPECT_EQ(codes(wan.diagnostics), "AK3008 AK3008");  // neither flag reaches a DiT layer
  EXPECT_EQ(find(wan, "transformer", "self")->problem.heads_q, 40);
}

// SGLang's --model is its --model-path: a checkpoint id there is no profile
// and no file, and the refusal says where it goes (AK4020, not a missing file).
TEST(SelectEngineFlags, ACheckpointIdAsModelSaysModelPath) {
  const CheckResult r = check_deployment(parsed({"--model", "meta-llama/Llama-3.1-8B-Instruct", "--platform", "cuda:sm90"}));
  EXPECT_FALSE(r.ok);
  ASSERT_TRUE(r.diagnostics.has_code("AK4020")) << r.diagnostics.summary();
  EXPECT_NE(r.diagnostics.summary().find("--model-path"), std::string::npos) << r.diagnostics.summary();
  EXPECT_TRUE(check_deployment(parsed({"--model", "./missing/profile.yaml", "--platform", "cpu"}))
                  .diagnostics.has_code("AK4022"));
}

}  // namespace
}  // namespace attnkit::select
