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
constexpr DTypeSet kHalfFp8{DType::f16, DType::bf16, DType::f8e4m3};
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
                  with(Capabilities{}, [&](Capabilities& c) {
                    c.platforms = {PK::rocm};
                    c.dtypes = kHalf;
                    c.kv_dtypes = {DType::f16, DType::bf16, DType::f8e4m3};
                    c.head_dims = {64, 128, 256};
                    c.masks = kDenseMasks;
                    c.layouts = kAllLayouts;
                    c.paged_kv = true;
                  })});
  rows.push_back({"fa", "flash attention on ROCm (CK), MUSA and NPU (ring-capable)",
                  with(Capabilities{}, [&](Capabilities& c) {
                    c.platforms = {PK::rocm, PK::musa, PK::npu};
                    c.dtypes = kHalf;
                    c.head_dims = flash_dims;
                    c.masks = kDenseMasks;
                    c.layouts = kAllLayouts;
                    c.paged_kv = true;
                  })});
  rows.push_back({"xpu_flash", "Intel XPU flash attention",
                  with(Capabilities{}, [](Capabilities& c) {
                    c.platforms = {PK::xpu};
                    c.dtypes = kHalf;
                    c.head_dims = {64, 96, 128, 192, 256};
                    c.masks = kDenseMasks;
                    c.layouts = kAllLayouts;
                  })});
  rows.push_back({"sdpa", "the platform's scaled-dot-product attention (ROCm, XPU, MUSA, MPS, NPU)",
                  with(Capabilities{}, [](Capabilities& c) {
                    c.platforms = {PK::rocm, PK::xpu, PK::musa, PK::mps, PK::npu};
                    c.dtypes = kHalfF32;
                    c.masks = kAllMasks;
                    c.layouts = kAllLayouts;
                    c.paged_kv = true;
                    c.lse = false;  // F.scaled_dot_product_attention returns no LSE
                  })});
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
