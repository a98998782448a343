#pragma once
// CSR block lists (core/block_sparse.hpp) from per-(row, column) keep flags
// on the GPU, for the selections that decide their lists per call
// (sparge_select.cu, sol_route.cu): offsets[0] = 0, offsets[r + 1] =
// counts[0] + ... + counts[r] (one CTA), then each row's kept columns in
// ascending order from offsets[r] on (one warp per row). Queued on the
// caller's stream in the caller's buffers: nothing allocated, nothing
// synchronised, capturable. Plain C++ declarations; csr_lists.cu.
#include <cstdint>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/diagnostic.hpp"

namespace attnkit::cuda {

struct CsrFromFlags {
  const std::uint8_t* keep = nullptr;  // [rows, cols]
  const std::int32_t* counts = nullptr;  // [rows]: the kept flags of each row
  std::int32_t* offsets = nullptr;     // [rows + 1]
  std::int32_t* indices = nullptr;     // [rows * cols] (offsets[rows] of them written)
  std::int64_t rows = 0;
  int cols = 0;
};

Diagnostics csr_from_flags(const CsrFromFlags& c, StreamHandle stream);

}  // namespace attnkit::cuda
