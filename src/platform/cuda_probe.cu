#include <cuda_runtime.h>

#include "attnkit/platform/platform.hpp"
#include "cuda_probe.hpp"

namespace attnkit {

bool cuda_compiled() { return true; }

std::optional<CudaDeviceInfo> probe_cuda_device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return std::nullopt;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return std::nullopt;
  CudaDeviceInfo info;
  info.sm = prop.major * 10 + prop.minor;
  info.name = prop.name;
  info.multiprocessors = prop.multiProcessorCount;
  info.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  info.global_memory = prop.totalGlobalMem;
  return info;
}

}  // namespace attnkit
