#include <cuda_runtime.h>

#include <vector>

#include "attnkit/platform/device_problem_data.hpp"

namespace attnkit {
namespace {

Diagnostic cuda_failure(const char* call, cudaError_t err) {
  return diagnose("AK6001", {{"call", call}, {"error", cudaGetErrorString(err)}});
}

#define AK_CUDA_TRY(call)                                        \
  do {                                                           \
    const cudaError_t ak_err_ = (call);                          \
    if (ak_err_ != cudaSuccess) return cuda_failure(#call, ak_err_); \
  } while (0)

struct Buffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
};

}  // namespace

struct DeviceProblemData::Impl {
  AttentionTensors tensors;
  std::vector<Buffer> buffers;  // one per bound tensor, same order as views()
  Buffer workspace;

  std::vector<TensorView*> views() {
    AttentionTensors& t = tensors;
    return {&t.q, &t.k, &t.v, &t.out, &t.lse, &t.sinks, &t.cu_seqlens_q, &t.cu_seqlens_k,
            &t.block_table, &t.seqlens_k, &t.block_offsets, &t.block_indices, &t.custom_mask};
  }
  Diagnostics ensure_workspace(std::size_t bytes) {
    if (workspace.bytes >= bytes) return {};
    if (workspace.ptr) cudaFree(workspace.ptr);
    workspace = {};
    AK_CUDA_TRY(cudaMalloc(&workspace.ptr, bytes));
    workspace.bytes = bytes;
    return {};
  }
  ~Impl() {
    for (Buffer& b : buffers)
      if (b.ptr) cudaFree(b.ptr);
    if (workspace.ptr) cudaFree(workspace.ptr);
  }
};

DeviceProblemData::DeviceProblemData() : impl_(std::make_unique<Impl>()) {}
DeviceProblemData::~DeviceProblemData() = default;

Result<std::shared_ptr<DeviceProblemData>> DeviceProblemData::upload(const HostProblemData& host) {
  std::shared_ptr<DeviceProblemData> d(new DeviceProblemData());
  Impl& m = *d->impl_;
  m.tensors = host.tensors();
  auto views = m.views();
  m.buffers.resize(views.size());
  for (std::size_t i = 0; i < views.size(); ++i) {
    TensorView& v = *views[i];
    if (v.data == nullptr) continue;
    Buffer& b = m.buffers[i];
    b.bytes = static_cast<std::size_t>(v.span_bytes());
    AK_CUDA_TRY(cudaMalloc(&b.ptr, b.bytes > 0 ? b.bytes : 16));
    AK_CUDA_TRY(cudaMemcpy(b.ptr, v.data, b.bytes, cudaMemcpyHostToDevice));
    v.data = b.ptr;
    v.device = {DeviceKind::cuda, 0};
  }
  return d;
}

const AttentionTensors& DeviceProblemData::tensors() const { return impl_->tensors; }

Diagnostics DeviceProblemData::run(const Plan& plan) {
  Diagnostics why = impl_->ensure_workspace(plan.workspace_bytes());
  if (!why.ok()) return why;
  why = plan.run(impl_->tensors, {static_cast<std::byte*>(impl_->workspace.ptr), impl_->workspace.bytes}, nullptr);
  if (!why.ok()) return why;
  AK_CUDA_TRY(cudaDeviceSynchronize());
  return {};
}

Result<std::vector<double>> DeviceProblemData::time_runs(const Plan& plan, int warmup, int repeats) {
  Diagnostics why = impl_->ensure_workspace(plan.workspace_bytes());
  if (!why.ok()) return why;
  const Workspace ws{static_cast<std::byte*>(impl_->workspace.ptr), impl_->workspace.bytes};
  for (int i = 0; i < warmup; ++i) {
    why = plan.run(impl_->tensors, ws, nullptr);
    if (!why.ok()) return why;
  }
  cudaEvent_t start, stop;
  AK_CUDA_TRY(cudaEventCreate(&start));
  AK_CUDA_TRY(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < repeats && why.ok(); ++i) {
    cudaEventRecord(start);
    why = plan.run(impl_->tensors, ws, nullptr);
    cudaEventRecord(stop);
    if (cudaEventSynchronize(stop) != cudaSuccess) break;
    float t = 0.0f;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!why.ok()) return why;
  AK_CUDA_TRY(cudaGetLastError());
  return ms;
}

Diagnostics DeviceProblemData::download_outputs(HostProblemData& host) const {
  const AttentionTensors h = host.tensors();
  AK_CUDA_TRY(cudaMemcpy(h.out.data, impl_->tensors.out.data, impl_->buffers[3].bytes, cudaMemcpyDeviceToHost));
  if (h.lse.data)
    AK_CUDA_TRY(cudaMemcpy(h.lse.data, impl_->tensors.lse.data, impl_->buffers[4].bytes, cudaMemcpyDeviceToHost));
  return {};
}

}  // namespace attnkit
