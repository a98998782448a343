// Backend names as users write them: case, `-` for `_`, the engine's enum
// spellings and other aliases, families, and the process-wide global force.
#include <cctype>
#include <mutex>

#include "attnkit/select/selector.hpp"
#include "select/text_util.hpp"

namespace attnkit::select {
namespace {

struct Alias {
  std::string_view alias;
  std::string_view canonical;
};
// Spellings of other projects for attnkit's backends: the engine's
// AttentionBackendEnum names (TORCH_SDPA, TORCH_CUDNN_SDPA, FA2, SAGE_ATTN ...
// are matched once lower-cased), its LLM-side names (torch_native, triton,
// aiter_attn for the vision tower) and the package names users know.
constexpr Alias kAliases[] = {
    {"cudnn_sdpa", "cudnn"},       {"torch_cudnn_sdpa", "cudnn"}, {"torch_sdpa", "sdpa"},
    {"torch_native", "sdpa"},      {"triton", "triton_attn"},     {"sage", "sage_attn"},
    {"sageattention", "sage_attn"}, {"flash_attn", "fa"},          {"aiter_attn", "aiter"},
    // SGLang's deprecated LLM spellings, and the spelled-out SageAttention3.
    {"nsa", "dsa"},                {"compressed", "dsv4"},        {"sage_attn_three", "sage_attn_3"},
};

// Names the engine accepts that attnkit knows but does not provide: each is
// refused with its own catalogued code instead of AK2002 (unknown).
struct EngineOnly {
  std::string_view name;
  std::string_view code;
  std::string_view what, reason, instead;  // the page's fields (AK2120)
};
constexpr EngineOnly kEngineOnly[] = {
    // Cambricon MLU: attnkit has no Platform for it, so nothing can be checked there.
    {"mlu", "AK2120", "Cambricon MLU attention (SGLang --device mlu)",
     "attnkit has no MLU platform to model its kernels on",
     "validate the deployment on a platform attnkit models (--platform cuda:smXX, rocm, xpu, musa, npu, mps, cpu), "
     "or leave the MLU deployment's attention backend to the engine"},
    // The diffusion enum's marker for a component without attention layers (AK2121).
    {"no_attention", "AK2121", "", "", ""},
};
constexpr std::string_view kFamilies[] = {"fa", "sdpa"};

// The kernel of the flash family for a platform (design section 2, "Names").
// On this machine (a detected platform) an arch kernel that this binary does
// not build gives way to the sm_80 kernel, which runs on every sm >= 80; a
// named platform keeps the arch's own kernel, as a deployment there would.
std::string flash_member(const Platform& platform, const Registry& registry) {
  switch (platform.kind) {
    case PlatformKind::cuda: {
      std::string member = "fa2";  // sm_80..89 and sm_120 (an older arch is refused by fa2's own check)
      if (platform.sm >= 90 && platform.sm < 100) member = "fa3";
      if (platform.sm >= 100 && platform.sm < 110) member = "fa4";
      const Backend* b = registry.find(member);
      if (platform.detected && member != "fa2" && (b == nullptr || !b->capabilities().built)) member = "fa2";
      return member;
    }
    case PlatformKind::xpu: return "xpu_flash";
    default: return "fa";  // the modelled ROCm / MUSA / NPU entry; on the CPU its check says why not
  }
}

std::string sdpa_member(const Platform& platform) {
  switch (platform.kind) {
    case PlatformKind::cuda: return "cuda_sdpa";
    case PlatformKind::cpu: return "cpu_flash";
    default: return "sdpa";
  }
}

std::mutex g_force_mutex;
std::string g_force;

}  // namespace

std::string normalise_name(std::string_view name) {
  std::string out = trim(name);
  for (char& ch : out) {
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (ch == '-') ch = '_';
  }
  return out;
}

std::string normalise_backend_name(std::string_view name) {
  std::string n = normalise_name(name);
  for (const Alias& a : kAliases)
    if (a.alias == n) return std::string(a.canonical);
  return n;
}

bool is_auto_name(std::string_view name) { return normalise_name(name) == "auto"; }

std::string resolve_backend_name(std::string_view name, const Platform& platform, const Registry& registry) {
  std::string n = normalise_backend_name(name);
  if (n == "fa") n = flash_member(platform, registry);
  else if (n == "sdpa") n = sdpa_member(platform);
  return registry.find(n) != nullptr ? registry.canonical_name(n) : std::string();
}

std::vector<std::string> resolve_backend_candidates(std::string_view name, const Platform& platform,
                                                    const Registry& registry) {
  std::vector<std::string> out;
  std::string first = resolve_backend_name(name, platform, registry);
  if (first.empty()) return out;
  out.push_back(std::move(first));
  if (normalise_backend_name(name) == "fa" && platform.kind == PlatformKind::cuda && registry.find("fa2") != nullptr) {
    std::string fa2 = registry.canonical_name("fa2");
    if (fa2 != out.front()) out.push_back(std::move(fa2));
  }
  return out;
}

bool is_flash_family(std::string_view canonical) {
  return canonical == "fa" || canonical == "fa2" || canonical == "fa3" || canonical == "fa4";
}

bool names_backend(std::string_view written, std::string_view canonical, const Platform& platform,
                   const Registry& registry) {
  if (resolve_backend_name(written, platform, registry) == canonical) return true;
  // `fa` also names every kernel of the flash family, an explicit fa2 on sm_90 included.
  return normalise_backend_name(written) == "fa" && is_flash_family(canonical);
}

std::vector<std::string> accepted_backend_names(const Registry& registry) {
  std::vector<std::string> out = registry.names();
  for (std::string_view f : kFamilies)
    if (std::find(out.begin(), out.end(), f) == out.end()) out.emplace_back(f);
  for (const Alias& a : kAliases) out.emplace_back(a.alias);
  return out;
}

Diagnostic unknown_backend(std::string_view name, const Registry& registry) {
  const std::string n = normalise_backend_name(name);
  for (const EngineOnly& e : kEngineOnly)
    if (e.name == n && registry.find(n) == nullptr) {
      const std::pair<std::string_view, std::string> args[] = {
          {"name", std::string(name)}, {"what", std::string(e.what)}, {"reason", std::string(e.reason)},
          {"instead", std::string(e.instead)}};
      return diagnose_args(e.code, args);
    }
  return unknown_backend_name(name, accepted_backend_names(registry));
}

namespace {
// "auto" forces nothing (the selection's own order), as backend="auto" and
// --attention-backend auto mean; kept as a name it was an unknown backend (AK2002).
std::string forced_name(std::string name) { return is_auto_name(name) ? std::string() : std::move(name); }
}  // namespace

void set_global_force_backend(std::string name) {
  std::lock_guard lock(g_force_mutex);
  g_force = forced_name(std::move(name));
}

std::string global_force_backend() {
  std::lock_guard lock(g_force_mutex);
  return g_force;
}

ScopedForceBackend::ScopedForceBackend(std::string name) {
  std::lock_guard lock(g_force_mutex);
  previous_ = std::exchange(g_force, forced_name(std::move(name)));
}

ScopedForceBackend::~ScopedForceBackend() {
  std::lock_guard lock(g_force_mutex);
  g_force = std::move(previous_);
}

}  // namespace attnkit::select
