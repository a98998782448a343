#pragma once
// Platform: where attention runs. Detected on this machine, or named on the
// command line ("cuda:sm90", "cpu", "rocm", ...) to validate a deployment for
// another machine. Only CUDA and CPU kernels are built; other kinds are modelled.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/core/diagnostic.hpp"

namespace attnkit {

namespace dist {
class Communicator;
}

enum class PlatformKind : std::uint8_t { cpu, cuda, rocm, xpu, musa, mps, npu };
std::string_view platform_kind_name(PlatformKind k);

// x86 SIMD levels the CPU kernels dispatch on (highest first).
struct CpuFeatures {
  bool avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512_bf16 = false,
       avx512_fp16 = false, amx_bf16 = false;
  int logical_cores = 1;
  std::string model;
};

struct Platform {
  PlatformKind kind = PlatformKind::cpu;
  int sm = 0;             // CUDA compute capability as major*10+minor (90 for sm_90)
  std::string device_name;  // "NVIDIA H200", CPU model, or the named platform
  bool detected = false;  // true: this machine; false: named, modelled for validation
  bool has_cudnn = false;
  int cudnn_version = 0;  // detected: cudnnGetVersion() of the loaded library (91900 = 9.19.0); named: assumed
  bool has_nccl = false;
  int multiprocessors = 0;
  CpuFeatures cpu{};
  int device_index = 0;  // CUDA: the device plans run on (one rank per GPU: the local rank)
  // The ranks a sequence-parallel plan spans (dist/); null: this process alone.
  std::shared_ptr<dist::Communicator> communicator;

  std::string label() const;  // "cuda:sm90", "cpu"
};

// The CPU of this machine (always available).
Platform detect_cpu_platform();
// The first CUDA device if a driver and a device are present.
std::optional<Platform> detect_cuda_platform();
// CUDA when a device is present, else the CPU.
Platform detect_local_platform();
// Every platform this machine can run on, GPU first: where a single call may
// go (`attnkit run`, the Python module).
std::vector<Platform> detect_local_platforms();
// "cpu", "cuda" (this machine's GPU), "cuda:sm80" ... , "rocm", "xpu", "musa", "mps", "npu".
Result<Platform> parse_platform(std::string_view name);

// Whether this binary was built with CUDA sources.
bool cuda_compiled();

// The cuDNN release a named CUDA platform is assumed to have: the one the
// cudnn backend is built and measured against (PyTorch's cu13 wheels ship it).
inline constexpr int kNamedPlatformCudnnVersion = 91900;
// "9.19.0" for 91900.
std::string cudnn_version_string(int version);
// Where a platform's cuDNN comes from, for `check` and `run`: "9.19.0 (loaded
// from ...)", "9.19.0 (assumed for a named platform)" or "not available (...)".
std::string cudnn_description(const Platform& platform);

}  // namespace attnkit
