// The CUDA side of dist/'s element-wise work: token-row copies with dtype
// conversion, the LSE merge (core/lse_merge.hpp's weights, one warp per row and
// head) and fills, queued on the caller's stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/device.hpp"
#include "dist/device_ops.hpp"
#include "kernels/cuda/cuda_types.hpp"

namespace attnkit::dist {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 4096;

int blocks_for(std::int64_t work) {
  return static_cast<int>(std::max<std::int64_t>(1, std::min(kMaxBlocks, (work + kThreads - 1) / kThreads)));
}

template <class T>
__device__ void copy_element(const RowCopy& c, std::int64_t s, std::int64_t d) {
  static_cast<T*>(c.dst)[d] = static_cast<const T*>(c.src)[s];
}

// Element i of the run: (row, head, e) = (i / (heads * dim), (i / dim) % heads, i % dim).
__global__ void copy_rows_kernel(RowCopy c, RowRun run, int elem_bytes, bool same) {
  const std::int64_t total = run.rows * c.heads * c.dim;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int e = static_cast<int>(i % c.dim);
    const std::int64_t rh = i / c.dim;
    const int h = static_cast<int>(rh % c.heads);
    const std::int64_t r = rh / c.heads;
    const std::int64_t s = run.src + r * c.src_row_stride + h * c.src_head_stride + e;
    const std::int64_t d = run.dst + r * c.dst_row_stride + h * c.dst_head_stride + e;
    if (!same) {
      cuda::store_float(c.dst, c.dst_dtype, d, cuda::load_float(c.src, c.src_dtype, s));
    } else if (elem_bytes == 4) {
      copy_element<std::uint32_t>(c, s, d);
    } else if (elem_bytes == 2) {
      copy_element<std::uint16_t>(c, s, d);
    } else if (elem_bytes == 8) {
      copy_element<std::uint64_t>(c, s, d);
    } else {
      copy_element<std::uint8_t>(c, s, d);
    }
  }
}

// One warp per (row, head): every lane reads the old LSE, lane 0 writes the new one.
__global__ void merge_kernel(MergeRows m) {
  const std::int64_t warp = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= m.rows * m.heads) return;
  const std::int64_t r = warp / m.heads;
  const int h = static_cast<int>(warp % m.heads);
  float* lse = m.acc_lse + r * m.acc_lse_row_stride + h * m.acc_lse_head_stride;
  const LseWeights w = lse_merge_weights(*lse, m.part_lse[r * m.part_lse_row_stride + h * m.part_lse_head_stride]);
  float* acc = m.acc_out + r * m.acc_row_stride + h * m.acc_head_stride;
  const std::int64_t part = r * m.part_row_stride + h * m.part_head_stride;
  for (int d = lane; d < m.dim; d += 32)
    acc[d] = m.part_out == nullptr ? w.a * acc[d] : w.a * acc[d] + w.b * cuda::load_float(m.part_out, m.part_dtype, part + d);
  __syncwarp();
  if (lane == 0) *lse = w.lse;
}

__global__ void fill_kernel(float* data, std::int64_t count, float value) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    data[i] = value;
}

cudaStream_t as_stream(StreamHandle s) { return static_cast<cudaStream_t>(s); }

class CudaOps final : public DeviceOps {
 public:
  Diagnostics copy_rows(const RowCopy& c, std::span<const RowRun> runs, StreamHandle stream) const override {
    const bool same = c.src_dtype == c.dst_dtype;
    for (const RowRun& run : runs) {
      const std::int64_t work = run.rows * c.heads * c.dim;
      if (work == 0) continue;
      copy_rows_kernel<<<blocks_for(work), kThreads, 0, as_stream(stream)>>>(c, run, static_cast<int>(dtype_size(c.src_dtype)),
                                                                           same);
    }
    return cuda::check_cuda(cudaGetLastError(), "dist copy_rows launch");
  }
  Diagnostics merge(const MergeRows& m, StreamHandle stream) const override {
    const std::int64_t threads = m.rows * m.heads * 32;
    if (threads == 0) return {};
    merge_kernel<<<static_cast<int>((threads + kThreads - 1) / kThreads), kThreads, 0, as_stream(stream)>>>(m);
    return cuda::check_cuda(cudaGetLastError(), "dist LSE merge launch");
  }
  Diagnostics fill(float* data, std::int64_t count, float value, StreamHandle stream) const override {
    if (count == 0) return {};
    fill_kernel<<<blocks_for(count), kThreads, 0, as_stream(stream)>>>(data, count, value);
    return cuda::check_cuda(cudaGetLastError(), "dist fill launch");
  }
  Diagnostics copy_bytes(void* dst, const void* src, std::size_t bytes, StreamHandle stream) const override {
    if (bytes == 0) return {};
    return cuda::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)), "cudaMemcpyAsync");
  }
  Diagnostics synchronize(StreamHandle stream) const override {
    return cuda::check_cuda(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
  }
  Result<void*> allocate(std::size_t bytes) const override {
    void* p = nullptr;
    if (Diagnostics why = cuda::check_cuda(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)), "cudaMalloc"); !why.ok()) return why;
    return p;
  }
  void release(void* p) const override { cudaFree(p); }
};

}  // namespace

const DeviceOps* cuda_ops() {
  static const CudaOps ops;
  return &ops;
}

}  // namespace attnkit::dist
