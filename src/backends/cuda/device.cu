#include <cuda_runtime.h>

#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "backends/cuda/device.hpp"

namespace attnkit::cuda {

Diagnostics check_cuda(int error, std::string_view call) {
  const auto err = static_cast<cudaError_t>(error);
  if (err == cudaSuccess) return {};
  cudaGetLastError();  // a launch error is sticky until read
  return diagnose("AK6001", {{"call", std::string(call)},
                             {"error", std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err)}});
}

Result<DeviceProperties> current_device_properties() {
  static std::mutex mutex;
  static std::array<std::optional<DeviceProperties>, 64> cache;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return diagnose("AK6002", {{"reason", "cudaGetDeviceCount found no device"}});
  }
  int device = 0;
  if (Diagnostics why = check_cuda(cudaGetDevice(&device), "cudaGetDevice"); !why.ok()) return why;
  std::lock_guard lock(mutex);
  if (device < static_cast<int>(cache.size()) && cache[device]) return *cache[device];
  cudaDeviceProp prop{};
  if (Diagnostics why = check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"); !why.ok())
    return why;
  DeviceProperties d;
  d.index = device;
  d.sm = prop.major * 10 + prop.minor;
  d.name = prop.name;
  d.multiprocessors = prop.multiProcessorCount;
  d.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  d.shared_memory_per_multiprocessor = prop.sharedMemPerMultiprocessor;
  d.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  d.max_threads_per_multiprocessor = prop.maxThreadsPerMultiProcessor;
  if (device < static_cast<int>(cache.size())) cache[device] = d;
  return d;
}

Diagnostics raise_dynamic_smem(const void* kernel, std::size_t bytes, std::string_view what) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, std::size_t> raised;  // (device, kernel) -> the limit set
  int device = 0;
  if (Diagnostics why = check_cuda(cudaGetDevice(&device), "cudaGetDevice"); !why.ok()) return why;
  std::lock_guard lock(mutex);
  std::size_t& limit = raised[{device, kernel}];
  if (bytes <= limit) return {};
  if (Diagnostics why = check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        static_cast<int>(bytes)),
                                   "cudaFuncSetAttribute(" + std::string(what) + " shared memory)");
      !why.ok())
    return why;
  limit = bytes;
  return {};
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

Result<DeviceBuffer> DeviceBuffer::upload(const void* host, std::size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return std::move(b);
  if (Diagnostics why = check_cuda(cudaMalloc(&b.data_, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)");
      !why.ok())
    return why;
  b.bytes_ = bytes;
  if (Diagnostics why = check_cuda(cudaMemcpy(b.data_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(upload)");
      !why.ok())
    return why;
  return std::move(b);
}

Diagnostics zero_async(void* device, std::size_t bytes, void* stream) {
  return check_cuda(cudaMemsetAsync(device, 0, bytes, static_cast<cudaStream_t>(stream)), "cudaMemsetAsync");
}

Diagnostics copy_to_host_and_wait(void* host, const void* device, std::size_t bytes, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (Diagnostics why = check_cuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
      !why.ok())
    return why;
  return check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

}  // namespace attnkit::cuda
