// Golden decisions: every shipped profile on every named platform, with auto
// selection. A change in the registry or the preference orders shows up here.
#include "select_test_util.hpp"

namespace attnkit::select {
namespace {

struct Golden {
  const char* model;
  const char* platform;
  bool ok;
  const char* decisions;  // "component.role=backend ...", "-" for none
};

// Reviewed against design 2.1: sm_90 -> fa3, sm_80 -> fa2, sm_100 dense
// non-causal -> cudnn, sm_120 -> sdpa, ROCm fa (LLM: aiter), XPU xpu_flash,
// MUSA fa, MPS and NPU sdpa, CPU cpu_flash (paged KV caches included). LLMs
// with a paged KV cache take fa3 on sm_90 (its paged instances) and go to
// flashinfer where fa2 (no paged KV) refuses;
// VDN-H3 needs its CUDA-only hybrid kernel. The Kimi-K3 vision tower follows
// the engine's vision order inside its allow-list: fa3 on Hopper, fa4 on
// Blackwell, aiter_attn on ROCm, else triton_attn, else sdpa.
const Golden kGolden[] = {
    {"minimax-h3", "cuda:sm80", true, "transformer.self=fa2 transformer.cross=fa2 token_refiner.self=fa2 text_encoder.self=cuda_sdpa vae.self=fa2 audio_vae.self=cuda_sdpa"},
    {"minimax-h3", "cuda:sm90", true, "transformer.self=fa3 transformer.cross=fa3 token_refiner.self=fa3 text_encoder.self=cuda_sdpa vae.self=fa3 audio_vae.self=cuda_sdpa"},
    {"minimax-h3", "cuda:sm100", true, "transformer.self=cudnn transformer.cross=cudnn token_refiner.self=cudnn text_encoder.self=cuda_sdpa vae.self=cudnn audio_vae.self=cuda_sdpa"},
    {"minimax-h3", "cuda:sm120", true, "transformer.self=cuda_sdpa transformer.cross=cuda_sdpa token_refiner.self=cuda_sdpa text_encoder.self=cuda_sdpa vae.self=cuda_sdpa audio_vae.self=cuda_sdpa"},
    {"minimax-h3", "rocm", true, "transformer.self=fa transformer.cross=fa token_refiner.self=fa text_encoder.self=sdpa vae.self=fa audio_vae.self=sdpa"},
    {"minimax-h3", "xpu", true, "transformer.self=xpu_flash transformer.cross=xpu_flash token_refiner.self=xpu_flash text_encoder.self=sdpa vae.self=xpu_flash audio_vae.self=sdpa"},
    {"minimax-h3", "musa", true, "transformer.self=fa transformer.cross=fa token_refiner.self=fa text_encoder.self=sdpa vae.self=fa audio_vae.self=sdpa"},
    {"minimax-h3", "mps", true, "transformer.self=sdpa transformer.cross=sdpa token_refiner.self=sdpa text_encoder.self=sdpa vae.self=sdpa audio_vae.self=sdpa"},
    {"minimax-h3", "npu", true, "transformer.self=sdpa transformer.cross=sdpa token_refiner.self=sdpa text_encoder.self=sdpa vae.self=sdpa audio_vae.self=sdpa"},
    {"minimax-h3", "cpu", true, "transformer.self=cpu_flash transformer.cross=cpu_flash token_refiner.self=cpu_flash text_encoder.self=cpu_flash vae.self=cpu_flash audio_vae.self=cpu_flash"},
    {"vdn-h3", "cuda:sm80", true, "transformer.self=hybrid_window_attn_h3 transformer.cross=fa2 token_refiner.self=fa2 text_encoder.self=cuda_sdpa vae.self=fa2 audio_vae.self=cuda_sdpa"},
    {"vdn-h3", "cuda:sm90", true, "transformer.self=hybrid_window_attn_h3 transformer.cross=fa3 token_refiner.self=fa3 text_encoder.self=cuda_sdpa vae.self=fa3 audio_vae.self=cuda_sdpa"},
    {"vdn-h3", "cuda:sm100", true, "transformer.self=hybrid_window_attn_h3 transformer.cross=cudnn token_refiner.self=cudnn text_encoder.self=cuda_sdpa vae.self=cudnn audio_vae.self=cuda_sdpa"},
    {"vdn-h3", "cuda:sm120", true, "transformer.self=hybrid_window_attn_h3 transformer.cross=cuda_sdpa token_refiner.self=cuda_sdpa text_encoder.self=cuda_sdpa vae.self=cuda_sdpa audio_vae.self=cuda_sdpa"},
    {"vdn-h3", "rocm", false, "transformer.self=- transformer.cross=fa token_refiner.self=fa text_encoder.self=sdpa vae.self=fa audio_vae.self=sdpa"},
    {"vdn-h3", "xpu", false, "transformer.self=- transformer.cross=xpu_flash token_refiner.self=xpu_flash text_encoder.self=sdpa vae.self=xpu_flash audio_vae.self=sdpa"},
    {"vdn-h3", "musa", false, "transformer.self=- transformer.cross=fa token_refiner.self=fa text_encoder.self=sdpa vae.self=fa audio_vae.self=sdpa"},
    {"vdn-h3", "mps", false, "transformer.self=- transformer.cross=sdpa token_refiner.self=sdpa text_encoder.self=sdpa vae.self=sdpa audio_vae.self=sdpa"},
    {"vdn-h3", "npu", false, "transformer.self=- transformer.cross=sdpa token_refiner.self=sdpa text_encoder.self=sdpa vae.self=sdpa audio_vae.self=sdpa"},
    {"vdn-h3", "cpu", true, "transformer.self=hybrid_window_attn_h3 transformer.cross=cpu_flash token_refiner.self=cpu_flash text_encoder.self=cpu_flash vae.self=cpu_flash audio_vae.self=cpu_flash"},
    {"fast-h3", "cuda:sm80", true, "transformer.self=fa2 transformer.cross=fa2 token_refiner.self=fa2 text_encoder.self=cuda_sdpa vae.self=fa2 audio_vae.self=cuda_sdpa"},
    {"fast-h3", "cuda:sm90", true, "transformer.self=fa3 transformer.cross=fa3 token_refiner.self=fa3 text_encoder.self=cuda_sdpa vae.self=fa3 audio_vae.self=cuda_sdpa"},
    {"fast-h3", "cuda:sm100", true, "transformer.self=cudnn transformer.cross=cudnn token_refiner.self=cudnn text_encoder.self=cuda_sdpa vae.self=cudnn audio_vae.self=cuda_sdpa"},
    {"fast-h3", "cuda:sm120", true, "transformer.self=cuda_sdpa transformer.cross=cuda_sdpa token_refiner.self=cuda_sdpa text_encoder.self=cuda_sdpa vae.self=cuda_sdpa audio_vae.self=cuda_sdpa"},
    {"fast-h3", "rocm", true, "transformer.self=fa transformer.cross=fa token_refiner.self=fa text_encoder.self=sdpa vae.self=fa audio_vae.self=sdpa"},
    {"fast-h3", "xpu", true, "transformer.self=xpu_flash transformer.cross=xpu_flash token_refiner.self=xpu_flash text_encoder.self=sdpa vae.self=xpu_flash audio_vae.self=sdpa"},
    {"fast-h3", "musa", true, "transformer.self=fa transformer.cross=fa token_refiner.self=fa text_encoder.self=sdpa vae.self=fa audio_vae.self=sdpa"},
    {"fast-h3", "mps", true, "transformer.self=sdpa transformer.cross=sdpa token_refiner.self=sdpa text_encoder.self=sdpa vae.self=sdpa audio_vae.self=sdpa"},
    {"fast-h3", "npu", true, "transformer.self=sdpa transformer.cross=sdpa token_refiner.self=sdpa text_encoder.self=sdpa vae.self=sdpa audio_vae.self=sdpa"},
    {"fast-h3", "cpu", true, "transformer.self=cpu_flash transformer.cross=cpu_flash token_refiner.self=cpu_flash text_encoder.self=cpu_flash vae.self=cpu_flash audio_vae.self=cpu_flash"},
    {"wan", "cuda:sm80", true, "transformer.self=fa2 transformer.cross=fa2 text_encoder.self=fa2 vae.self=fa2"},
    {"wan", "cuda:sm90", true, "transformer.self=fa3 transformer.cross=fa3 text_encoder.self=fa3 vae.self=fa3"},
    {"wan", "cuda:sm100", true, "transformer.self=cudnn transformer.cross=cudnn text_encoder.self=cudnn vae.self=cudnn"},
    {"wan", "cuda:sm120", true, "transformer.self=cuda_sdpa transformer.cross=cuda_sdpa text_encoder.self=cuda_sdpa vae.self=cuda_sdpa"},
    {"wan", "rocm", true, "transformer.self=fa transformer.cross=fa text_encoder.self=fa vae.self=fa"},
    {"wan", "xpu", true, "transformer.self=xpu_flash transformer.cross=xpu_flash text_encoder.self=xpu_flash vae.self=xpu_flash"},
    {"wan", "musa", true, "transformer.self=fa transformer.cross=fa text_encoder.self=fa vae.self=fa"},
    {"wan", "mps", true, "transformer.self=sdpa transformer.cross=sdpa text_encoder.self=sdpa vae.self=sdpa"},
    {"wan", "npu", true, "transformer.self=sdpa transformer.cross=sdpa text_encoder.self=sdpa vae.self=sdpa"},
    {"wan", "cpu", true, "transformer.self=cpu_flash transformer.cross=cpu_flash text_encoder.self=cpu_flash vae.self=cpu_flash"},
    {"flux", "cuda:sm80", true, "transformer.self=fa2 text_encoder.self=fa2 vae.self=fa2"},
    {"flux", "cuda:sm90", true, "transformer.self=fa3 text_encoder.self=fa3 vae.self=fa3"},
    {"flux", "cuda:sm100", true, "transformer.self=cudnn text_encoder.self=cudnn vae.self=cudnn"},
    {"flux", "cuda:sm120", true, "transformer.self=cuda_sdpa text_encoder.self=cuda_sdpa vae.self=cuda_sdpa"},
    {"flux", "rocm", true, "transformer.self=fa text_encoder.self=fa vae.self=fa"},
    {"flux", "xpu", true, "transformer.self=xpu_flash text_encoder.self=xpu_flash vae.self=xpu_flash"},
    {"flux", "musa", true, "transformer.self=fa text_encoder.self=fa vae.self=fa"},
    {"flux", "mps", true, "transformer.self=sdpa text_encoder.self=sdpa vae.self=sdpa"},
    {"flux", "npu", true, "transformer.self=sdpa text_encoder.self=sdpa vae.self=sdpa"},
    {"flux", "cpu", true, "transformer.self=cpu_flash text_encoder.self=cpu_flash vae.self=cpu_flash"},
    {"llama", "cuda:sm80", true, "decoder.prefill=flashinfer decoder.decode=flashinfer"},
    {"llama", "cuda:sm90", true, "decoder.prefill=fa3 decoder.decode=fa3"},
    {"llama", "cuda:sm100", true, "decoder.prefill=fa4 decoder.decode=fa4"},
    {"llama", "cuda:sm120", true, "decoder.prefill=flashinfer decoder.decode=flashinfer"},
    {"llama", "rocm", true, "decoder.prefill=aiter decoder.decode=aiter"},
    {"llama", "xpu", true, "decoder.prefill=sdpa decoder.decode=sdpa"},
    {"llama", "musa", true, "decoder.prefill=fa decoder.decode=fa"},
    {"llama", "mps", true, "decoder.prefill=sdpa decoder.decode=sdpa"},
    {"llama", "npu", true, "decoder.prefill=sdpa decoder.decode=sdpa"},
    {"llama", "cpu", true, "decoder.prefill=cpu_flash decoder.decode=cpu_flash"},
    {"glm-dsa", "cuda:sm80", true, "decoder.prefill=triton_attn decoder.decode=triton_attn"},
    {"glm-dsa", "cuda:sm90", true, "decoder.prefill=triton_attn decoder.decode=triton_attn"},
    {"glm-dsa", "cuda:sm100", true, "decoder.prefill=fa4 decoder.decode=fa4"},
    {"glm-dsa", "cuda:sm120", true, "decoder.prefill=triton_attn decoder.decode=triton_attn"},
    {"glm-dsa", "rocm", true, "decoder.prefill=fa decoder.decode=fa"},
    {"glm-dsa", "xpu", true, "decoder.prefill=sdpa decoder.decode=sdpa"},
    {"glm-dsa", "musa", true, "decoder.prefill=fa decoder.decode=fa"},
    {"glm-dsa", "mps", true, "decoder.prefill=sdpa decoder.decode=sdpa"},
    {"glm-dsa", "npu", true, "decoder.prefill=sdpa decoder.decode=sdpa"},
    {"glm-dsa", "cpu", true, "decoder.prefill=cpu_flash decoder.decode=cpu_flash"},
    {"kimi-k3-vl", "cuda:sm80", true, "vision.self=triton_attn decoder.prefill=flashinfer decoder.decode=flashinfer"},
    {"kimi-k3-vl", "cuda:sm90", true, "vision.self=fa3 decoder.prefill=fa3 decoder.decode=fa3"},
    {"kimi-k3-vl", "cuda:sm100", true, "vision.self=fa4 decoder.prefill=fa4 decoder.decode=fa4"},
    {"kimi-k3-vl", "cuda:sm120", true, "vision.self=triton_attn decoder.prefill=flashinfer decoder.decode=flashinfer"},
    {"kimi-k3-vl", "rocm", true, "vision.self=aiter decoder.prefill=aiter decoder.decode=aiter"},
    {"kimi-k3-vl", "xpu", true, "vision.self=sdpa decoder.prefill=sdpa decoder.decode=sdpa"},
    {"kimi-k3-vl", "musa", true, "vision.self=sdpa decoder.prefill=fa decoder.decode=fa"},
    {"kimi-k3-vl", "mps", true, "vision.self=sdpa decoder.prefill=sdpa decoder.decode=sdpa"},
    {"kimi-k3-vl", "npu", true, "vision.self=sdpa decoder.prefill=sdpa decoder.decode=sdpa"},
    {"kimi-k3-vl", "cpu", true, "vision.self=cpu_flash decoder.prefill=cpu_flash decoder.decode=cpu_flash"},
};

std::string render(const CheckResult& r) {
  std::string out;
  for (const Decision& d : r.selections)
    out += (out.empty() ? "" : " ") + d.component + "." + d.role + "=" + (d.backend.empty() ? "-" : d.backend);
  return out;
}

TEST(SelectGolden, EveryProfileOnEveryPlatform) {
  int checked = 0;
  for (const Golden& g : kGolden) {
    const CheckResult r = testing::check({.model = g.model, .platform = g.platform});
    EXPECT_EQ(r.ok, g.ok) << g.model << " on " << g.platform << "\n" << r.diagnostics.summary();
    EXPECT_EQ(render(r), g.decisions) << g.model << " on " << g.platform;
    for (const Decision& d : r.selections)
      if (d.ok) EXPECT_TRUE(d.decided_by == Level::auto_select || d.decided_by == Level::declared_default);
    ++checked;
  }
  EXPECT_EQ(checked, 8 * 10);
  EXPECT_EQ(shipped_profile_names().size(), 8u);
}

TEST(SelectGolden, FailuresSayWhy) {
  const CheckResult r = testing::check({.model = "vdn-h3", .platform = "mps"});
  ASSERT_FALSE(r.ok);
  const Decision* d = testing::find(r, "transformer", "self");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->ok);
  EXPECT_NE(d->fallback_reason.find("AK3005"), std::string::npos) << d->fallback_reason;
  ASSERT_GE(d->rejected.size(), 2u);
  EXPECT_EQ(d->rejected[0].backend, "hybrid_window_attn_h3");
  EXPECT_EQ(d->rejected[0].code, "AK2101");
  EXPECT_EQ(d->rejected[1].code, "AK4007");  // cpu_flash would compute another model
}

TEST(SelectGolden, GlmDsaSparseMlaOnSm120WithFp8Cache) {
  const CheckResult r = testing::check({.model = "glm-dsa", .platform = "cuda:sm120", .kv_cache_dtype = "fp8_e4m3"});
  ASSERT_TRUE(r.ok) << r.diagnostics.summary();
  EXPECT_EQ(testing::find(r, "decoder", "prefill")->backend, "flashinfer_sparse_mla");
  EXPECT_EQ(testing::find(r, "decoder", "decode")->backend, "flashinfer_sparse_mla");
  const CheckResult bf16 = testing::check({.model = "glm-dsa", .platform = "cuda:sm120"});
  ASSERT_TRUE(bf16.ok);
  const Decision* d = testing::find(bf16, "decoder", "decode");
  EXPECT_NE(d->backend, "flashinfer_sparse_mla");
  EXPECT_EQ(d->rejected.at(0).backend, "flashinfer_sparse_mla");
  EXPECT_EQ(d->rejected.at(0).code, "AK4016");  // its k/v dtype is fp8_e4m3 only, stated with the whole rule
  EXPECT_NE(d->rejected.at(0).reason.find("fp8_e4m3"), std::string::npos);
  EXPECT_NE(d->rejected.at(0).reason.find("sm_120 or sm_121"), std::string::npos);
}

}  // namespace
}  // namespace attnkit::select
