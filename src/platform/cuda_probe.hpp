#pragma once
// The CUDA device probe, compiled from cuda_probe.cu when CUDA is enabled and
// from cuda_probe_none.cpp otherwise, so host code never includes CUDA headers.
#include <optional>
#include <string>

namespace attnkit {

struct CudaDeviceInfo {
  int sm = 0;
  std::string name;
  int multiprocessors = 0;
  std::size_t shared_memory_per_block_optin = 0;
  std::size_t global_memory = 0;
};

// The first CUDA device, or nothing when no driver/device is usable.
std::optional<CudaDeviceInfo> probe_cuda_device();

}  // namespace attnkit
