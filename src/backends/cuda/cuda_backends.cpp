// Host glue of the CUDA backends: capabilities, checks, plans, registration.
// Plain C++ in every build; the launches themselves sit behind ATTNKIT_HAS_CUDA.
#include <algorithm>
#include <cstdint>
#include <string>

#include "attnkit/backends/cuda.hpp"
#include "backends/cuda/launchers.hpp"
#include "kernels/cuda/fa2/traits.hpp"
#include "kernels/cuda/params.hpp"
#if defined(ATTNKIT_HAS_CUDA)
#include "backends/cuda/device.hpp"
#endif

namespace attnkit {
namespace {

// ---- the instance tables (one source: src/kernels/cuda/*_instances.def)

struct Fa2Entry {
  Fa2Instance info;
  cuda::LaunchFn launch;
  cuda::ConfigureFn configure;
};

// Tile constants come from the same traits the kernels use (a 2-byte stand-in
// element type: the constants do not depend on fp16 vs bf16).
template <int Dim>
Fa2Instance fa2_info(DType dtype) {
  using Tr = typename cuda::Fa2Config<std::uint16_t, Dim>::Traits;
  return {dtype, Dim, Tr::kBlockM, Tr::kBlockN, Tr::kWarps, Tr::kStages, Tr::kSmemBytes};
}

#if defined(ATTNKIT_HAS_CUDA)
#define AK_FA2_FNS(TAG, DIM) &cuda::fa2_launch_##TAG##_d##DIM, &cuda::fa2_configure_##TAG##_d##DIM
#define AK_SDPA_FN(TAG) &cuda::sdpa_launch_##TAG
#else
#define AK_FA2_FNS(TAG, DIM) nullptr, nullptr
#define AK_SDPA_FN(TAG) nullptr
#endif

const std::vector<Fa2Entry>& fa2_entries() {
  static const std::vector<Fa2Entry> entries = {
#define AK_FA2_INSTANCE(TAG, DIM) {fa2_info<DIM>(DType::TAG), AK_FA2_FNS(TAG, DIM)},
#include "kernels/cuda/fa2_instances.def"
#undef AK_FA2_INSTANCE
  };
  return entries;
}

struct SdpaEntry {
  DType dtype;
  cuda::LaunchFn launch;
};
const std::vector<SdpaEntry>& sdpa_entries() {
  static const std::vector<SdpaEntry> entries = {
#define AK_SDPA_INSTANCE(TAG) {DType::TAG, AK_SDPA_FN(TAG)},
#include "kernels/cuda/sdpa_instances.def"
#undef AK_SDPA_INSTANCE
  };
  return entries;
}

std::string dtype_list(const std::vector<DType>& types) {
  std::string out;
  for (DType t : types) out += (out.empty() ? "" : ", ") + std::string(dtype_name(t));
  return out;
}

// Rules shared by both kernels that the generic capability model cannot state:
// k/v and out in q's dtype (the kernels read and write one element type).
void check_same_dtypes(Diagnostics& out, std::string_view backend, const Problem& p) {
  if (p.k_dtype() != p.dtype)
    out.add("AK2104", {{"backend", std::string(backend)}, {"role", "k/v"},
                       {"dtype", std::string(dtype_name(p.k_dtype()))},
                       {"supported", "the q dtype (" + std::string(dtype_name(p.dtype)) + ")"}});
  if (p.out_dtype() != p.dtype)
    out.add("AK2104", {{"backend", std::string(backend)}, {"role", "out"},
                       {"dtype", std::string(dtype_name(p.out_dtype()))},
                       {"supported", "the q dtype (" + std::string(dtype_name(p.dtype)) + ")"}});
}

// ---- plans

// The kernels load q/k/v rows in 16-byte vectors and store out in pairs: those
// four need aligned base pointers and row/head/batch strides (AK1107). LSE,
// sinks and cu_seqlens are read element-wise and need nothing more.
Diagnostics check_row_alignment(const AttentionTensors& t, int alignment) {
  Diagnostics out;
  const std::pair<const char*, const TensorView*> views[] = {{"q", &t.q}, {"k", &t.k}, {"v", &t.v}, {"out", &t.out}};
  for (const auto& [name, v] : views) {
    if (v->data == nullptr) continue;
    bool aligned = reinterpret_cast<std::uintptr_t>(v->data) % alignment == 0;
    const auto elem = static_cast<std::int64_t>(dtype_size(v->dtype));
    for (int i = 0; i + 1 < v->rank; ++i)
      if (v->shape[i] > 1 && (v->strides[i] * elem) % alignment != 0) aligned = false;
    if (!aligned) out.add("AK1107", {{"name", name}, {"alignment", std::to_string(alignment)}});
  }
  return out;
}

// One CUDA launch: validates the device binding, builds the device params,
// enqueues on the caller's stream. Allocates nothing, synchronises nothing, so
// a CUDA graph can capture it.
class CudaAttentionPlan final : public Plan {
 public:
  CudaAttentionPlan(Problem p, cuda::LaunchFn launch, int alignment_bytes, std::string what)
      : Plan(std::move(p)), launch_(launch), alignment_(alignment_bytes), what_(std::move(what)) {}

