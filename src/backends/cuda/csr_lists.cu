// CSR lists from keep flags (csr_lists.hpp).
#include <cuda_runtime.h>

#include "backends/cuda/csr_lists.hpp"
#include "backends/cuda/device.hpp"

namespace attnkit::cuda {
namespace {

constexpr int kScanThreads = 1024;
constexpr int kWarpsPerCta = 8;

// offsets[0] = 0, offsets[r + 1] = counts[0] + ... + counts[r]: one CTA,
// each thread a contiguous chunk of rows.
__global__ void __launch_bounds__(kScanThreads) offsets_kernel(CsrFromFlags c) {
  __shared__ std::int64_t chunk[kScanThreads];
  const std::int64_t rows = c.rows;
  const std::int64_t per = (rows + blockDim.x - 1) / blockDim.x;
  const std::int64_t lo = min(rows, threadIdx.x * per), hi = min(rows, lo + per);
  std::int64_t sum = 0;
  for (std::int64_t r = lo; r < hi; ++r) sum += c.counts[r];
  chunk[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    std::int64_t run = 0;
    for (int t = 0; t < static_cast<int>(blockDim.x); ++t) {
      const std::int64_t here = chunk[t];
      chunk[t] = run;
      run += here;
    }
    c.offsets[0] = 0;
  }
  __syncthreads();
  std::int64_t run = chunk[threadIdx.x];
  for (std::int64_t r = lo; r < hi; ++r) c.offsets[r + 1] = static_cast<std::int32_t>(run += c.counts[r]);
}

// One warp per row: its kept columns, ascending, from offsets[r] on.
__global__ void indices_kernel(CsrFromFlags c) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32; r < c.rows;
       r += warps) {
    const std::uint8_t* keep = c.keep + r * c.cols;
    std::int64_t at = c.offsets[r];
    for (int kb0 = 0; kb0 < c.cols; kb0 += 32) {
      const int kb = kb0 + lane;
      const bool kept = kb < c.cols && keep[kb];
      const unsigned ballot = __ballot_sync(0xffffffffu, kept);
      if (kept) c.indices[at + __popc(ballot & ((1u << lane) - 1))] = kb;
      at += __popc(ballot);
    }
  }
}

}  // namespace

Diagnostics csr_from_flags(const CsrFromFlags& c, StreamHandle stream) {
  auto st = static_cast<cudaStream_t>(stream);
  offsets_kernel<<<1, kScanThreads, 0, st>>>(c);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "CSR offsets launch"); !why.ok()) return why;
  const unsigned grid = stride_loop_grid((c.rows + kWarpsPerCta - 1) / kWarpsPerCta);
  indices_kernel<<<grid, 32 * kWarpsPerCta, 0, st>>>(c);
  return check_cuda(cudaGetLastError(), "CSR indices launch");
}

}  // namespace attnkit::cuda
