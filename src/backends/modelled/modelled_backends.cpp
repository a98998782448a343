// The modelled backends as one table: name, description, capabilities. A row
// reads like the capability matrix printed by `attnkit backends`.
#include "backends/modelled/modelled_backends.hpp"

#include <functional>
#include <utility>

namespace attnkit {
namespace {

using PK = PlatformKind;
using MK = MaskKind;

constexpr DTypeSet kHalf{DType::f16, DType::bf16};
constexpr DTypeSet kHalfF32{DType::f16, DType::bf16, DType::f32};
const EnumSet<MK> kDenseMasks{MK::none, MK::causal, MK::sliding_window};
const EnumSet<MK> kAllMasks{MK::none, MK::causal, MK::sliding_window, MK::custom};
const EnumSet<Layout> kAllLayouts{Layout::bshd, Layout::bhsd, Layout::thd};
const EnumSet<Layout> kPadded{Layout::bshd, Layout::bhsd};

// A backend's own rules beyond the capability model: adds its reasons.
using ExtraCheck = std::function<void(const Problem&, const Platform&, Diagnostics&)>;

class ModelledBackend final : public Backend {
 public:
  ModelledBackend(std::string name, std::string description, Capabilities caps, ExtraCheck extra)
      : name_(std::move(name)), description_(std::move(description)), caps_(std::move(caps)),
        extra_(std::move(extra)) {
    caps_.built = false;
  }
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }
  const Capabilities& capabilities() const override { return caps_; }
  Diagnostics check(const Problem& p, const Platform& platform) const override {
    Diagnostics why = Backend::check(p, platform);
    if (extra_) extra_(p, platform, why);
    return why;
  }
  Result<std::unique_ptr<Plan>> plan(const Problem& p, const Platform& platform) const override {
    Diagnostics why = check(p, platform);
    if (!why.has_code("AK2111")) why.add("AK2111", {{"backend", name_}, {"detail", " (modelled backend)"}});
    return why;
  }

