#pragma once
// Device copies of a host binding, a device workspace and a fixture that
// skips without a GPU, for the GPU tests; CUDA builds only.
#if defined(ATTNKIT_HAS_CUDA)
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

#include <optional>

#include "attnkit/backends/backend.hpp"
#include "attnkit/platform/platform.hpp"

namespace attnkit::testing {

// Device copies of a binding's tensors (q, k, v, out and whichever of lse,
// sinks, cu_seqlens the problem has: buffers.size() of them when all were allocated).
struct DeviceBinding {
  AttentionTensors t;
  std::vector<void*> buffers;
  explicit DeviceBinding(const AttentionTensors& host) : t(host) {
    for (TensorView* v : {&t.q, &t.k, &t.v, &t.out, &t.lse, &t.sinks, &t.cu_seqlens_q, &t.cu_seqlens_k}) {
      if (v->data == nullptr) continue;
      void* ptr = nullptr;
      if (cudaMalloc(&ptr, v->span_bytes()) != cudaSuccess) continue;
      cudaMemcpy(ptr, v->data, v->span_bytes(), cudaMemcpyHostToDevice);
      v->data = ptr;
      v->device = {DeviceKind::cuda, 0};
      buffers.push_back(ptr);
    }
  }
  DeviceBinding(const DeviceBinding&) = delete;
  DeviceBinding& operator=(const DeviceBinding&) = delete;
  ~DeviceBinding() {
    for (void* b : buffers) cudaFree(b);
  }
  std::vector<std::byte> out() const {
    std::vector<std::byte> host(t.out.span_bytes());
    cudaMemcpy(host.data(), t.out.data, host.size(), cudaMemcpyDeviceToHost);
    return host;
  }
};

struct DeviceWorkspace {
  void* data = nullptr;
  std::size_t bytes = 0;
  explicit DeviceWorkspace(std::size_t n) : bytes(n) {
    if (n > 0 && cudaMalloc(&data, n) != cudaSuccess) data = nullptr, bytes = 0;
  }
  DeviceWorkspace(const DeviceWorkspace&) = delete;
  DeviceWorkspace& operator=(const DeviceWorkspace&) = delete;
  ~DeviceWorkspace() {
    if (data) cudaFree(data);
  }
  Workspace span() const { return {static_cast<std::byte*>(data), bytes}; }
};

// Skips without CUDA or a device; gpu_ is this machine's GPU.
class OnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_compiled()) GTEST_SKIP() << "this build has no CUDA";
    gpu_ = detect_cuda_platform();
    if (!gpu_) GTEST_SKIP() << "no CUDA device on this machine (run build-gpu/tests/test_sparse_gpu on the device machine)";
  }
  std::optional<Platform> gpu_;
};

}  // namespace attnkit::testing
#endif
