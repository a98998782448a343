#pragma once
// The element-wise work around the collectives (packing token rows, LSE merges,
// fills), on the memory the plan runs on: host loops, or CUDA kernels queued on
// the caller's stream (src/dist/cuda/device_ops.cu).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/lse_merge.hpp"
#include "attnkit/core/tensor.hpp"

namespace attnkit::dist {

// `rows` consecutive token rows: the first starts `src` / `dst` elements from
// the views' bases.
struct RowRun {
  std::int64_t src = 0;
  std::int64_t dst = 0;
  std::int64_t rows = 0;
};

// Copies `heads` x `dim` elements per row from src to dst, converting between
// f32 / f16 / bf16 when the dtypes differ (raw bytes when they are equal).
struct RowCopy {
  const void* src = nullptr;
  DType src_dtype = DType::f32;
  std::int64_t src_row_stride = 0, src_head_stride = 0;
  void* dst = nullptr;
  DType dst_dtype = DType::f32;
  std::int64_t dst_row_stride = 0, dst_head_stride = 0;
  int heads = 0;
  int dim = 0;
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual Diagnostics copy_rows(const RowCopy& c, std::span<const RowRun> runs, StreamHandle stream) const = 0;
  virtual Diagnostics merge(const MergeRows& m, StreamHandle stream) const = 0;
  virtual Diagnostics fill(float* data, std::int64_t count, float value, StreamHandle stream) const = 0;
  // Any direction (host <-> device); ordered on `stream`.
  virtual Diagnostics copy_bytes(void* dst, const void* src, std::size_t bytes, StreamHandle stream) const = 0;
  virtual Diagnostics synchronize(StreamHandle stream) const = 0;
  // Buffers outside a plan's workspace (the CLI's device copies of a shard).
  virtual Result<void*> allocate(std::size_t bytes) const = 0;
  virtual void release(void* p) const = 0;
};

const DeviceOps& host_ops();
// nullptr in a build without CUDA.
const DeviceOps* cuda_ops();
// The ops for buffers in `memory`; AK6002 when CUDA memory is asked of a build without it.
Result<const DeviceOps*> ops_for(DeviceKind memory);

// Copies of host tensors on a plan's device, freed with the object: how the
// CLI and the tests hand a host shard to a GPU plan (on the CPU: the host
// tensors themselves).
class DeviceCopies {
 public:
  DeviceCopies(const DeviceOps& ops, Device device) : ops_(ops), device_(device) {}
  ~DeviceCopies();
  DeviceCopies(const DeviceCopies&) = delete;
  DeviceCopies& operator=(const DeviceCopies&) = delete;

  // Same shape and strides on the device; an undefined view stays undefined.
  Result<TensorView> place(const TensorView& host);
  // Every defined tensor of `t` but cu_seqlens (which plans read on the host).
  Diagnostics place_all(AttentionTensors& t);
  // Copies `device` back into `host` and waits.
  Diagnostics fetch(const TensorView& device, const TensorView& host) const;
  Result<void*> scratch(std::size_t bytes);

 private:
  const DeviceOps& ops_;
  Device device_;
  std::vector<void*> owned_;
};

}  // namespace attnkit::dist