 private:
  std::string name_;
  std::string description_;
  Capabilities caps_;
  ExtraCheck extra_;
};

struct Row {
  const char* name;
  const char* description;
  Capabilities caps;
  ExtraCheck extra = nullptr;
};

// flashinfer_sparse_mla: an fp8_e4m3 latent KV cache on sm_120 / sm_121 only
// (the model half of its rule, GLM-DSA weights, is `requires_weights`). Its
// platform and cache reasons state the whole rule (AK4017, AK4016) in place
// of the generic platform / arch ones.
void sparse_mla_rules(const Problem& p, const Platform& platform, Diagnostics& why) {
  Diagnostics out;
  bool wrong_platform = false;
  for (const Diagnostic& d : why) {
    if (d.code == "AK2101" || d.code == "AK2102" || d.code == "AK2103") wrong_platform = true;
    else out.add(d);
  }
  if (wrong_platform) out.add("AK4017", {{"platform", platform.label()}});
  if (p.k_dtype() != DType::f8e4m3) out.add("AK4016", {{"kv_dtype", std::string(dtype_name(p.k_dtype()))}});
  why = std::move(out);
}

// Starting point for a CUDA kernel of the flash family.
Capabilities cuda_caps(int min_sm, int max_sm, DTypeSet dtypes, std::vector<int> dims) {
  Capabilities c;
  c.platforms = {PK::cuda};
  c.min_sm = min_sm;
  c.max_sm = max_sm;
  c.dtypes = dtypes;
  c.head_dims = std::move(dims);
  c.masks = kDenseMasks;
  c.layouts = kAllLayouts;
  return c;
}

// Starting point for a backend of platforms without an sm range (ROCm, XPU,
// MUSA, MPS, NPU, the CPU): the dense masks, every layout, a paged KV cache.
Capabilities platform_caps(EnumSet<PK> platforms, DTypeSet dtypes, std::vector<int> dims) {
  Capabilities c;
  c.platforms = platforms;
  c.dtypes = dtypes;
  c.head_dims = std::move(dims);
  c.masks = kDenseMasks;
  c.layouts = kAllLayouts;
  c.paged_kv = true;
  return c;
}

// A sparse DiT backend: dense problems in, its own sparsity pattern inside.
// Its kernels return no LSE, so it cannot take part in ring attention.
Capabilities sparse_caps(std::vector<int> dims) {
  Capabilities c = cuda_caps(80, 0, kHalf, std::move(dims));
  c.masks = {MK::none};
  c.layouts = kPadded;
  c.sparse = true;
  c.lse = false;
  c.softcap = c.sinks = false;
  c.distinct_v_head_dim = false;
  return c;
}

// A backend whose kernel reads a layout of its own from the checkpoint (an MLA
// latent cache, a sparse indexer, compressed KV): LLM-side, paged, causal.
// `weights` are the checkpoint features it cannot run without (AK4009 where
// the model's checkpoint lacks one); head dims are those of MLA layers as
// profiles describe them (192/128 for the uncompressed prefill form, 576/512
// for the absorbed latent form).
Capabilities mla_caps(int min_sm, int max_sm, DTypeSet kv, std::vector<std::string> weights) {
  Capabilities c = cuda_caps(min_sm, max_sm, kHalf, {128, 192, 512, 576});
  c.kv_dtypes = kv;
  c.masks = {MK::causal};
  c.paged_kv = true;
  c.sinks = c.softcap = false;
  c.requires_weights = std::move(weights);
  return c;
}

// A layer rule of the backend beyond the capability model (AK2122).
void add_rule(Diagnostics& why, std::string_view backend, std::string rule) {
  why.add("AK2122", {{"backend", std::string(backend)}, {"rule", std::move(rule)}});
}

// cutedsl_mla runs decode steps only (one query per sequence); SGLang pairs it
// with trtllm_mla for prefill.
void decode_only_rules(const Problem& p, const Platform&, Diagnostics& why) {
  if (p.seqlen_q > 1)
    add_rule(why, "cutedsl_mla",
             "it runs decode steps only (one query per sequence; this layer has " + std::to_string(p.seqlen_q) +
                 "); use --prefill-attention-backend trtllm_mla with --decode-attention-backend cutedsl_mla");
}

// hpc_ops (Tencent HPC-Ops paged MHA): 4 or 8 query heads per KV head, and a
// KV cache of 64-token pages (SGLang refuses any other --page-size).
void hpc_ops_rules(const Problem& p, const Platform&, Diagnostics& why) {
  const int group = p.heads_kv > 0 ? p.heads_q / p.heads_kv : 0;
  if (group != 4 && group != 8)
    add_rule(why, "hpc_ops",
             "its kernels take 4 or 8 query heads per KV head; this layer has " + std::to_string(p.heads_q) + "/" +
                 std::to_string(p.heads_kv));
  if (p.paged_kv && p.paged_kv->page_size != 64)
    why.add("AK2123", {{"backend", "hpc_ops"}, {"allowed", "64"}, {"page_size", std::to_string(p.paged_kv->page_size)}});
}

// fp8_fa_sm120: one dense self-attention sequence (q, k, v of one shape);
// SGLang sends every other call to cuDNN SDPA, which attnkit names instead of
// substituting it.
void fp8_fa_sm120_rules(const Problem& p, const Platform&, Diagnostics& why) {
  if (p.seqlen_q != p.seqlen_k)
    add_rule(why, "fp8_fa_sm120",
             "its kernel runs self-attention only (queries and keys of one length; this layer has " +
                 std::to_string(p.seqlen_q) + " queries over " + std::to_string(p.seqlen_k) +
                 " keys); use cudnn (torch_cudnn_sdpa) for this layer");
  if (p.batch != 1) add_rule(why, "fp8_fa_sm120", "its kernel runs one sequence per call (batch 1)");
}

template <class F>
Capabilities with(Capabilities c, F&& edit) {
  edit(c);
  return c;
}

std::vector<Row> modelled_table() {
  const std::vector<int> flash_dims{64, 96, 128, 192, 256};
  std::vector<Row> rows;
  // ---- CUDA flash family: fa2, fa3 and cuda_sdpa are real backends (src/backends/cuda) in every build,
  // and so is cudnn (src/backends/cudnn).
  rows.push_back({"fa4", "flash attention, Blackwell kernel (sm_100/sm_103)",
                  with(cuda_caps(100, 103, kHalf, {64, 96, 128, 192}), [](Capabilities& c) {
                    c.paged_kv = true;
                    c.sinks = false;
                  })});
  // ---- quantized / sparse DiT backends (sliding_tile_attn, sparge_attn and sol_attn are real: src/backends/sparse)
  rows.push_back({"sage_attn", "SageAttention: int8 QK with K smoothing, fp16/fp8 PV",
                  with(cuda_caps(80, 0, kHalf, {64, 96, 128}), [](Capabilities& c) {
                    c.platforms = {PK::cuda, PK::musa};
                    c.masks = {MK::none, MK::causal};
                    c.softcap = c.sinks = false;
                    c.distinct_v_head_dim = false;
                  })});
  rows.push_back({"video_sparse_attn", "video sparse attention (coarse top-k cubes + fine block attention)",
                  sparse_caps({64, 128})});
  rows.push_back({"subblock_sparse_attn", "sub-block sparse attention for video DiTs", sparse_caps({64, 128})});
  // ---- LLM-side CUDA backends
  rows.push_back({"flashinfer", "FlashInfer prefill/decode kernels (paged KV, split-KV decode)",
                  with(cuda_caps(75, 0, kHalf, {64, 128, 256}), [](Capabilities& c) {
                    c.kv_dtypes = {DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2};
                    c.paged_kv = true;
                  })});
  rows.push_back({"flashinfer_cudnn", "FlashInfer with its cuDNN prefill/decode path",
                  with(cuda_caps(80, 0, kHalf, {64, 128, 256}), [](Capabilities& c) {
                    c.paged_kv = true;
                    c.required_library = "cudnn";
                  })});
  rows.push_back({"flashinfer_sparse_mla", "FlashInfer sparse MLA (DeepSeek sparse attention), sm_120/121",
                  with(cuda_caps(120, 121, {DType::bf16}, {128, 192}), [](Capabilities& c) {
                    c.kv_dtypes = {DType::f16, DType::bf16, DType::f32, DType::f8e4m3, DType::f8e5m2};  // sparse_mla_rules: fp8_e4m3, with the whole rule
                    c.paged_kv = true;
                    c.masks = {MK::causal};
                    c.block_sparse = true;
                    c.requires_weights = {"sparse_mla"};
                  }),
                  sparse_mla_rules});
  rows.push_back({"triton_attn", "Triton attention kernels (CUDA and ROCm)",
                  with(cuda_caps(75, 0, kHalfF32, {}), [](Capabilities& c) {
                    c.platforms = {PK::cuda, PK::rocm};
                    c.kv_dtypes = {DType::f16, DType::bf16, DType::f32, DType::f8e4m3, DType::f8e5m2};
                    c.paged_kv = true;
                  })});
  // ---- other platforms (modelled for validation)
  rows.push_back({"aiter", "AMD AITER attention (ROCm; LLM default)",
                  with(platform_caps({PK::rocm}, kHalf, {64, 128, 256}), [](Capabilities& c) {
                    c.kv_dtypes = {DType::f16, DType::bf16, DType::f8e4m3};
                  })});
  rows.push_back({"fa", "flash attention on ROCm (CK), MUSA and NPU (ring-capable)",
                  platform_caps({PK::rocm, PK::musa, PK::npu}, kHalf, flash_dims)});
  rows.push_back({"xpu_flash", "Intel XPU flash attention",
                  with(platform_caps({PK::xpu}, kHalf, {64, 96, 128, 192, 256}),
                       [](Capabilities& c) { c.paged_kv = false; })});
  rows.push_back({"sdpa", "the platform's scaled-dot-product attention (ROCm, XPU, MUSA, MPS, NPU)",
                  with(platform_caps({PK::rocm, PK::xpu, PK::musa, PK::mps, PK::npu}, kHalfF32, {}),
                       [](Capabilities& c) {
                         c.masks = kAllMasks;
                         c.lse = false;  // F.scaled_dot_product_attention returns no LSE
                       })});
  // ---- engine backends (SGLang names), modelled so that `check` can say
  // where each runs. None is ever picked by auto: they run only when named.
  auto engine = [&](const char* name, const char* description, Capabilities c, ExtraCheck extra = nullptr) {
    c.auto_selectable = false;
    rows.push_back({name, description, std::move(c), std::move(extra)});
  };
  const DTypeSet kv_fp8{DType::f16, DType::bf16, DType::f8e4m3};
  // LLM side (--attention-backend, --prefill/--decode-attention-backend)
  engine("flex_attention", "PyTorch FlexAttention (block masks over the paged KV pool; no CUDA graphs)",
         with(cuda_caps(80, 0, kHalfF32, {}), [](Capabilities& c) {
           c.platforms = {PK::cuda, PK::rocm};
           c.masks = kAllMasks;
           c.paged_kv = true;
         }));
  engine("dsa", "DeepSeek sparse attention (indexer top-k over an MLA latent cache: DeepSeek-V3.2, GLM-DSA)",
         with(mla_caps(90, 103, {DType::bf16, DType::f8e4m3}, {"mla", "dsa_indexer"}),
              [](Capabilities& c) { c.platforms = {PK::cuda, PK::rocm}; }));
  engine("dsv4", "DeepSeek-V4 compressed sparse attention (needs a DeepSeek-V4 checkpoint)",
         with(mla_caps(90, 0, {DType::bf16, DType::f8e4m3}, {"dsv4_compressed"}),
              [](Capabilities& c) { c.platforms = {PK::cuda, PK::npu}; }));
  engine("cutlass_mla", "CUTLASS MLA decode kernels, Blackwell sm_100/sm_103 (128-token pages)",
         mla_caps(100, 103, kv_fp8, {"mla"}));
  engine("flashmla", "FlashMLA kernels for MLA models, sm_90 to sm_103 (64-token pages)",
         mla_caps(90, 103, kv_fp8, {"mla"}));
  engine("trtllm_mla", "TensorRT-LLM MLA kernels, Blackwell sm_100 to sm_121", mla_caps(100, 121, {DType::bf16, DType::f8e4m3}, {"mla"}));
  engine("cutedsl_mla", "CuTe DSL MLA decode kernels, sm_100/sm_103 (decode only)",
         mla_caps(100, 103, {DType::bf16, DType::f8e4m3}, {"mla"}), decode_only_rules);
  engine("tokenspeed_mla", "TokenSpeed MLA kernels, Blackwell sm_100 to sm_121 (fp8_e4m3 KV cache only)",
         mla_caps(100, 121, {DType::f8e4m3}, {"mla"}));
  engine("trtllm_mha", "TensorRT-LLM MHA kernels (paged KV), sm_100/sm_103 only",
         with(cuda_caps(100, 103, kHalf, {64, 128, 256}), [&](Capabilities& c) {
           c.kv_dtypes = kv_fp8;
           c.paged_kv = true;
         }));
  engine("dual_chunk_flash_attn", "dual chunk flash attention for checkpoints with a dual_chunk_attention_config",
         with(cuda_caps(80, 0, kHalf, {64, 128, 256}), [](Capabilities& c) {
           c.paged_kv = true;
           c.requires_weights = {"dual_chunk"};
         }));
  engine("hpc_ops", "Tencent HPC-Ops paged MHA, sm_90 only (head dim 128, GQA 4 or 8, 64-token pages)",
         with(cuda_caps(90, 90, {DType::bf16}, {128}), [](Capabilities& c) {
           c.kv_dtypes = {DType::bf16, DType::f8e4m3};
           c.masks = {MK::causal};
           c.paged_kv = true;
           c.softcap = c.sinks = false;
           c.distinct_v_head_dim = false;
         }),
         hpc_ops_rules);
  engine("minicpm_flashattn", "MiniCPM sparse attention over flash-attention kernels (MiniCPM-SALA checkpoints)",
         with(cuda_caps(90, 0, kHalf, {64, 128}), [](Capabilities& c) {
           c.paged_kv = true;
           c.requires_weights = {"minicpm_sparse"};
         }));
  engine("minicpm_flashinfer", "MiniCPM sparse attention over FlashInfer kernels (MiniCPM-SALA checkpoints)",
         with(cuda_caps(80, 0, kHalf, {64, 128}), [](Capabilities& c) {
           c.paged_kv = true;
           c.requires_weights = {"minicpm_sparse"};
         }));
  engine("wave", "AMD Wave attention kernels (ROCm)",
         with(platform_caps({PK::rocm}, kHalf, {64, 128}), [](Capabilities& c) { c.masks = {MK::none, MK::causal}; }));
  engine("intel_amx", "Intel AMX CPU attention (sgl-kernel; SGLang falls back to torch_native without AMX)",
         platform_caps({PK::cpu}, kHalfF32, {}));
  engine("ascend", "Huawei Ascend NPU attention (torch_npu fused kernels, paged KV, MLA)",
         with(platform_caps({PK::npu}, kHalf, {}), [](Capabilities& c) { c.masks = kAllMasks; }));
  engine("intel_xpu", "Intel XPU LLM attention (sgl-kernel flash attention, paged KV)",
         platform_caps({PK::xpu}, kHalf, flash_dims));
  // Diffusion side (AttentionBackendEnum, lower-cased)
  engine("dynamic_cudnn_sdpa", "per call cuDNN SDPA (dense non-causal, no LSE asked) or flash attention",
         cuda_caps(80, 0, kHalf, flash_dims));
  engine("sage_attn_3", "SageAttention3: FP4 microscaling attention, Blackwell (sm_100 and newer)",
         with(cuda_caps(100, 0, kHalf, {64, 128}), [](Capabilities& c) {
           c.masks = {MK::none, MK::causal};
           c.softcap = c.sinks = false;
           c.lse = false;
           c.distinct_v_head_dim = false;
         }));
  engine("sparse_video_gen_2_attn", "Sparse-VideoGen2: semantic-aware permutation sparse attention (video DiTs)",
         sparse_caps({64, 128}));
  engine("vmoba_attn", "V-MoBA: mixture of block attention for video DiTs", sparse_caps({64, 128}));
  engine("cube_sparse_attn", "cube sparse attention for video DiTs", sparse_caps({64, 128}));
  engine("aiter_sage", "SageAttention on AMD AITER (ROCm)",
         with(platform_caps({PK::rocm}, kHalf, {64, 128}), [](Capabilities& c) {
           c.masks = {MK::none, MK::causal};
           c.layouts = kPadded;
           c.paged_kv = false;
           c.softcap = c.sinks = c.lse = c.distinct_v_head_dim = false;
         }));
  engine("sla_attn", "Sparse-Linear Attention (sparse softmax + a trained linear branch; SLA-finetuned checkpoints)",
         with(sparse_caps({64, 128}), [](Capabilities& c) { c.requires_weights = {"sla_linear"}; }));
  engine("sage_sla_attn", "SageAttention + Sparse-Linear Attention (SLA-finetuned checkpoints)",
         with(sparse_caps({64, 128}), [](Capabilities& c) { c.requires_weights = {"sla_linear"}; }));
  auto npu_sparse = [](std::vector<int> dims) {
    Capabilities c = sparse_caps(std::move(dims));
    c.platforms = {PK::npu};
    c.min_sm = c.max_sm = 0;
    return c;
  };
  engine("laser_attn", "LASER attention on Ascend NPUs (sgl_kernel_npu)", npu_sparse({64, 128}));
  engine("block_sparse_attn", "static block-sparse attention on Ascend NPUs (sgl_kernel_npu)", npu_sparse({64, 128}));
  engine("rain_fusion_attn", "RainFusion training-free block-wise sparse attention on Ascend NPUs", npu_sparse({32, 64, 96, 128}));
  engine("fp8_fa_sm120", "FP8 (e4m3) flash attention for sm_120: dense non-causal self-attention, bf16, head dim 128",
         with(cuda_caps(120, 120, {DType::bf16}, {128}), [](Capabilities& c) {
           c.masks = {MK::none};
           c.layouts = kAllLayouts;
           c.gqa = false;
           c.lse = false;
           c.softcap = c.sinks = false;
           c.distinct_v_head_dim = false;
         }),
         fp8_fa_sm120_rules);
  return rows;
}

}  // namespace

void register_modelled_backends(Registry& registry) {
  for (Row& row : modelled_table()) {
    if (registry.find(row.name) != nullptr) continue;  // a real kernel is registered
    registry.add(std::make_unique<ModelledBackend>(row.name, row.description, std::move(row.caps), std::move(row.extra)));
  }
}

}  // namespace attnkit
