#include "attnkit/platform/platform.hpp"

#include <dlfcn.h>

#include "cuda_probe.hpp"
#include "platform/cudnn_library.hpp"

namespace attnkit {

CpuFeatures detect_cpu_features();  // cpu_features.cpp

std::string_view platform_kind_name(PlatformKind k) {
  switch (k) {
    case PlatformKind::cpu: return "cpu";
    case PlatformKind::cuda: return "cuda";
    case PlatformKind::rocm: return "rocm";
    case PlatformKind::xpu: return "xpu";
    case PlatformKind::musa: return "musa";
    case PlatformKind::mps: return "mps";
    case PlatformKind::npu: return "npu";
  }
  return "?";
}

std::string Platform::label() const {
  if (kind == PlatformKind::cuda && sm > 0) return "cuda:sm" + std::to_string(sm);
  return std::string(platform_kind_name(kind));
}

namespace {
bool shared_library_present(const char* soname) {
  void* h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}
}  // namespace

std::string cudnn_version_string(int version) {
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

std::string cudnn_description(const Platform& platform) {
  if (platform.kind != PlatformKind::cuda) return "not used on " + platform.label();
  if (!platform.has_cudnn) {
    if (!platform.detected) return "not available";
    const auto& lib = cudnn_library();
    return "not available (" + (lib ? std::string("unusable") : lib.diagnostics().summary()) + ")";
  }
  const std::string v = cudnn_version_string(platform.cudnn_version);
  if (!platform.detected) return v + " (assumed for a named platform)";
  const auto& lib = cudnn_library();
  return v + " (" + (lib ? "loaded: " + lib.value().path : std::string("?")) + ")";
}

Platform detect_cpu_platform() {
  Platform p;
  p.kind = PlatformKind::cpu;
  p.detected = true;
  p.cpu = detect_cpu_features();
  p.device_name = p.cpu.model;
  return p;
}

std::optional<Platform> detect_cuda_platform() {
  const auto dev = probe_cuda_device();
  if (!dev) return std::nullopt;
  Platform p;
  p.kind = PlatformKind::cuda;
  p.detected = true;
  p.sm = dev->sm;
  p.device_name = dev->name;
  p.multiprocessors = dev->multiprocessors;
  if (const auto& cudnn = cudnn_library()) {
    p.has_cudnn = true;
    p.cudnn_version = cudnn.value().version;
  }
  p.has_nccl = shared_library_present("libnccl.so.2");
  p.cpu = detect_cpu_features();
  return p;
}

Platform detect_local_platform() {
  if (auto cuda = detect_cuda_platform()) return *cuda;
  return detect_cpu_platform();
}

std::vector<Platform> detect_local_platforms() {
  std::vector<Platform> out;
  if (auto cuda = detect_cuda_platform()) out.push_back(*cuda);
  out.push_back(detect_cpu_platform());
  return out;
}

Result<Platform> parse_platform(std::string_view name) {
  static constexpr std::string_view kValid =
      "cpu, cuda, cuda:sm70, cuda:sm75, cuda:sm80, cuda:sm86, cuda:sm89, cuda:sm90, cuda:sm100, cuda:sm120, "
      "rocm, xpu, musa, mps, npu";
  if (name == "cpu") return detect_cpu_platform();
  if (name == "cuda") {
    if (auto cuda = detect_cuda_platform()) return *cuda;
    return diagnose("AK6002", {{"reason", "'--platform cuda' names this machine's GPU; name an arch "
                                          "(cuda:sm90) to validate for another machine"}});
  }
  Platform p;
  p.detected = false;
  if (name.rfind("cuda:sm", 0) == 0) {
    const std::string_view digits = name.substr(7);
    int sm = digits.empty() || digits.size() > 3 ? -1 : 0;  // at most 3 digits: no wrap, and sm <= 130 anyway
    for (char c : digits) {
      if (sm < 0 || c < '0' || c > '9') {
        sm = -1;
        break;
      }
      sm = sm * 10 + (c - '0');
    }
    if (sm >= 50 && sm <= 130) {
      p.kind = PlatformKind::cuda;
      p.sm = sm;
      p.device_name = "CUDA sm_" + std::to_string(sm) + " (named)";
      // A named deployment target is assumed to have the CUDA libraries.
      p.has_cudnn = p.has_nccl = true;
      p.cudnn_version = kNamedPlatformCudnnVersion;
      return p;
    }
  }
  for (PlatformKind k : {PlatformKind::rocm, PlatformKind::xpu, PlatformKind::musa, PlatformKind::mps,
                         PlatformKind::npu}) {
    if (name == platform_kind_name(k)) {
      p.kind = k;
      p.device_name = std::string(name) + " (named, modelled)";
      return p;
    }
  }
  return diagnose("AK2112", {{"name", std::string(name)}, {"valid", std::string(kValid)}});
}

}  // namespace attnkit
