// Test-side device mirror: copies a host problem's buffers to the GPU, runs a
// CUDA plan on them, and copies the outputs back into the host (poisoned) ones.
#include <cuda_runtime.h>

#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/host_tensor.hpp"

namespace attnkit::testing {
namespace {

#define AK_TEST_CUDA(call)                                                                            \
  do {                                                                                              \
    const cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) return diagnose("AK6001", {{"call", #call}, {"error", cudaGetErrorString(err_)}}); \
  } while (0)

// Device copy of one host view; strides are kept, so the whole span is copied.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
};

}  // namespace

Diagnostics run_backend_cuda(const Plan& plan, HostProblemData& data) {
  const AttentionTensors host = data.tensors();
  AttentionTensors dev = host;
  std::vector<DeviceBuffer> buffers(12);
  TensorView* views[] = {&dev.q, &dev.k, &dev.v, &dev.out, &dev.lse, &dev.sinks, &dev.cu_seqlens_q,
                         &dev.cu_seqlens_k, &dev.block_table, &dev.seqlens_k, &dev.block_mask, &dev.custom_mask};
  for (std::size_t i = 0; i < std::size(views); ++i) {
    TensorView& v = *views[i];
    if (v.data == nullptr) continue;
    DeviceBuffer& b = buffers[i];
    b.bytes = static_cast<std::size_t>(v.span_bytes());
    AK_TEST_CUDA(cudaMalloc(&b.ptr, b.bytes > 0 ? b.bytes : 16));
    AK_TEST_CUDA(cudaMemcpy(b.ptr, v.data, b.bytes, cudaMemcpyHostToDevice));  // outputs: poison too
    v.data = b.ptr;
    v.device = {DeviceKind::cuda, 0};
  }
  DeviceBuffer workspace;
  workspace.bytes = plan.workspace_bytes();
  if (workspace.bytes > 0) AK_TEST_CUDA(cudaMalloc(&workspace.ptr, workspace.bytes));
  Diagnostics ran = plan.run(dev, {static_cast<std::byte*>(workspace.ptr), workspace.bytes}, nullptr);
  if (!ran.ok()) return ran;
  AK_TEST_CUDA(cudaDeviceSynchronize());
  AK_TEST_CUDA(cudaMemcpy(host.out.data, dev.out.data, buffers[3].bytes, cudaMemcpyDeviceToHost));
  if (host.lse.data) AK_TEST_CUDA(cudaMemcpy(host.lse.data, dev.lse.data, buffers[4].bytes, cudaMemcpyDeviceToHost));
  return {};
}

}  // namespace attnkit::testing
