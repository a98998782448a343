#pragma once
// The CUDA device layer: every runtime call checked and turned into a
// catalogued diagnostic (AK6001 / AK6002), and the device properties plans use
// to choose tiles. Compiled only when CUDA is (device.cu); host glue guards its
// uses with ATTNKIT_HAS_CUDA.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/host_device.hpp"

namespace attnkit::cuda {

// AK6001 "CUDA call {call} failed: {error}" when `error` (a cudaError_t) is not
// success; empty otherwise. Clears the sticky last-error state it reports.
Diagnostics check_cuda(int error, std::string_view call);

// The grid of a grid-stride kernel with `work` CTAs' worth of work: at least
// 1 and at most 2^16 CTAs, which walk the rest in strides. 2^16 keeps
// the grid well inside gridDim.x's 2^31 - 1 with every SM full many times.
inline unsigned stride_loop_grid(std::int64_t work) {
  constexpr std::int64_t kMaxGrid = std::int64_t{1} << 16;
  return static_cast<unsigned>(work < 1 ? 1 : work > kMaxGrid ? kMaxGrid : work);
}

// Raises `kernel`'s dynamic shared memory limit on the current device to at
// least `bytes`, at plan time; never lowers it, so plans of other shapes that
// share the kernel keep what they configured. Calls the runtime only when the
// limit rises. AK6001 (naming `what`) on failure.
Diagnostics raise_dynamic_smem(const void* kernel, std::size_t bytes, std::string_view what);

// Whether a pointer allows 16-byte loads and stores, and whether rows of 2-byte
// elements at these strides (elements between batches, tokens, heads) from
// such a pointer all do: the kernels' vector paths of 8 elements a load.
AK_HOST_DEVICE bool aligned_16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
inline bool rows_aligned_16(const void* p, const std::int64_t (&strides)[3]) {
  return aligned_16(p) && strides[0] % 8 == 0 && strides[1] % 8 == 0 && strides[2] % 8 == 0;
}

struct DeviceProperties {
  int index = 0;
  int sm = 0;  // major * 10 + minor
  std::string name;
  int multiprocessors = 0;
  std::size_t shared_memory_per_block_optin = 0;
  std::size_t shared_memory_per_multiprocessor = 0;
  std::size_t l2_bytes = 0;
  int max_threads_per_multiprocessor = 0;
};

// The current device's properties (queried once per device, then cached), or
// AK6002 when there is no usable device.
Result<DeviceProperties> current_device_properties();

// Device memory a plan owns (index arrays and lists uploaded at plan time),
// freed with the plan. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  // cudaMalloc + a synchronous copy from host memory (AK6001 on failure).
  static Result<DeviceBuffer> upload(const void* host, std::size_t bytes);
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Enqueues zeroing `bytes` of device memory on `stream` (capturable).
Diagnostics zero_async(void* device, std::size_t bytes, void* stream);
// Copies `bytes` of device memory to `host` on `stream`, then waits for the
// stream (not capturable: for results the host reads back, such as counts).
Diagnostics copy_to_host_and_wait(void* host, const void* device, std::size_t bytes, void* stream);

}  // namespace attnkit::cuda
