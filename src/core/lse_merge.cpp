#include "attnkit/core/lse_merge.hpp"

#include "attnkit/core/host_memory.hpp"

namespace attnkit {
namespace {

float load(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::f16: return f16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

}  // namespace

void merge_partial_host(const MergeRows& m) {
#pragma omp parallel for num_threads(host_threads()) schedule(static)
  for (std::int64_t r = 0; r < m.rows; ++r) {
    for (int h = 0; h < m.heads; ++h) {
      float& lse = m.acc_lse[r * m.acc_lse_row_stride + h * m.acc_lse_head_stride];
      const LseWeights w = lse_merge_weights(lse, m.part_lse[r * m.part_lse_row_stride + h * m.part_lse_head_stride]);
      lse = w.lse;
      float* acc = m.acc_out + r * m.acc_row_stride + h * m.acc_head_stride;
      if (m.part_out == nullptr) {
        for (int d = 0; d < m.dim; ++d) acc[d] *= w.a;
        continue;
      }
      const std::int64_t part = r * m.part_row_stride + h * m.part_head_stride;
      for (int d = 0; d < m.dim; ++d) acc[d] = w.a * acc[d] + w.b * load(m.part_out, m.part_dtype, part + d);
    }
  }
}

}  // namespace attnkit
