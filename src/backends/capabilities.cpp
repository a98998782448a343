#include "attnkit/backends/capabilities.hpp"

#include <algorithm>

namespace attnkit {
namespace {

std::string join_dtypes(const DTypeSet& set) {
  std::string out;
  for (DType t : kAllDTypes)
    if (set.contains(t)) out += (out.empty() ? "" : ", ") + std::string(dtype_name(t));
  return out.empty() ? "none" : out;
}

std::string join_ints(const std::vector<int>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out;
}

// Suggestions for an arch mismatch of the flash family (design 2.3).
std::string arch_alternatives(std::string_view backend, int sm) {
  if (backend == "fa3" && sm >= 80 && sm < 90)
    return "on sm_80/86/89 use the sm_80 kernel (fa2, or fa to let the arch pick), flashinfer or triton";
  if (backend == "fa3" && sm >= 100) return "the sm_90 kernel is not for Blackwell: use fa (the arch picks) or cudnn";
  if (sm < 80) return "on GPUs older than sm_80 (V100, T4) use sdpa, the generic CUDA kernel, or leave the choice to auto";
  return "choose a backend built for this GPU (see `attnkit backends --platform cuda:sm" + std::to_string(sm) +
         "`), or leave the choice to auto";
}

// The arch range a kernel declares, as the refusal states it: "sm_80 or
// newer", "sm_90 only", "sm_120 or sm_121 only", "sm_100 to sm_103 only".
std::string arch_range(int min_sm, int max_sm) {
  if (max_sm == 0) return "sm_" + std::to_string(min_sm) + " or newer";
  if (min_sm == max_sm || min_sm == 0) return "sm_" + std::to_string(max_sm) + " only";
  const char* joiner = max_sm == min_sm + 1 ? " or sm_" : " to sm_";
  return "sm_" + std::to_string(min_sm) + joiner + std::to_string(max_sm) + " only";
}

}  // namespace

Diagnostics check_capabilities(std::string_view name, const Capabilities& caps, const Problem& p,
                               const Platform& platform) {
  Diagnostics out;
  const std::string backend(name);
  const std::string plat = platform.label();
  if (!caps.platforms.contains(platform.kind)) {
    out.add("AK2101", {{"backend", backend}, {"platform", plat}});
    return out;  // nothing else is meaningful on a platform it does not run on
  }
  if (platform.kind == PlatformKind::cuda && platform.sm > 0) {
    const std::string sm = std::to_string(platform.sm);
    if (caps.min_sm > 0 && platform.sm < caps.min_sm)
      out.add("AK2102", {{"backend", backend}, {"arch", arch_range(caps.min_sm, caps.max_sm)}, {"platform", plat},
                         {"sm", sm}, {"alternatives", arch_alternatives(name, platform.sm)}});
    if (caps.max_sm > 0 && platform.sm > caps.max_sm)
      out.add("AK2103", {{"backend", backend}, {"arch", arch_range(caps.min_sm, caps.max_sm)}, {"platform", plat},
                         {"sm", sm}, {"alternatives", arch_alternatives(name, platform.sm)}});
  }
  if (!caps.dtypes.contains(p.dtype))
    out.add("AK2104", {{"backend", backend}, {"role", "q"}, {"dtype", std::string(dtype_name(p.dtype))},
                       {"supported", join_dtypes(caps.dtypes)}});
  const DTypeSet& kv_set = caps.kv_dtypes.empty() ? caps.dtypes : caps.kv_dtypes;
  if (p.k_dtype() != p.dtype || !caps.kv_dtypes.empty())
    if (!kv_set.contains(p.k_dtype()))
      out.add("AK2104", {{"backend", backend}, {"role", "k/v"}, {"dtype", std::string(dtype_name(p.k_dtype()))},
                         {"supported", join_dtypes(kv_set)}});
  auto head_dim_ok = [&](int d) {
    if (d > caps.max_head_dim) return false;
    return caps.head_dims.empty() || std::find(caps.head_dims.begin(), caps.head_dims.end(), d) != caps.head_dims.end();
  };
  const std::string compiled = caps.head_dims.empty() ? "1.." + std::to_string(caps.max_head_dim)
                                                      : join_ints(caps.head_dims);
  if (!head_dim_ok(p.head_dim_qk))
    out.add("AK2105", {{"backend", backend}, {"dim", std::to_string(p.head_dim_qk)}, {"compiled", compiled}});
  if (p.head_dim_v != p.head_dim_qk) {
    if (!caps.distinct_v_head_dim)
      out.add("AK2106", {{"backend", backend}, {"dv", std::to_string(p.head_dim_v)},
                         {"dqk", std::to_string(p.head_dim_qk)}});
    else if (!head_dim_ok(p.head_dim_v))
      out.add("AK2105", {{"backend", backend}, {"dim", std::to_string(p.head_dim_v)}, {"compiled", compiled}});
  }
  if (!caps.masks.contains(p.mask))
    out.add("AK2107", {{"backend", backend}, {"mask", std::string(mask_kind_name(p.mask))}});
  if (!caps.layouts.contains(p.layout))
    out.add("AK2108", {{"backend", backend}, {"layout", std::string(layout_name(p.layout))}});
  auto feature = [&](bool used, bool supported, const char* what) {
    if (used && !supported) out.add("AK2109", {{"backend", backend}, {"feature", what}});
  };
  feature(p.heads_q != p.heads_kv, caps.gqa, "grouped-query attention (heads_q != heads_kv)");
  feature(p.softcap > 0.0f, caps.softcap, "softcapping");
  feature(p.has_sinks, caps.sinks, "attention sinks");
  feature(p.has_gate, caps.gate, "a gate input (Problem::has_gate: the gated branch of video_sparse_attn_h3 and hybrid_window_attn_h3)");
  feature(p.return_lse, caps.lse, "returning the LSE");
  feature(p.paged_kv.has_value(), caps.paged_kv, "a paged KV cache");
  feature(p.diagonal_offsets, caps.diagonal_offsets, "diagonal offsets (a sliding window over ring-attention shards)");
  feature(p.block_sparse.has_value(), caps.block_sparse, "block-sparse lists (Problem::block_sparse)");
  if (!caps.required_library.empty()) {
    const bool present = caps.required_library == "cudnn"  ? platform.has_cudnn
                         : caps.required_library == "nccl" ? platform.has_nccl
                                                           : true;
    if (!present)
      out.add("AK2110", {{"backend", backend}, {"library", caps.required_library}, {"platform", plat}});
  }
  if (!caps.built && platform.detected)
    out.add("AK2111", {{"backend", backend}, {"detail", ""}});
  return out;
}

}  // namespace attnkit