  Diagnostics run(const AttentionTensors& t, Workspace, StreamHandle stream) const override {
    Diagnostics why = validate_binding(problem(), t, {DeviceKind::cuda, 0});
    if (alignment_ > 1) why.append(check_row_alignment(t, alignment_));
    if (!why.ok()) return why;
#if defined(ATTNKIT_HAS_CUDA)
    if (launch_ == nullptr) return diagnose("AK6002", {{"reason", what_ + " was not compiled into this binary"}});
    const cuda::AttnParams params = cuda::make_attn_params(problem(), t);
    return cuda::check_cuda(launch_(params, stream), what_ + " launch");
#else
    (void)stream;
    return diagnose("AK6002", {{"reason", "this build has no CUDA (" + what_ + ")"}});
#endif
  }

 private:
  cuda::LaunchFn launch_;
  int alignment_;
  std::string what_;
};

// Planning on this machine needs a device; planning for a named platform only
// validates (the plan then fails to run with AK6002).
Diagnostics require_device(const Platform& platform) {
#if defined(ATTNKIT_HAS_CUDA)
  if (!platform.detected) return {};
  auto props = cuda::current_device_properties();
  if (!props) return props.diagnostics();
  return {};
#else
  (void)platform;
  return {};
#endif
}

// ---- fa2

Capabilities fa2_capabilities() {
  Capabilities c;
  c.platforms = {PlatformKind::cuda};
  c.min_sm = 80;
  c.dtypes = {DType::f16, DType::bf16};
  for (const Fa2Entry& e : fa2_entries())
    if (std::find(c.head_dims.begin(), c.head_dims.end(), e.info.head_dim) == c.head_dims.end())
      c.head_dims.push_back(e.info.head_dim);
  std::sort(c.head_dims.begin(), c.head_dims.end());
  c.max_head_dim = 256;
  c.distinct_v_head_dim = false;
  c.masks = {MaskKind::none, MaskKind::causal, MaskKind::sliding_window};
  c.layouts = {Layout::bshd, Layout::bhsd, Layout::thd};
  c.gqa = c.softcap = c.sinks = c.lse = true;
  c.paged_kv = false;
  c.ring_capable = true;  // LSE out + bottom-right causal: what ring attention merges
  c.built = cuda_compiled();
  return c;
}

// What both CUDA backends share: their declared capabilities, one dtype for q,
// k, v and out, and the checks that open plan().
class CudaBackend : public Backend {
 public:
  explicit CudaBackend(Capabilities caps) : caps_(std::move(caps)) {}
  const Capabilities& capabilities() const override { return caps_; }

  Diagnostics check(const Problem& p, const Platform& platform) const override {
    Diagnostics out = check_capabilities(name(), caps_, p, platform);
    if (caps_.platforms.contains(platform.kind)) check_same_dtypes(out, name(), p);
    return out;
  }

 protected:
  Diagnostics plan_checks(const Problem& p, const Platform& platform) const {
    Diagnostics why = validate_problem(p);
    why.append(check(p, platform));
    return why;
  }

