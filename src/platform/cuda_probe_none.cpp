// Built when attnkit is configured without CUDA: there is never a device.
#include "attnkit/platform/platform.hpp"
#include "cuda_probe.hpp"

namespace attnkit {
bool cuda_compiled() { return false; }
std::optional<CudaDeviceInfo> probe_cuda_device() { return std::nullopt; }
}  // namespace attnkit
