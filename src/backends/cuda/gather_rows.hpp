#pragma once
// Token-row gathers on the GPU: dst row i of every sequence is src row
// index[i] (each row heads x dim elements). How a sparse video backend
// reorders raster-order latents into contiguous tiles and back (the index is
// data, built once at plan time on the host). Plain C++ declarations; the
// kernel is gather_rows.cu (CUDA builds only).
#include <cstdint>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/diagnostic.hpp"

namespace attnkit::cuda {

struct GatherRows {
  const void* src = nullptr;
  void* dst = nullptr;
  const std::int32_t* index = nullptr;  // device, [rows]: the src row of each dst row, in [0, src_rows)
  std::int64_t rows = 0;                // dst rows per sequence
  std::int64_t src_rows = 0;            // src rows per sequence (index entries outside are skipped)
  int batch = 1, heads = 1, dim = 0;
  int elem_bytes = 2;
  // Element strides: batch, row, head (the last dim is contiguous).
  std::int64_t src_strides[3]{}, dst_strides[3]{};
};

// Queues the gather on `stream`: 16-byte copies when every row, head and base
// is 16-byte aligned, element copies otherwise. Allocates nothing.
Diagnostics gather_rows(const GatherRows& g, StreamHandle stream);

}  // namespace attnkit::cuda