 private:
  Capabilities caps_;
};

class Fa2Backend final : public CudaBackend {
 public:
  Fa2Backend() : CudaBackend(fa2_capabilities()) {}
  std::string_view name() const override { return "fa2"; }
  std::string_view description() const override {
    return "FlashAttention-2-class forward for sm_80+ (mma.sync m16n8k16, ldmatrix, cp.async K/V pipeline into "
           "swizzled or padded tiles, exp2 online softmax); fp16/bf16, head dims 64/96/128/192/256";
  }
  Result<std::unique_ptr<Plan>> plan(const Problem& p, const Platform& platform) const override {
    if (Diagnostics why = plan_checks(p, platform); !why.ok()) return why;
    const Fa2Entry* entry = nullptr;
    for (const Fa2Entry& e : fa2_entries())
      if (e.info.dtype == p.dtype && e.info.head_dim == p.head_dim_qk) entry = &e;
    if (entry == nullptr) {
      std::vector<DType> types;
      for (const Fa2Entry& e : fa2_entries())
        if (e.info.head_dim == p.head_dim_qk) types.push_back(e.info.dtype);
      return diagnose("AK2104", {{"backend", "fa2"}, {"role", "q"}, {"dtype", std::string(dtype_name(p.dtype))},
                                 {"supported", dtype_list(types)}});
    }
    if (Diagnostics dev = require_device(platform); !dev.ok()) return dev;
#if defined(ATTNKIT_HAS_CUDA)
    // Tile choice is the table's; raising the kernel's dynamic shared-memory
    // limit happens here, once, so run() stays capturable.
    if (platform.detected) {
      Diagnostics cfg = cuda::check_cuda(entry->configure(), "cudaFuncSetAttribute(fa2 max dynamic shared memory)");
      if (!cfg.ok()) return cfg;
    }
#endif
    return std::unique_ptr<Plan>(std::make_unique<CudaAttentionPlan>(
        p, entry->launch, 16,
        "fa2 kernel (" + std::string(dtype_name(p.dtype)) + ", d" + std::to_string(p.head_dim_qk) + ", " +
            std::to_string(entry->info.block_m) + "x" + std::to_string(entry->info.block_n) + " tiles)"));
  }
};

// ---- cuda_sdpa

Capabilities cuda_sdpa_capabilities() {
  Capabilities c;
  c.platforms = {PlatformKind::cuda};
  c.min_sm = 80;  // the build's arch floor (CMAKE_CUDA_ARCHITECTURES), not the kernel's
  c.dtypes = {DType::f32, DType::f16, DType::bf16};  // sdpa_instances.def; plan() refuses a missing one
  c.max_head_dim = 256;
  c.distinct_v_head_dim = true;
  c.masks = {MaskKind::none, MaskKind::causal, MaskKind::sliding_window, MaskKind::block_sparse, MaskKind::custom};
  c.layouts = {Layout::bshd, Layout::bhsd, Layout::thd};
  c.gqa = c.softcap = c.sinks = c.lse = true;
  c.paged_kv = true;
  c.built = cuda_compiled();
  return c;
}

class CudaSdpaBackend final : public CudaBackend {
 public:
  CudaSdpaBackend() : CudaBackend(cuda_sdpa_capabilities()) {}
  std::string_view name() const override { return "cuda_sdpa"; }
  std::string_view description() const override {
    return "generic CUDA attention (fp32 arithmetic, no tensor cores): any head dim up to 256, every mask, paged "
           "KV, varlen; the CUDA path of last resort";
  }
  Result<std::unique_ptr<Plan>> plan(const Problem& p, const Platform& platform) const override {
    if (Diagnostics why = plan_checks(p, platform); !why.ok()) return why;
    const SdpaEntry* entry = nullptr;
    for (const SdpaEntry& e : sdpa_entries())
      if (e.dtype == p.dtype) entry = &e;
    if (entry == nullptr) return diagnose("AK2104", {{"backend", "cuda_sdpa"}, {"role", "q"},
                                                     {"dtype", std::string(dtype_name(p.dtype))},
                                                     {"supported", "fp32, fp16, bf16"}});
    if (Diagnostics dev = require_device(platform); !dev.ok()) return dev;
    // Element-wise loads: only the element alignment is needed.
    return std::unique_ptr<Plan>(std::make_unique<CudaAttentionPlan>(
        p, entry->launch, static_cast<int>(dtype_size(p.dtype)),
        "cuda_sdpa kernel (" + std::string(dtype_name(p.dtype)) + ")"));
  }
};

}  // namespace

std::vector<Fa2Instance> fa2_instance_table() {
  std::vector<Fa2Instance> out;
  for (const Fa2Entry& e : fa2_entries()) out.push_back(e.info);
  return out;
}

std::unique_ptr<Backend> make_fa2_backend() { return std::make_unique<Fa2Backend>(); }
std::unique_ptr<Backend> make_cuda_sdpa_backend() { return std::make_unique<CudaSdpaBackend>(); }

void register_cuda_backends(Registry& registry) {
  registry.add(make_fa2_backend());
  registry.add(make_cuda_sdpa_backend());
}

}  // namespace attnkit
