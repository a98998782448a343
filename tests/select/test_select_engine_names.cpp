// Every backend name the engine (SGLang) accepts is known to attnkit: an alias
// of an attnkit backend, a modelled backend whose capabilities and rules say
// where it runs, or a catalogued refusal. For each name: never AK2002, the
// codes of one deployment that refuses it, and one that runs it where a
// shipped profile can.
#include <cctype>
#include <optional>

#include "select_test_util.hpp"

namespace attnkit::select {
namespace {

using testing::check;
using testing::codes;
using testing::find;

struct Valid {
  DeploymentConfig config;
  std::string component, role, backend;  // the layer it runs, and its canonical backend there
};

struct NameCase {
  std::string name;
  DeploymentConfig refused;
  std::vector<std::string> refused_codes;  // each must be among the refusal's codes
  std::optional<Valid> valid;              // nullopt: no shipped profile can run it
};

DeploymentConfig engine(std::string model, std::string platform, std::string backend, std::string kv = "auto") {
  return {.model = std::move(model), .platform = std::move(platform), .attention_backend = std::move(backend),
          .kv_cache_dtype = std::move(kv)};
}

DeploymentConfig component(std::string model, std::string platform, std::string overrides) {
  return {.model = std::move(model), .platform = std::move(platform), .component_attention_backends = std::move(overrides)};
}

std::string sta_config() {
  const std::string mask = testing::write_temp("names_sta_mask.json", R"({"2_0_0": [1, 1, 1]})");
  return "mask_strategy_file_path=" + mask + ",skip_time_steps=2,tile_size=2,4,4";
}

const std::vector<NameCase>& cases() {
  static const std::vector<NameCase> all = [] {
    std::vector<NameCase> c;
    auto add = [&](std::string name, DeploymentConfig refused, std::vector<std::string> why, std::optional<Valid> valid) {
      c.push_back({std::move(name), std::move(refused), std::move(why), std::move(valid)});
    };
    const Valid llama_sm90_flashinfer{engine("llama", "cuda:sm90", "flashinfer"), "decoder", "decode", "flashinfer"};
    // ---- SGLang LLM --attention-backend choices
    add("triton", engine("llama", "cpu", "triton"), {"AK2101", "AK3001"},
        Valid{engine("llama", "cuda:sm90", "triton"), "decoder", "decode", "triton_attn"});
    add("torch_native", engine("glm-dsa", "cuda:sm120", "torch_native", "fp8_e4m3"), {"AK4018"},
        Valid{engine("llama", "cuda:sm90", "torch_native"), "decoder", "decode", "cuda_sdpa"});
    add("flex_attention", engine("llama", "cuda:sm75", "flex_attention"), {"AK2102"},
        Valid{engine("llama", "cuda:sm90", "flex_attention"), "decoder", "prefill", "flex_attention"});
    for (const char* n : {"dsa", "nsa"}) {
      add(n, engine("llama", "cuda:sm90", n), {"AK4009"},
          Valid{engine("glm-dsa", "cuda:sm90", n), "decoder", "decode", "dsa"});
    }
    add("dsa", engine("glm-dsa", "cuda:sm120", "dsa", "fp8_e4m3"), {"AK2103", "AK4018"}, std::nullopt);
    for (const char* n : {"dsv4", "compressed"}) add(n, engine("glm-dsa", "cuda:sm90", n), {"AK4009"}, std::nullopt);
    add("cutlass_mla", engine("glm-dsa", "cuda:sm90", "cutlass_mla"), {"AK2102"},
        Valid{engine("glm-dsa", "cuda:sm100", "cutlass_mla"), "decoder", "decode", "cutlass_mla"});
    add("cutlass_mla", engine("llama", "cuda:sm100", "cutlass_mla"), {"AK4009"}, std::nullopt);
    add("fa3", engine("llama", "cuda:sm80", "fa3"), {"AK2102"},
        Valid{engine("llama", "cuda:sm90", "fa3"), "decoder", "decode", "fa3"});
    add("fa4", engine("wan", "cuda:sm90", "fa4"), {"AK2102"},
        Valid{engine("wan", "cuda:sm100", "fa4"), "transformer", "self", "fa4"});
    add("flashinfer", engine("glm-dsa", "cuda:sm90", "flashinfer"), {"AK2105"}, llama_sm90_flashinfer);
    add("flashmla", engine("llama", "cuda:sm90", "flashmla"), {"AK4009"},
        Valid{engine("glm-dsa", "cuda:sm90", "flashmla"), "decoder", "decode", "flashmla"});
    add("trtllm_mla", engine("glm-dsa", "cuda:sm90", "trtllm_mla"), {"AK2102"},
        Valid{engine("glm-dsa", "cuda:sm100", "trtllm_mla"), "decoder", "prefill", "trtllm_mla"});
    add("cutedsl_mla", engine("glm-dsa", "cuda:sm100", "cutedsl_mla"), {"AK2122"},
        Valid{{.model = "glm-dsa", .platform = "cuda:sm100", .prefill_attention_backend = "trtllm_mla",
               .decode_attention_backend = "cutedsl_mla"},
              "decoder", "decode", "cutedsl_mla"});
    add("tokenspeed_mla", engine("glm-dsa", "cuda:sm100", "tokenspeed_mla"), {"AK2104"},
        Valid{engine("glm-dsa", "cuda:sm100", "tokenspeed_mla", "fp8_e4m3"), "decoder", "decode", "tokenspeed_mla"});
    add("trtllm_mha", engine("llama", "cuda:sm90", "trtllm_mha"), {"AK2102"},
        Valid{engine("llama", "cuda:sm100", "trtllm_mha"), "decoder", "decode", "trtllm_mha"});
    add("trtllm_mha", engine("llama", "cuda:sm120", "trtllm_mha"), {"AK2103"}, std::nullopt);
    add("dual_chunk_flash_attn", engine("llama", "cuda:sm90", "dual_chunk_flash_attn"), {"AK4009"}, std::nullopt);
    // hpc_ops: the kernels need 64-token pages (SGLang's --page-size 64; 16 when none is given) and 4 or 8
    // query heads per KV head.
    DeploymentConfig hpc_ops_pages_64 = engine("llama", "cuda:sm90", "hpc_ops");
    hpc_ops_pages_64.page_size = 64;
    add("hpc_ops", engine("llama", "cuda:sm90", "hpc_ops"), {"AK2123"}, Valid{hpc_ops_pages_64, "decoder", "decode", "hpc_ops"});
    add("hpc_ops", engine("glm-dsa", "cuda:sm90", "hpc_ops"), {"AK2122", "AK2105"}, std::nullopt);
    add("hpc_ops", engine("llama", "cuda:sm100", "hpc_ops"), {"AK2103"}, std::nullopt);
    for (const char* n : {"minicpm_flashattn", "minicpm_flashinfer"})
      add(n, engine("llama", "cuda:sm90", n), {"AK4009"}, std::nullopt);
    add("aiter", engine("llama", "cuda:sm90", "aiter"), {"AK2101"},
        Valid{engine("llama", "rocm", "aiter"), "decoder", "decode", "aiter"});
    add("wave", engine("llama", "cuda:sm90", "wave"), {"AK2101"},
        Valid{engine("llama", "rocm", "wave"), "decoder", "decode", "wave"});
    // intel_amx runs on the CPU, but `cpu` is this machine, where it is modelled only (AK2111).
    add("intel_amx", engine("llama", "cuda:sm90", "intel_amx"), {"AK2101"}, std::nullopt);
    add("intel_amx", engine("llama", "cpu", "intel_amx"), {"AK2111", "AK3001"}, std::nullopt);
    add("ascend", engine("llama", "cuda:sm90", "ascend"), {"AK2101"},
        Valid{engine("llama", "npu", "ascend"), "decoder", "decode", "ascend"});
    add("intel_xpu", engine("llama", "cuda:sm90", "intel_xpu"), {"AK2101"},
        Valid{engine("llama", "xpu", "intel_xpu"), "decoder", "decode", "intel_xpu"});
    add("mlu", engine("llama", "cuda:sm90", "mlu"), {"AK2120"}, std::nullopt);
    // ---- SGLang diffusion AttentionBackendEnum, lower-cased
    add("fa2", engine("wan", "cuda:sm75", "fa2"), {"AK2102"},
        Valid{engine("wan", "cuda:sm90", "fa2"), "transformer", "self", "fa2"});
    add("fa", engine("wan", "cpu", "fa"), {"AK2101"}, Valid{engine("wan", "cuda:sm90", "fa"), "transformer", "self", "fa3"});
    add("sliding_tile_attn", engine("wan", "cuda:sm90", "sliding_tile_attn"), {"AK3104"},
        Valid{{.model = std::string(ATTNKIT_SOURCE_DIR) + "/tests/select/profiles/sta-video.yaml", .platform = "cpu",
               .dtype = "fp32", .attention_backend = "sliding_tile_attn", .attention_backend_config = sta_config()},
              "transformer", "self", "sliding_tile_attn"});
    add("torch_sdpa", engine("glm-dsa", "cuda:sm120", "torch_sdpa", "fp8_e4m3"), {"AK4018"},
        Valid{engine("wan", "cuda:sm90", "torch_sdpa"), "transformer", "self", "cuda_sdpa"});
    add("torch_cudnn_sdpa", engine("wan", "cpu", "torch_cudnn_sdpa"), {"AK2101"},
        Valid{engine("wan", "cuda:sm90", "torch_cudnn_sdpa"), "transformer", "self", "cudnn"});
    add("dynamic_cudnn_sdpa", engine("wan", "cuda:sm75", "dynamic_cudnn_sdpa"), {"AK2102"},
        Valid{engine("wan", "cuda:sm90", "dynamic_cudnn_sdpa"), "transformer", "self", "dynamic_cudnn_sdpa"});
    add("sage_attn", engine("llama", "cuda:sm90", "sage_attn"), {"AK2109"},
        Valid{engine("wan", "cuda:sm90", "sage_attn"), "transformer", "self", "sage_attn"});
    for (const char* n : {"sage_attn_3", "sage_attn_three"})
      add(n, engine("wan", "cuda:sm90", n), {"AK2102"},
          Valid{engine("wan", "cuda:sm120", n), "transformer", "self", "sage_attn_3"});
    for (const char* n : {"sparge_attn", "video_sparse_attn", "sol_attn", "subblock_sparse_attn", "sparse_video_gen_2_attn",
                          "vmoba_attn", "cube_sparse_attn"})
      add(n, component("wan", "cuda:sm90", std::string("text_encoder=") + n), {"AK4002"},
          Valid{component("wan", "cuda:sm90", std::string("transformer.self=") + n), "transformer", "self", n});
    add("video_sparse_attn_h3", component("minimax-h3", "cuda:sm90", "text_encoder=video_sparse_attn_h3"), {"AK4002"},
        Valid{component("fast-h3", "cuda:sm90", "transformer=video_sparse_attn_h3"), "transformer", "self",
              "video_sparse_attn_h3"});
    add("hybrid_window_attn_h3", engine("fast-h3", "cuda:sm90", "hybrid_window_attn_h3"), {"AK4009"},
        Valid{component("vdn-h3", "cuda:sm90", "transformer=hybrid_window_attn_h3"), "transformer", "self",
              "hybrid_window_attn_h3"});
    add("aiter", engine("wan", "cuda:sm90", "aiter"), {"AK2101"},
        Valid{engine("wan", "rocm", "aiter"), "transformer", "self", "aiter"});
    add("aiter_sage", engine("wan", "cuda:sm90", "aiter_sage"), {"AK2101"},
        Valid{engine("wan", "rocm", "aiter_sage"), "transformer", "self", "aiter_sage"});
    for (const char* n : {"sla_attn", "sage_sla_attn"})
      add(n, component("wan", "cuda:sm90", std::string("transformer.self=") + n), {"AK4009"}, std::nullopt);
    for (const char* n : {"laser_attn", "block_sparse_attn", "rain_fusion_attn"})
      add(n, component("wan", "cuda:sm90", std::string("transformer.self=") + n), {"AK2101"},
          Valid{component("wan", "npu", std::string("transformer.self=") + n), "transformer", "self", n});
    // fp8_fa_sm120: head dim 128 only (the engine sends other calls to cuDNN SDPA; attnkit names the refusal).
    add("fp8_fa_sm120", component("wan", "cuda:sm120", "text_encoder=fp8_fa_sm120"), {"AK2105"},
        Valid{component("wan", "cuda:sm120", "transformer.self=fp8_fa_sm120"), "transformer", "self", "fp8_fa_sm120"});
    add("fp8_fa_sm120", engine("wan", "cuda:sm90", "fp8_fa_sm120"), {"AK2102"}, std::nullopt);
    add("no_attention", engine("wan", "cuda:sm90", "no_attention"), {"AK2121"}, std::nullopt);
    return c;
  }();
  return all;
}

// The names of the brief: SGLang's LLM choices and its diffusion enum.
const char* const kEngineNames[] = {
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "dsv4", "compressed", "cutlass_mla", "fa3", "fa4",
    "flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "dual_chunk_flash_attn",
    "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu", "mlu",
    "fa2", "fa", "sliding_tile_attn", "torch_sdpa", "torch_cudnn_sdpa", "dynamic_cudnn_sdpa", "sage_attn", "sage_attn_3",
    "sage_attn_three", "sparge_attn", "video_sparse_attn", "video_sparse_attn_h3", "hybrid_window_attn_h3",
    "sparse_video_gen_2_attn", "vmoba_attn", "aiter_sage", "sla_attn", "sage_sla_attn", "laser_attn",
    "block_sparse_attn", "rain_fusion_attn", "sol_attn", "subblock_sparse_attn", "cube_sparse_attn", "fp8_fa_sm120",
    "no_attention"};

TEST(SelectEngineNames, NoEngineNameIsUnknown) {
  for (const char* name : kEngineNames) {
    // As written, and as SGLang's enum prints it (upper case) with '-' for '_'.
    std::string upper = name;
    for (char& ch : upper) ch = ch == '_' ? '-' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    for (const std::string& written : {std::string(name), upper})
      for (const char* model : {"wan", "llama"}) {
        const CheckResult r = check(engine(model, "cuda:sm90", written));
        EXPECT_FALSE(r.diagnostics.has_code("AK2002")) << written << " on " << model << ": " << codes(r.diagnostics);
        EXPECT_FALSE(r.diagnostics.has_code("AK0000")) << written;
      }
  }
}

TEST(SelectEngineNames, EveryNameHasACase) {
  for (const char* name : kEngineNames) {
    bool refused = false;
    for (const NameCase& c : cases()) refused |= c.name == name;
    EXPECT_TRUE(refused) << name << " has no refusal case";
  }
}

TEST(SelectEngineNames, RefusedWithItsCodes) {
  for (const NameCase& c : cases()) {
    const CheckResult r = check(c.refused);
    EXPECT_FALSE(r.ok) << c.name;
    EXPECT_FALSE(r.diagnostics.has_code("AK2002")) << c.name;
    for (const std::string& code : c.refused_codes)
      EXPECT_TRUE(r.diagnostics.has_code(code)) << c.name << " on " << c.refused.model << " / " << c.refused.platform
                                                << ": expected " << code << ", got " << codes(r.diagnostics);
  }
}

TEST(SelectEngineNames, ValidWhereAProfileCanRunIt) {
  for (const NameCase& c : cases()) {
    if (!c.valid) continue;
    const CheckResult r = check(c.valid->config);
    EXPECT_TRUE(r.ok) << c.name << " on " << c.valid->config.model << " / " << c.valid->config.platform << ": "
                      << codes(r.diagnostics);
    const Decision* d = find(r, c.valid->component, c.valid->role);
    ASSERT_NE(d, nullptr) << c.name;
    EXPECT_EQ(d->backend, c.valid->backend) << c.name;
    EXPECT_TRUE(d->ok) << c.name;
  }
}

TEST(SelectEngineNames, AliasesNameTheSameBackend) {
  const Registry& reg = default_registry();
  const Platform h200 = *parse_platform("cuda:sm90");
  EXPECT_EQ(resolve_backend_name("nsa", h200, reg), "dsa");
  EXPECT_EQ(resolve_backend_name("NSA", h200, reg), "dsa");
  EXPECT_EQ(resolve_backend_name("compressed", h200, reg), "dsv4");
  EXPECT_EQ(resolve_backend_name("sage_attn_three", h200, reg), "sage_attn_3");
  EXPECT_EQ(resolve_backend_name("SAGE-ATTN-3", h200, reg), "sage_attn_3");
  // Known to the engine but not provided: no backend, a catalogued refusal.
  EXPECT_EQ(resolve_backend_name("mlu", h200, reg), "");
  EXPECT_EQ(unknown_backend("mlu", reg).code, "AK2120");
  EXPECT_EQ(unknown_backend("MLU", reg).code, "AK2120");
  EXPECT_EQ(unknown_backend("no_attention", reg).code, "AK2121");
  EXPECT_EQ(unknown_backend("mlux", reg).code, "AK2002");
}

// None of the engine's backends is picked by auto: the auto choices stay those of design 2.1.
TEST(SelectEngineNames, NeverAutoPicked) {
  const Registry& reg = default_registry();
  for (const char* name : {"flex_attention", "dsa", "dsv4", "cutlass_mla", "flashmla", "trtllm_mla", "cutedsl_mla",
                           "tokenspeed_mla", "trtllm_mha", "dual_chunk_flash_attn", "hpc_ops", "minicpm_flashattn",
                           "minicpm_flashinfer", "wave", "intel_amx", "ascend", "intel_xpu", "dynamic_cudnn_sdpa",
                           "sage_attn_3", "sparse_video_gen_2_attn", "vmoba_attn", "cube_sparse_attn", "aiter_sage",
                           "sla_attn", "sage_sla_attn", "laser_attn", "block_sparse_attn", "rain_fusion_attn",
                           "fp8_fa_sm120"}) {
    const Backend* b = reg.find(name);
    ASSERT_NE(b, nullptr) << name;
    EXPECT_FALSE(b->capabilities().auto_selectable) << name;
    EXPECT_FALSE(b->capabilities().built) << name;
  }
  for (const char* plat : {"cuda:sm90", "cuda:sm100", "cuda:sm120", "rocm", "npu", "xpu", "cpu"})
    for (const char* model : {"llama", "glm-dsa", "wan"}) {
      const CheckResult r = check({.model = model, .platform = plat});
      for (const Decision& d : r.selections) EXPECT_FALSE(reg.find(d.backend) && !reg.find(d.backend)->capabilities().auto_selectable) << model << " " << plat << " " << d.backend;
    }
}

}  // namespace
}  // namespace attnkit::select
