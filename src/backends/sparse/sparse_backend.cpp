#include "backends/sparse/sparse_backend.hpp"

#include "attnkit/backends/sparse.hpp"
#include "attnkit/core/host_memory.hpp"

namespace attnkit::sparse {

Capabilities sparse_video_capabilities(std::vector<int> dims) {
  Capabilities c;
  c.platforms = {PlatformKind::cpu, PlatformKind::cuda};
  c.min_sm = 80;
  c.dtypes = {DType::f16, DType::bf16, DType::f32};  // fp32: the CPU path only (check)
  c.head_dims = std::move(dims);
  c.masks = {MaskKind::none};
  c.layouts = {Layout::bshd, Layout::bhsd};
  c.sparse = true;
  c.lse = false;  // their kernels return no LSE, so they cannot take part in ring attention
  c.softcap = c.sinks = false;
  c.distinct_v_head_dim = false;
  return c;
}

Diagnostics validate_gated_call(const Problem& p, const AttentionTensors& t) {
  if (Diagnostics why = validate_binding(p, t, {DeviceKind::cpu, 0}); !why.ok() || !p.has_gate) return why;
  AttentionTensors gate_only;
  gate_only.gate = t.gate;
  return scan_nonfinite_inputs(p, gate_only);
}

Result<std::unique_ptr<Plan>> with_host_workspace(std::unique_ptr<Plan> plan, std::string_view backend) {
  if (Diagnostics why = check_host_allocation(std::string(backend) + "'s workspace",
                                              static_cast<std::int64_t>(plan->workspace_bytes()));
      !why.ok())
    return why;
  return plan;
}

Diagnostics SparseVideoBackend::check(const Problem& p, const Platform& platform) const {
  Diagnostics out = Backend::check(p, platform);
  if (platform.kind != PlatformKind::cuda) return out;
  if (p.dtype == DType::f32 && caps_.dtypes.contains(DType::f32))
    out.add("AK2104", {{"backend", name_}, {"role", "q"}, {"dtype", "fp32"},
                       {"supported", "fp16, bf16 on CUDA (fp32 runs on the CPU path only)"}});
  if (platform.detected && !has_cuda_path() && !out.has_code("AK2111"))
    out.add("AK2111", {{"backend", name_},
                       {"detail", ": its CUDA path is not built yet (the CPU path runs on cpu platforms)"}});
  return out;
}

Diagnostics SparseVideoBackend::check_configured(const Problem& p, const Platform& platform,
                                                 const select::BackendConfig& config) const {
  Diagnostics out = check(p, platform);
  if (!out.ok()) return out;
  // A missing required key (AK3104) is the selection's to report; a wrong
  // value leaves nothing to read the geometry from.
  if (const select::BackendSchema* schema = select::find_schema(name_))
    for (const Diagnostic& d : select::validate_own_config(config, *schema))
      if (d.code != "AK3104") return out;
  out.append(call_refusals(p, platform, config));
  return out;
}

Result<std::unique_ptr<Plan>> SparseVideoBackend::plan(const Problem& p, const Platform& platform) const {
  return plan_configured(p, platform, {});
}

Result<std::unique_ptr<Plan>> SparseVideoBackend::plan_configured(const Problem& p, const Platform& platform,
                                                                 const select::BackendConfig& config) const {
  Diagnostics why = validate_problem(p);
  why.append(check(p, platform));
  if (const select::BackendSchema* schema = select::find_schema(name_))
    why.append(select::validate_own_config(config, *schema));
  if (!why.ok()) return why;
  if (Diagnostics refused = call_refusals(p, platform, config); !refused.ok()) return refused;
  if (platform.kind == PlatformKind::cuda) return plan_cuda(p, platform, config);
  return plan_cpu(p, platform, config);
}

Result<std::unique_ptr<Plan>> SparseVideoBackend::plan_cuda(const Problem&, const Platform&,
                                                            const select::BackendConfig&) const {
  return diagnose("AK2111", {{"backend", name_}, {"detail", ": its CUDA path is not built yet (the CPU path runs on cpu platforms)"}});
}

}  // namespace attnkit::sparse

namespace attnkit {

void register_sparse_backends(Registry& registry) {
  registry.add(make_sliding_tile_backend());
  registry.add(make_sparge_backend());
  registry.add(make_sol_backend());
  registry.add(make_video_sparse_backend());
  registry.add(make_hybrid_window_backend());
}

}  // namespace attnkit
