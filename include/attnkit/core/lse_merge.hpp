#pragma once
// The one merge of partial attention results by their log-sum-exp, shared by
// ring attention (dist/) and split-KV decode. Natural-log LSE in fp32. A partial
// whose LSE is -inf saw no key: its output is 0 and it contributes nothing.
//
//   lse = log(e^a + e^b),   out = e^(a - lse) * out_a + e^(b - lse) * out_b
#include <cmath>
#include <cstdint>

#include "attnkit/core/dtype.hpp"
#include "attnkit/core/host_device.hpp"

namespace attnkit {

struct LseWeights {
  float a;    // weight of the accumulated output
  float b;    // weight of the partial output
  float lse;  // the merged LSE
};

// Weights from max-shifted exponentials, so no e^lse overflows; exact when one
// side is -inf (weights 1 and 0), and both -inf stays -inf.
AK_HOST_DEVICE LseWeights lse_merge_weights(float lse_a, float lse_b) {
  if (lse_b == -INFINITY) return {1.0f, 0.0f, lse_a};
  if (lse_a == -INFINITY) return {0.0f, 1.0f, lse_b};
  const float m = lse_a > lse_b ? lse_a : lse_b;
  const float ea = expf(lse_a - m), eb = expf(lse_b - m);
  const float sum = ea + eb;
  return {ea / sum, eb / sum, m + logf(sum)};
}

// rows x heads rows of `dim` values: accumulator (fp32) <- merge(accumulator, partial).
// Strides are in elements. part_out == nullptr means a partial of zeros (an
// attention sink: a logit with no value, part_lse = the sink logit).
struct MergeRows {
  float* acc_out = nullptr;
  std::int64_t acc_row_stride = 0, acc_head_stride = 0;
  float* acc_lse = nullptr;
  std::int64_t acc_lse_row_stride = 0, acc_lse_head_stride = 0;
  const void* part_out = nullptr;
  DType part_dtype = DType::f32;  // f32, f16 or bf16
  std::int64_t part_row_stride = 0, part_head_stride = 0;
  const float* part_lse = nullptr;
  std::int64_t part_lse_row_stride = 0, part_lse_head_stride = 0;
  std::int64_t rows = 0;
  int heads = 0;
  int dim = 0;
};

// The host loop over MergeRows (OpenMP over rows). CUDA runs the same
// lse_merge_weights in src/dist/cuda/device_ops.cu.
void merge_partial_host(const MergeRows& m);

}  // namespace attnkit
