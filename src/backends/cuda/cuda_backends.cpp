// Host glue of the CUDA backends: capabilities, checks, plans, registration.
// Plain C++ in every build; the launches themselves sit behind ATTNKIT_HAS_CUDA.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/backends/cuda.hpp"
#include "backends/cuda/fa2_q64.hpp"
#include "backends/cuda/raster_tiles.hpp"
#include "backends/cuda/launchers.hpp"
#include "backends/cuda/sol_pooled.hpp"
#include "kernels/cuda/fa2/traits.hpp"
#include "kernels/cuda/sm90/raster_tokens.hpp"
#include "kernels/cuda/sm90/traits.hpp"
#include "kernels/cuda/params.hpp"
#if defined(ATTNKIT_HAS_CUDA)
#include "backends/cuda/device.hpp"
#endif

namespace attnkit {
namespace {

// ---- the instance table (one source: src/kernels/cuda/instances.def)

struct KernelEntry {
  CudaKernelInstance info;
  cuda::LaunchFn launch;        // null: not compiled into this binary
  cuda::ConfigureFn configure;
};

// Tile constants come from the same traits the kernels use (a 2-byte stand-in
// element type: the constants do not depend on fp16 vs bf16).
template <class Tr, int QK, int V>
CudaKernelInstance info_of(const char* family, DType dtype, const char* arch) {
  return {family, arch, dtype, QK, V, Tr::kBlockM, Tr::kBlockN, Tr::kSmemBytes, false};
}
template <int QK, int V>
CudaKernelInstance info_fa2(DType dtype, const char* arch) {
  return info_of<typename cuda::Fa2Config<std::uint16_t, QK>::Traits, QK, V>("fa2", dtype, arch);
}
template <int QK, int V>
CudaKernelInstance info_fa3(DType dtype, const char* arch) {
  return info_of<typename cuda::sm90::Fa3Config<std::uint16_t, QK, V>::Traits, QK, V>("fa3", dtype, arch);
}
// An instance's constants under another family's name.
CudaKernelInstance renamed(CudaKernelInstance i, const char* family) {
  i.family = family;
  return i;
}
template <int QK, int V>
CudaKernelInstance info_fa2bsq64(DType dtype, const char* arch) {
  return info_of<typename cuda::Fa2Q64Config<std::uint16_t, QK>::Traits, QK, V>("fa2bsq64", dtype, arch);
}
// A family on a tile configuration of its own (sm90/traits.hpp), and one
// that runs another family's tiles over other inputs (block-sparse lists,
// paged caches, raster-order tokens): that family's constants under its name.
#define AK_INFO_OF_CONFIG(FAMILY, CONFIG)                                                     \
  template <int QK, int V>                                                                    \
  CudaKernelInstance info_##FAMILY(DType dtype, const char* arch) {                           \
    return info_of<typename cuda::sm90::CONFIG<std::uint16_t, QK, V>::Traits, QK, V>(#FAMILY, dtype, arch); \
  }
#define AK_INFO_RENAMED(FAMILY, BASE)                                  \
  template <int QK, int V>                                             \
  CudaKernelInstance info_##FAMILY(DType dtype, const char* arch) {    \
    return renamed(info_##BASE<QK, V>(dtype, arch), #FAMILY);          \
  }
AK_INFO_OF_CONFIG(fa3bs, Fa3Keys128Config)
AK_INFO_OF_CONFIG(fa3bs192, Fa3Keys192Config)
AK_INFO_OF_CONFIG(fa3bsk64, Fa3Keys64Config)
AK_INFO_OF_CONFIG(fa3bsq64, Fa3Q64Config)
AK_INFO_OF_CONFIG(fa3ss, Fa3SkipConfig)
AK_INFO_RENAMED(fa2bs, fa2)
AK_INFO_RENAMED(fa2solpool, fa2bsq64)
AK_INFO_RENAMED(fa3bsr, fa3bs)
AK_INFO_RENAMED(fa3bsr192, fa3bs192)
AK_INFO_RENAMED(fa3bsrq64, fa3bsq64)
AK_INFO_RENAMED(fa3pg, fa3)
#undef AK_INFO_OF_CONFIG
#undef AK_INFO_RENAMED
template <int QK, int V>
CudaKernelInstance info_sdpa(DType dtype, const char* arch) {
  return {"sdpa", arch, dtype, QK, V, 0, 0, 0, false};
}

#define AK_KERNEL_FNS(FAMILY, TAG, QK, V) \
  &cuda::FAMILY##_launch_##TAG##_##QK##_##V, &cuda::FAMILY##_configure_##TAG##_##QK##_##V
#if defined(ATTNKIT_HAS_CUDA)
#define AK_FNS_sm80(FAMILY, TAG, QK, V) AK_KERNEL_FNS(FAMILY, TAG, QK, V)
#define AK_FNS_sm70(FAMILY, TAG, QK, V) AK_KERNEL_FNS(FAMILY, TAG, QK, V)
#else
#define AK_FNS_sm80(FAMILY, TAG, QK, V) nullptr, nullptr
#define AK_FNS_sm70(FAMILY, TAG, QK, V) nullptr, nullptr
#endif
#if defined(ATTNKIT_HAS_CUDA) && defined(ATTNKIT_BUILT_SM90A)
#define AK_FNS_sm90a(FAMILY, TAG, QK, V) AK_KERNEL_FNS(FAMILY, TAG, QK, V)
#else
#define AK_FNS_sm90a(FAMILY, TAG, QK, V) nullptr, nullptr
#endif

const std::vector<KernelEntry>& kernel_entries() {
  static const std::vector<KernelEntry> entries = [] {
    std::vector<KernelEntry> e = {
#define AK_INSTANCE(FAMILY, ARCH, TAG, QK, V) \
  {info_##FAMILY<QK, V>(DType::TAG, #ARCH), AK_FNS_##ARCH(FAMILY, TAG, QK, V)},
#include "kernels/cuda/instances.def"
#undef AK_INSTANCE
    };
    for (KernelEntry& k : e) k.info.built = k.launch != nullptr;
    return e;
  }();
  return entries;
}

// The instance that runs `p` for `family`: exact (dtype, qk, v), or the
// any-dim entry of the dtype (sdpa). The one lookup check() and plan() share.
const KernelEntry* find_kernel(std::string_view family, const Problem& p) {
  for (const KernelEntry& e : kernel_entries())
    if (e.info.family == family && e.info.dtype == p.dtype &&
        ((e.info.head_dim_qk == p.head_dim_qk && e.info.head_dim_v == p.head_dim_v) || e.info.head_dim_qk == 0))
      return &e;
  return nullptr;
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

// The kernels load q/k/v rows in 16-byte vectors and store out in pairs (fa2)
// or 16-byte vectors (fa3: sm90/epilogue.hpp): those
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

// The skip-softmax instance of a plan's problem (family fa3ss), and where its
// kernel adds the (row, key tile) pairs it decided on and skipped.
struct SkipKernel {
  cuda::LaunchFn launch = nullptr;  // null: no such instance for the problem (AK3016 when asked)
#if defined(ATTNKIT_HAS_CUDA)
  cuda::DeviceBuffer counts;  // 2 x u64, allocated when planning on this machine
#endif
};

// fa3 under causal / window masks and over block-sparse lists hands out its
// unequal tiles from a counter (sm90/launch.hpp); it lives in the caller's
// workspace so that plans stay immutable and concurrent runs on two streams
// do not share it. 4 bytes, plus the slack to align it.
constexpr std::size_t kTileCounterBytes = 16;
bool uses_tile_counter(const std::string& family, const Problem& p) {
  return family.rfind("fa3", 0) == 0 &&
         (p.mask == MaskKind::causal || p.mask == MaskKind::sliding_window || p.block_sparse.has_value());
}

// One CUDA launch: validates the device binding, builds the device params,
// enqueues on the caller's stream. Allocates nothing, synchronises nothing, so
// a CUDA graph can capture it.
class CudaAttentionPlan final : public Plan {
 public:
  // `raster`: the grid whose raster-order tokens an fa3bsr launch reads (frames 0: none).
  CudaAttentionPlan(Problem p, std::string backend, cuda::LaunchFn launch, int alignment_bytes, std::string what,
                    SkipKernel skip, std::size_t workspace_bytes, VideoTiling raster = {})
      : Plan(std::move(p)), backend_(std::move(backend)), launch_(launch), alignment_(alignment_bytes),
        what_(std::move(what)), skip_(std::move(skip)), workspace_bytes_(workspace_bytes), raster_(raster) {}

  std::size_t workspace_bytes() const override { return workspace_bytes_; }

  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    Diagnostics why = validate(t, ws);
    if (!why.ok()) return why;
#if defined(ATTNKIT_HAS_CUDA)
    if (launch_ == nullptr) return diagnose("AK6002", {{"reason", what_ + " was not compiled into this binary"}});
    const cuda::AttnParams params = make_params(t, ws);
    return cuda::check_cuda(launch_(params, stream), what_ + " launch");
#else
    (void)stream;
    return diagnose("AK6002", {{"reason", "this build has no CUDA (" + what_ + ")"}});
#endif
  }

  // Request skip-softmax from its start step on (docs/sparse.md section 3),
  // on the fa3ss instance, deciding per key tile of that kernel; other steps
  // and calls without a step run exactly run(). Asking for stats reads the
  // counts back: the call then waits for the stream.
  Diagnostics run_at(const CallContext& where, const AttentionTensors& t, Workspace ws,
                     StreamHandle stream) const override {
    const std::optional<SkipSoftmaxParams>& skip = where.skip_softmax;
    if (!skip || where.step < 0 || where.step < skip->start_step) return run(t, ws, stream);
    if (problem().block_sparse)
      return diagnose("AK2109", {{"backend", backend_}, {"feature", "skip-softmax with block-sparse lists"}});
    if (!(skip->threshold_scale_factor > 0.0))
      return diagnose("AK3103", {{"key", "skip-softmax threshold_scale_factor"},
                                 {"value", std::to_string(skip->threshold_scale_factor)}, {"range", "> 0"}});
    if (skip_.launch == nullptr)
      return diagnose("AK3016", {{"backend", backend_},
                                 {"layer", "a " + std::string(dtype_name(problem().dtype)) + " d" +
                                               std::to_string(problem().head_dim_qk) + " call"}});
    Diagnostics why = validate(t, ws);
    if (!why.ok()) return why;
#if defined(ATTNKIT_HAS_CUDA)
    cuda::AttnParams params = make_params(t, ws);
    params.skip_log2_factor = static_cast<float>(std::log2(skip->threshold_scale_factor));
    if (where.stats) {
      if (skip_.counts.data() == nullptr)
        return diagnose("AK6002", {{"reason", what_ + " was planned for a named platform, not this machine's GPU"}});
      params.skip_counts = static_cast<unsigned long long*>(skip_.counts.data());
      why = cuda::zero_async(skip_.counts.data(), skip_.counts.bytes(), stream);
      if (!why.ok()) return why;
    }
    why = cuda::check_cuda(skip_.launch(params, stream), what_ + " skip-softmax launch");
    if (!why.ok() || !where.stats) return why;
    unsigned long long counts[2] = {0, 0};
    why = cuda::copy_to_host_and_wait(counts, skip_.counts.data(), sizeof counts, stream);
    if (!why.ok()) return why;
    where.stats->blocks += static_cast<std::int64_t>(counts[0]);
    where.stats->blocks_skipped += static_cast<std::int64_t>(counts[1]);
    return why;
#else
    return diagnose("AK6002", {{"reason", "this build has no CUDA (" + what_ + ")"}});
#endif
  }

 private:
  Diagnostics validate(const AttentionTensors& t, Workspace ws) const {
    Diagnostics why = validate_binding(problem(), t, {DeviceKind::cuda, 0});
    if (alignment_ > 1) why.append(check_row_alignment(t, alignment_));
    if (ws.size() < workspace_bytes_ || (ws.data() == nullptr && workspace_bytes_ > 0))
      why.add("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes_)}});
    return why;
  }
  cuda::AttnParams make_params(const AttentionTensors& t, Workspace ws) const {
    cuda::AttnParams params = cuda::make_attn_params(problem(), t);
    params.raster = raster_;
    if (workspace_bytes_ >= kTileCounterBytes) {
      const auto at = (reinterpret_cast<std::uintptr_t>(ws.data()) + alignof(unsigned int) - 1) &
                      ~static_cast<std::uintptr_t>(alignof(unsigned int) - 1);
      params.tile_counter = reinterpret_cast<unsigned int*>(at);
    }
    return params;
  }

  std::string backend_;
  [[maybe_unused]] cuda::LaunchFn launch_;  // called only in builds with CUDA
  int alignment_;
  std::string what_;
  SkipKernel skip_;
  std::size_t workspace_bytes_;
  VideoTiling raster_;
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

// ---- the backends: capabilities from the instance table, one check for check() and plan()

std::string head_dim_pairs(std::string_view family) {
  std::vector<std::string> pairs;
  for (const KernelEntry& e : kernel_entries()) {
    if (e.info.family != family) continue;
    std::string pair = std::to_string(e.info.head_dim_qk);
    if (e.info.head_dim_v != e.info.head_dim_qk) pair += "/" + std::to_string(e.info.head_dim_v);
    if (std::find(pairs.begin(), pairs.end(), pair) == pairs.end()) pairs.push_back(pair);
  }
  std::string out;
  for (const std::string& s : pairs) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// What the table says a family can run: its dtypes, head dims, whether qk and
// v may differ, whether any of its instances is in this binary.
void table_capabilities(Capabilities& c, std::string_view family) {
  c.dtypes = {};
  bool any_built = false;
  for (const KernelEntry& e : kernel_entries()) {
    if (e.info.family != family) continue;
    c.dtypes.insert(e.info.dtype);
    any_built |= e.info.built;
    if (e.info.head_dim_qk == 0) continue;
    for (int d : {e.info.head_dim_qk, e.info.head_dim_v})
      if (std::find(c.head_dims.begin(), c.head_dims.end(), d) == c.head_dims.end()) c.head_dims.push_back(d);
    if (e.info.head_dim_v != e.info.head_dim_qk) c.distinct_v_head_dim = true;
  }
  std::sort(c.head_dims.begin(), c.head_dims.end());
  c.built = any_built;
}

Capabilities flash_capabilities(std::string_view family) {
  Capabilities c;
  c.platforms = {PlatformKind::cuda};
  c.max_head_dim = 256;
  c.distinct_v_head_dim = false;
  c.masks = {MaskKind::none, MaskKind::causal, MaskKind::sliding_window};
  c.layouts = {Layout::bshd, Layout::bhsd, Layout::thd};
  c.gqa = c.softcap = c.sinks = c.lse = true;
  c.paged_kv = false;
  table_capabilities(c, family);
  return c;
}

// Block-sparse lists run on the fa2bs instances (instances.def).
Capabilities fa2_capabilities() {
  Capabilities c = flash_capabilities("fa2");
  c.min_sm = 80;
  c.block_sparse = true;
  return c;
}

// fa3's paged instances are declared since their GPU run (GpuPaged/*, issue 15).
constexpr bool kFa3PagedVerified = true;

// sm_90a cubins run on compute capability 9.0 alone (not Blackwell).
// Block-sparse lists run on the fa3bs instances (instances.def).
// Request skip-softmax runs on the fa3ss instances (when this binary has them).
Capabilities fa3_capabilities() {
  Capabilities c = flash_capabilities("fa3");
  c.min_sm = 90;
  c.max_sm = 90;
  c.block_sparse = true;
  // Paged caches run on the fa3pg instances (page sizes that fit the key tiles,
  // AK2119): the 24-register producer version passed GpuPaged/* (pages 16 to
  // 256, d64 / d128 / d256, prefill over a prefix, decode, GQA / MQA, sinks,
  // LSE, a window) and memcheck / racecheck / synccheck on the H200 on
  // 2026-12-02; the 32-register one had deadlocked setmaxnreg at d128 / d256.
  c.paged_kv = kFa3PagedVerified;
  c.skip_softmax = std::any_of(kernel_entries().begin(), kernel_entries().end(),
                               [](const KernelEntry& e) { return e.info.family == "fa3ss" && e.info.built; });
  return c;
}

// The generic kernel's oldest arch in this build: sm_70 with a CUDA 12
// toolkit, sm_75 with CUDA 13 (which dropped Volta); a build without nvcc
// validates for what a current toolkit builds.
#if defined(ATTNKIT_SDPA_MIN_SM)
constexpr int kSdpaMinSm = ATTNKIT_SDPA_MIN_SM;
#else
constexpr int kSdpaMinSm = 75;
#endif
// bf16 arithmetic and conversions in hardware start at sm_80 (the engine
// refuses bf16 attention on Volta / Turing too).
constexpr int kBf16MinSm = 80;

Capabilities cuda_sdpa_capabilities() {
  Capabilities c;
  c.platforms = {PlatformKind::cuda};
  c.min_sm = kSdpaMinSm;
  c.max_head_dim = 256;
  c.distinct_v_head_dim = true;
  c.masks = {MaskKind::none, MaskKind::causal, MaskKind::sliding_window, MaskKind::custom};
  c.block_sparse = true;
  c.layouts = {Layout::bshd, Layout::bhsd, Layout::thd};
  c.gqa = c.softcap = c.sinks = c.lse = true;
  c.paged_kv = true;
  table_capabilities(c, "sdpa");
  return c;
}

// A CUDA backend over one family of the instance table. check() and plan()
// share instance_reasons(): a check that passes never meets a plan that fails.
class CudaBackend final : public Backend {
 public:
  // The instance families that run the problems the family itself does not:
  // block-sparse lists and paged caches ("" when the capabilities say none;
  // the family itself when its kernel reads them); sparse_narrow: lists whose
  // blocks the sparse family's tiles do not divide but its tiles do ("": none);
  // sparse_wide: lists whose blocks its wider key tiles divide (taken first);
  // sparse_q64: lists in 64-query blocks that neither sparse's nor
  // sparse_narrow's 128-row tiles divide, on 64-row tiles ("": none);
  // skip: request skip-softmax.
  struct Families {
    std::string sparse = "", sparse_narrow = "", sparse_wide = "", sparse_q64 = "", paged = "", skip = "";
  };
  // `raster`: the block-sparse family reads video tokens of this grid in
  // raster order (fa3bsr; frames 0: rows as they are).
  CudaBackend(std::string name, std::string family, Families families, std::string description, Capabilities caps,
              int alignment, VideoTiling raster = {})
      : name_(std::move(name)), family_(std::move(family)), families_(std::move(families)),
        description_(std::move(description)), caps_(std::move(caps)), alignment_(alignment), raster_(raster) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }
  const Capabilities& capabilities() const override { return caps_; }

  Diagnostics check(const Problem& p, const Platform& platform) const override {
    Diagnostics out = check_capabilities(name(), caps_, p, platform);
    if (!caps_.platforms.contains(platform.kind)) return out;
    check_same_dtypes(out, name(), p);
    if (p.dtype == DType::bf16 && platform.sm > 0 && platform.sm < kBf16MinSm && caps_.min_sm < kBf16MinSm)
      out.add("AK2104", {{"backend", name_}, {"role", "q"}, {"dtype", "bf16"},
                         {"supported", "fp32, fp16 on " + platform.label() + " (bf16 needs sm_80 or newer)"}});
    if (!out.has_code("AK2104") && !out.has_code("AK2105") && !out.has_code("AK2106")) instance_reasons(out, p, platform);
    return out;
  }

  Result<std::unique_ptr<Plan>> plan(const Problem& p, const Platform& platform) const override {
    Diagnostics why = validate_problem(p);
    why.append(check(p, platform));
    if (!why.ok()) return why;
    const KernelEntry* entry = planned_kernel(p);  // exists: check() said so
    if (Diagnostics dev = require_device(platform); !dev.ok()) return dev;
#if defined(ATTNKIT_HAS_CUDA)
    // Raising the kernel's dynamic shared-memory limit happens here, once, so
    // run() stays capturable.
    if (platform.detected && entry->configure != nullptr) {
      Diagnostics cfg = cuda::check_cuda(entry->configure(), "cudaFuncSetAttribute(" + name_ + " shared memory)");
      if (!cfg.ok()) return cfg;
    }
#endif
    std::string what = name_ + " kernel (" + std::string(dtype_name(p.dtype));
    if (entry->info.head_dim_qk > 0)
      what += ", d" + std::to_string(p.head_dim_qk) +
              (p.head_dim_v != p.head_dim_qk ? "/" + std::to_string(p.head_dim_v) : "") + ", " +
              std::to_string(entry->info.block_m) + "x" + std::to_string(entry->info.block_n) + " tiles";
    const bool raster = reads_raster(p);
    if (p.block_sparse) what += raster ? ", block-sparse on raster-order video tokens" : ", block-sparse";
    if (entry->info.family != family_) what += ", " + entry->info.family + " instance";
    auto skip = skip_kernel(p, platform);
    if (!skip) return skip.diagnostics();
    return std::unique_ptr<Plan>(std::make_unique<CudaAttentionPlan>(
        p, name_, entry->launch, alignment_ > 0 ? alignment_ : static_cast<int>(dtype_size(p.dtype)), what + ")",
        std::move(*skip), uses_tile_counter(entry->info.family, p) ? kTileCounterBytes : 0,
        raster ? raster_ : VideoTiling{}));
  }

  // The instance plan() runs `p` on (null: none in the table; check() says why).
  const KernelEntry* planned_kernel(const Problem& p) const { return find_kernel(family_for(p), p); }

 private:
  // The table's verdict on (dtype, qk, v): no such instance (AK2104 for the
  // dtype when the head dims exist in another, else AK2105 naming the pairs),
  // or an instance this binary lacks on this machine (AK2111).
  void instance_reasons(Diagnostics& out, const Problem& p, const Platform& platform) const {
    if (p.block_sparse && p.paged_kv && families_.sparse != families_.paged) {
      out.add("AK2109", {{"backend", name_}, {"feature", "block-sparse lists over a paged KV cache"}});
      return;
    }
    const std::string& family = family_for(p);
    const KernelEntry* entry = planned_kernel(p);
    const std::string sparse_note = family == family_ ? ""
                                    : p.block_sparse    ? " with block-sparse lists"
                                    : p.paged_kv        ? " with a paged KV cache"
                                                        : "";
    if (entry == nullptr) {
      std::vector<DType> types;
      for (const KernelEntry& e : kernel_entries())
        if (e.info.family == family && e.info.head_dim_qk == p.head_dim_qk && e.info.head_dim_v == p.head_dim_v)
          types.push_back(e.info.dtype);
      if (!types.empty())
        out.add("AK2104", {{"backend", name_}, {"role", "q"}, {"dtype", std::string(dtype_name(p.dtype))},
                           {"supported", dtype_list(types) + sparse_note}});
      else
        out.add("AK2105", {{"backend", name_},
                           {"dim", std::to_string(p.head_dim_qk) + "/" + std::to_string(p.head_dim_v)},
                           {"compiled", head_dim_pairs(family) + " (qk/v)" + sparse_note}});
      return;
    }
    if (const char* why = raster_refusal(*entry, p); *why != 0)
      out.add("AK2109", {{"backend", name_}, {"feature", std::string("raster-order video tokens here: ") + why}});
    if (p.block_sparse && !blocks_fit_tiles(*entry, p))
      out.add("AK2117", {{"backend", name_}, {"tile_q", std::to_string(entry->info.block_m)},
                         {"tile_k", std::to_string(entry->info.block_n)},
                         {"block_q", std::to_string(p.block_sparse->block_q)},
                         {"block_k", std::to_string(p.block_sparse->block_k)}});
    // A paged cache in whole pages per key tile or whole tiles per page (sm90/traits.hpp).
    if (p.paged_kv && family == "fa3pg" && !cuda::sm90::paged_tiles_fit(p.paged_kv->page_size, entry->info.block_n))
      out.add("AK2119", {{"backend", name_}, {"tile", std::to_string(entry->info.block_n)},
                         {"page_size", std::to_string(p.paged_kv->page_size)}});
    if (!entry->info.built && platform.detected && !out.has_code("AK2111"))
      out.add("AK2111", {{"backend", name_},
                         {"detail", ": the " + entry->info.arch + " instance " + dtype_list({p.dtype}) + " d" +
                                        std::to_string(p.head_dim_qk) + " was not compiled (ATTNKIT_ENABLE_SM90A)"}});
  }

  // Block-sparse problems of a raster backend read raster-order tokens; its
  // dense problems run the family's own kernel (token order does not matter there).
  bool reads_raster(const Problem& p) const { return raster_.frames > 0 && p.block_sparse.has_value(); }

  const std::string& family_for(const Problem& p) const {
    if (p.block_sparse && !families_.sparse_wide.empty() && tiles_the_blocks(families_.sparse_wide, p) &&
        prefer_built(families_.sparse_wide, families_.sparse, p))
      return families_.sparse_wide;
    if (p.block_sparse && !families_.sparse_narrow.empty() && !tiles_the_blocks(families_.sparse, p) &&
        tiles_the_blocks(families_.sparse_narrow, p))
      return families_.sparse_narrow;
    // 64-query blocks, which every 128-row tile splits.
    if (p.block_sparse && !families_.sparse_q64.empty() && !tiles_the_blocks(families_.sparse, p) &&
        !tiles_the_blocks(families_.sparse_narrow, p) && tiles_the_blocks(families_.sparse_q64, p))
      return families_.sparse_q64;
    return p.block_sparse ? families_.sparse : p.paged_kv ? families_.paged : family_;
  }
  // A faster family's instance over the usual one's: when this binary has it,
  // or lacks the usual one too (then check() names what is missing).
  static bool prefer_built(const std::string& faster, const std::string& usual, const Problem& p) {
    const KernelEntry* fast = find_kernel(faster, p);
    const KernelEntry* own = find_kernel(usual, p);
    return fast != nullptr && (fast->info.built || own == nullptr || !own->info.built);
  }
  // One list per query tile, whole key tiles per listed block (sm90/launch.hpp);
  // an instance without tiles (block_m 0: sdpa) takes any blocks.
  static bool blocks_fit_tiles(const KernelEntry& e, const Problem& p) {
    return e.info.block_m <= 0 ||
           (p.block_sparse->block_q % e.info.block_m == 0 && p.block_sparse->block_k % e.info.block_n == 0);
  }
  // Whether `family`'s instance takes p's blocks: whole tiles, and on raster
  // order each query and key tile one box of the grid.
  bool tiles_the_blocks(const std::string& family, const Problem& p) const {
    const KernelEntry* e = find_kernel(family, p);
    return e != nullptr && blocks_fit_tiles(*e, p) && *raster_refusal(*e, p) == 0;
  }
  // Why instance `e` cannot read p's raster-order tokens ("" when it can, or p is not read in raster order).
  const char* raster_refusal(const KernelEntry& e, const Problem& p) const {
    if (!reads_raster(p)) return "";
    const char* why = cuda::sm90::raster_tokens_refusal(raster_, p.seqlen_q, p.seqlen_k, e.info.block_m);
    return *why != 0 ? why : cuda::sm90::raster_tokens_refusal(raster_, p.seqlen_q, p.seqlen_k, e.info.block_n);
  }

  // The skip-softmax instance of `p`, configured and with its counts buffer
  // when planning on this machine; none for block-sparse problems or dims
  // without one (run_at then refuses skip-softmax with a code).
  Result<SkipKernel> skip_kernel(const Problem& p, const Platform& platform) const {
    SkipKernel skip;
    const bool plain = !p.block_sparse && !p.paged_kv;  // the skip instances read neither lists nor pages
    const KernelEntry* entry = families_.skip.empty() || !plain ? nullptr : find_kernel(families_.skip, p);
    if (entry == nullptr || entry->launch == nullptr) return skip;
    skip.launch = entry->launch;
#if defined(ATTNKIT_HAS_CUDA)
    if (!platform.detected) return skip;  // validation only: the plan does not run
    if (Diagnostics cfg = cuda::check_cuda(entry->configure(), "cudaFuncSetAttribute(" + name_ + " skip-softmax)");
        !cfg.ok())
      return cfg;
    const unsigned long long zeros[2] = {0, 0};
    auto counts = cuda::DeviceBuffer::upload(zeros, sizeof zeros);
    if (!counts) return counts.diagnostics();
    skip.counts = std::move(*counts);
#else
    (void)platform;
#endif
    return skip;
  }

  std::string name_, family_;
  Families families_;
  std::string description_;
  Capabilities caps_;
  int alignment_;  // bytes of q/k/v/out rows and strides; 0: the element size
  VideoTiling raster_;
};

}  // namespace

std::vector<CudaKernelInstance> cuda_kernel_instances() {
  std::vector<CudaKernelInstance> out;
  for (const KernelEntry& e : kernel_entries()) out.push_back(e.info);
  return out;
}

std::optional<CudaKernelInstance> cuda_planned_instance(const Backend& backend, const Problem& p) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  const KernelEntry* entry = cuda != nullptr ? cuda->planned_kernel(p) : nullptr;
  if (entry == nullptr) return std::nullopt;
  return entry->info;
}

// Rows, strides and base pointers 16-byte aligned: fa2 loads rows in 16-byte
// cp.async vectors, fa3's TMA tensor maps require it.
std::unique_ptr<Backend> make_fa2_backend() {
  return std::make_unique<CudaBackend>(
      "fa2", "fa2", CudaBackend::Families{.sparse = "fa2bs"},
      "FlashAttention-2-class forward for sm_80+ (mma.sync m16n8k16, ldmatrix, cp.async K/V pipeline into "
      "swizzled or padded tiles, exp2 online softmax); fp16/bf16, head dims " + head_dim_pairs("fa2") +
          "; block-sparse KV lists at head dims " + head_dim_pairs("fa2bs"),
      fa2_capabilities(), 16);
}
// fa2 with its block-sparse problems on the fa2bsq64 instances (64-query
// tiles): not registered, so fa2 keeps refusing 64-query blocks (AK2117);
// sol_attn's and video_sparse_attn_h3's CUDA paths run their 64 x 64 lists on
// it where fa3 (fa3bsq64) does not take them (backends/cuda/fa2_q64.hpp).
std::unique_ptr<Backend> make_fa2_q64_block_sparse_backend() {
  return std::make_unique<CudaBackend>(
      "fa2", "fa2", CudaBackend::Families{.sparse = "fa2bsq64"},
      "fa2 over block-sparse KV lists in 64-query blocks (64-row query tiles, 64-key tiles) at head dims " +
          head_dim_pairs("fa2bsq64"),
      fa2_capabilities(), 16);
}
std::unique_ptr<Backend> make_fa3_backend() {
  return std::make_unique<CudaBackend>(
      "fa3", "fa3",
      CudaBackend::Families{.sparse = "fa3bs", .sparse_narrow = "fa3bsk64", .sparse_wide = "fa3bs192",
                            .sparse_q64 = "fa3bsq64", .paged = "fa3pg", .skip = "fa3ss"},
      "FlashAttention-3-class forward for sm_90a (TMA loads into swizzled tiles on mbarriers, a producer warpgroup "
      "and 64-row wgmma consumer warpgroups, the softmax of one key tile overlapped with the previous P V); "
      "fp16/bf16, head dims " + head_dim_pairs("fa3") + " (qk/v); block-sparse KV lists at head dims " +
          head_dim_pairs("fa3bs") + " (64-key blocks at " + head_dim_pairs("fa3bsk64") + ", 192-key tiles for blocks of " +
          "192-key multiples at " + head_dim_pairs("fa3bs192") + ", 64 x 64 tiles for 64-query blocks at " +
          head_dim_pairs("fa3bsq64") + "); paged KV caches at head dims " + head_dim_pairs("fa3pg") +
          "; request skip-softmax at head dims " + head_dim_pairs("fa3ss"),
      fa3_capabilities(), 16);
}
// fa3 whose block-sparse problems read video tokens of `tiling` in raster
// order (fa3bsr): not registered; the sliding-tile backends' CUDA path runs
// its tile-ordered lists on the caller's tensors through it
// (backends/cuda/raster_tiles.hpp). Packed varlen has no grid: BSHD / BHSD only.
std::unique_ptr<Backend> make_fa3_raster_block_sparse_backend(const VideoTiling& tiling) {
  Capabilities caps = fa3_capabilities();
  caps.layouts = {Layout::bshd, Layout::bhsd};
  caps.paged_kv = false;
  return std::make_unique<CudaBackend>(
      "fa3", "fa3", CudaBackend::Families{.sparse = "fa3bsr", .sparse_wide = "fa3bsr192", .sparse_q64 = "fa3bsrq64"},
      "fa3 over block-sparse KV lists in tile order on video tokens in raster order (each kernel tile one TMA box "
      "of the caller's rows, out written back in raster order) at head dims " + head_dim_pairs("fa3bsr") +
          " (192-key tiles for blocks of 192-key multiples, 64 x 64 tiles for 64-query blocks)",
      std::move(caps), 16, tiling);
}
// Element-wise loads: only the element alignment is needed.
std::unique_ptr<Backend> make_cuda_sdpa_backend() {
  return std::make_unique<CudaBackend>(
      "cuda_sdpa", "sdpa", CudaBackend::Families{.sparse = "sdpa", .paged = "sdpa"},
      "generic CUDA attention (fp32 arithmetic, no tensor cores): any head dim up to 256, every mask, paged "
      "KV, varlen, sm_70 and later; the CUDA path of last resort",
      cuda_sdpa_capabilities(), 0);
}

// ---- sol_attn's pooled pass (sol_pooled.hpp)

namespace cuda {

Diagnostics sol_pooled_refusals(const Problem& pooled, const Platform& gpu) {
  Diagnostics out;
  const KernelEntry* entry = find_kernel("fa2solpool", pooled);
  if (entry == nullptr)
    out.add("AK2105", {{"backend", "sol_attn"},
                       {"dim", std::to_string(pooled.head_dim_qk) + "/" + std::to_string(pooled.head_dim_v) + " " +
                                   std::string(dtype_name(pooled.dtype))},
                       {"compiled", head_dim_pairs("fa2solpool") + " (its pooled-key kernel)"}});
  else if (!entry->info.built && gpu.detected)
    out.add("AK2111", {{"backend", "sol_attn"}, {"detail", ": its pooled-key kernel was not compiled into this binary"}});
  return out;
}

Result<SolPooledKernel> sol_pooled_kernel(const Problem& pooled, const Platform& gpu) {
  const KernelEntry* entry = find_kernel("fa2solpool", pooled);
  if (entry == nullptr) return sol_pooled_refusals(pooled, gpu);
#if defined(ATTNKIT_HAS_CUDA)
  if (gpu.detected && entry->configure != nullptr)
    if (Diagnostics cfg = check_cuda(entry->configure(), "cudaFuncSetAttribute(sol_attn pooled keys)"); !cfg.ok())
      return cfg;
#endif
  return SolPooledKernel{entry->launch};
}

Diagnostics sol_pooled_launch(const SolPooledKernel& kernel, const Problem& pooled, const AttentionTensors& t,
                              const SolPooledTerms& terms, StreamHandle stream) {
  if (kernel.launch == nullptr)
    return diagnose("AK6002", {{"reason", "sol_attn's pooled-key kernel is not in this binary"}});
#if defined(ATTNKIT_HAS_CUDA)
  AttnParams params = make_attn_params(pooled, t);
  params.sol_keep = terms.keep;
  params.sol_q_blocks = terms.q_blocks;
  params.sol_bias_full = terms.bias_full;
  params.sol_bias_last = terms.bias_last;
  return check_cuda(kernel.launch(params, stream), "sol_attn pooled-key launch");
#else
  (void)pooled, (void)t, (void)terms, (void)stream;
  return diagnose("AK6002", {{"reason", "this build has no CUDA (sol_attn's pooled keys)"}});
#endif
}

}  // namespace cuda

void register_cuda_backends(Registry& registry) {
  registry.add(make_fa3_backend());
  registry.add(make_fa2_backend());
  registry.add(make_cuda_sdpa_backend());
}

}  // namespace attnkit
