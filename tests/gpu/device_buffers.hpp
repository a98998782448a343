#pragma once
// For the GPU tests: a fixture that skips without CUDA or a GPU (every build),
// and device copies of a host binding and a device workspace (CUDA builds).
#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/platform/platform.hpp"

#if defined(ATTNKIT_HAS_CUDA)
#include <cuda_runtime.h>
#endif

namespace attnkit::testing {

// Skips without CUDA or a device; gpu_ is this machine's GPU.
class OnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_compiled()) GTEST_SKIP() << "this build has no CUDA";
    gpu_ = detect_cuda_platform();
    if (!gpu_) GTEST_SKIP() << "no CUDA device on this machine (the GPU tests run on the device machine: scripts/gpu_check.sh)";
  }
  std::optional<Platform> gpu_;
};

#if defined(ATTNKIT_HAS_CUDA)

// Device copies of a binding's tensors (q, k, v, out and whichever of lse,
// sinks, cu_seqlens, block lists, block table and seqlens_k the binding has):
// buffers.size() of them when every copy was allocated and made.
struct DeviceBinding {
  AttentionTensors t;
  std::vector<void*> buffers;
  explicit DeviceBinding(const AttentionTensors& host) : t(host) {
    for (TensorView* v : {&t.q, &t.k, &t.v, &t.out, &t.lse, &t.sinks, &t.cu_seqlens_q, &t.cu_seqlens_k,
                          &t.block_offsets, &t.block_indices, &t.block_table, &t.seqlens_k}) {
      if (v->data == nullptr) continue;
      void* ptr = nullptr;
      if (cudaMalloc(&ptr, v->span_bytes()) != cudaSuccess) continue;
      if (cudaMemcpy(ptr, v->data, v->span_bytes(), cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(ptr);
        continue;
      }
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

// A host view of bytes copied back from the device, shaped like `like`.
inline TensorView host_view_of(const std::vector<std::byte>& bytes, TensorView like) {
  like.data = const_cast<std::byte*>(bytes.data());
  like.device = {DeviceKind::cpu, 0};
  return like;
}

// run() allocates nothing and waits for nothing: `queue(stream)` run eagerly
// on a stream of its own, then (out and workspace poisoned) captured into a
// CUDA graph and replayed, writes the same output bytes both times.
template <class Queue>
::testing::AssertionResult replay_matches_eager(const DeviceBinding& dev, const DeviceWorkspace& ws, Queue&& queue) {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
    return ::testing::AssertionFailure() << "no stream";
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<std::byte> eager;
  if (Diagnostics ran = queue(stream); !ran.ok() || cudaStreamSynchronize(stream) != cudaSuccess) {
    result = ::testing::AssertionFailure() << "eager run: " << ran.summary();
  } else {
    eager = dev.out();
    // On the capture stream: a plain cudaMemset goes to the legacy stream,
    // which a non-blocking stream does not wait for, so the poison could land
    // after the replay (seen under ctest -j on the H200, 2026-12-02).
    if (cudaMemsetAsync(dev.t.out.data, 0xFF, dev.t.out.span_bytes(), stream) != cudaSuccess ||
        cudaMemsetAsync(ws.data, 0xFF, ws.bytes, stream) != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess)
      result = ::testing::AssertionFailure() << "cannot poison the output and workspace";
    else if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess)
      result = ::testing::AssertionFailure() << "cannot capture";
    else if (const Diagnostics ran_captured = queue(stream);
             cudaStreamEndCapture(stream, &graph) != cudaSuccess || !ran_captured.ok())
      result = ::testing::AssertionFailure() << "capture: " << ran_captured.summary();
    else if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess || cudaGraphLaunch(exec, stream) != cudaSuccess ||
             cudaStreamSynchronize(stream) != cudaSuccess)
      result = ::testing::AssertionFailure() << "replay failed";
    else if (dev.out() != eager)
      result = ::testing::AssertionFailure() << "the replay's output differs from the eager run's";
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return result;
}

// A workspace one byte short (or none) is AK1110 before anything is queued.
inline void expect_short_workspace_refused(const Plan& plan, const AttentionTensors& device_tensors) {
  const std::size_t need = plan.workspace_bytes();
  DeviceWorkspace ws(need);
  EXPECT_TRUE(plan.run(device_tensors, ws.span().first(need - 1), nullptr).has_code("AK1110"));
  EXPECT_TRUE(plan.run(device_tensors, Workspace{}, nullptr).has_code("AK1110"));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Device copies of a binding with its gate (DeviceBinding copies the attention tensors only).
struct GatedBinding {
  DeviceBinding dev;
  void* gate = nullptr;
  explicit GatedBinding(const AttentionTensors& host) : dev(host) {
    if (host.gate.data == nullptr) return;
    if (cudaMalloc(&gate, host.gate.span_bytes()) != cudaSuccess) return;
    cudaMemcpy(gate, host.gate.data, host.gate.span_bytes(), cudaMemcpyHostToDevice);
    dev.t.gate.data = gate;
    dev.t.gate.device = {DeviceKind::cuda, 0};
  }
  ~GatedBinding() {
    if (gate) cudaFree(gate);
  }
};
#endif

}  // namespace attnkit::testing
