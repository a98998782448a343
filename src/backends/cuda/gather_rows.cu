#include <cuda_runtime.h>

#include "backends/cuda/device.hpp"
#include "backends/cuda/gather_rows.hpp"

namespace attnkit::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per `Word` of every (batch, dst row, head): words_per_head words.
template <class Word>
__global__ void gather_rows_kernel(GatherRows g, std::int64_t words_per_head) {
  const std::int64_t total = static_cast<std::int64_t>(g.batch) * g.rows * g.heads * words_per_head;
  const int elems_per_word = static_cast<int>(sizeof(Word)) / g.elem_bytes;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t w = i % words_per_head;
    std::int64_t rest = i / words_per_head;
    const int h = static_cast<int>(rest % g.heads);
    rest /= g.heads;
    const std::int64_t r = rest % g.rows;
    const int b = static_cast<int>(rest / g.rows);
    const std::int32_t from = g.index[r];
    if (from < 0 || from >= g.src_rows) continue;  // a bad index never reads out of bounds
    const std::int64_t e = w * elems_per_word;
    const std::int64_t s = b * g.src_strides[0] + from * g.src_strides[1] + h * g.src_strides[2] + e;
    const std::int64_t d = b * g.dst_strides[0] + r * g.dst_strides[1] + h * g.dst_strides[2] + e;
    *reinterpret_cast<Word*>(static_cast<char*>(g.dst) + d * g.elem_bytes) =
        *reinterpret_cast<const Word*>(static_cast<const char*>(g.src) + s * g.elem_bytes);
  }
}

bool aligned16(const GatherRows& g) {
  auto ok = [](std::int64_t bytes) { return bytes % 16 == 0; };
  if (!aligned_16(g.src) || !aligned_16(g.dst)) return false;
  if (!ok(static_cast<std::int64_t>(g.dim) * g.elem_bytes)) return false;
  for (int i = 0; i < 3; ++i)
    if (!ok(g.src_strides[i] * g.elem_bytes) || !ok(g.dst_strides[i] * g.elem_bytes)) return false;
  return true;
}

template <class Word>
Diagnostics launch(const GatherRows& g, std::int64_t words_per_head, cudaStream_t stream) {
  const std::int64_t total = static_cast<std::int64_t>(g.batch) * g.rows * g.heads * words_per_head;
  if (total == 0) return {};
  const unsigned grid = stride_loop_grid((total + kThreads - 1) / kThreads);
  gather_rows_kernel<Word><<<grid, kThreads, 0, stream>>>(g, words_per_head);
  return check_cuda(cudaGetLastError(), "gather_rows launch");
}

}  // namespace

Diagnostics gather_rows(const GatherRows& g, StreamHandle stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (aligned16(g)) return launch<uint4>(g, static_cast<std::int64_t>(g.dim) * g.elem_bytes / 16, s);
  switch (g.elem_bytes) {
    case 4: return launch<std::uint32_t>(g, g.dim, s);
    case 2: return launch<std::uint16_t>(g, g.dim, s);
    default: return launch<std::uint8_t>(g, static_cast<std::int64_t>(g.dim) * g.elem_bytes, s);
  }
}

}  // namespace attnkit::cuda
