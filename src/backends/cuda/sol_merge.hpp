#pragma once
// sol_attn's last step on the GPU (docs/sparse.md section 4): the kept tiles'
// output and the pooled tiles' output, each in q's dtype with its LSE, merged
// by their LSEs (core/lse_merge.hpp's weights, the pooled part as the
// accumulator) in fp32 and rounded once into the caller's out. One pass over
// the rows: it replaces a widening copy of the pooled part, dist/'s fp32 merge
// and a narrowing copy into out (1.24 ms of sol's 6.84 at 30720 tokens, 24
// heads, d128 on an H100, 2026-12-07). Plain C++ declarations; the kernel is
// sol_merge.cu.
#include <cstdint>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/diagnostic.hpp"

namespace attnkit::cuda {

struct SolMerge {
  // The two parts: [batch, seqlen, heads, dim] dense rows in `dtype` (fp16 /
  // bf16), and their LSEs [batch, seqlen, heads] (natural log, fp32).
  const void* exact = nullptr;
  const float* lse_exact = nullptr;
  const void* pooled = nullptr;
  const float* lse_pooled = nullptr;
  DType dtype = DType::bf16;
  // The caller's out (f32 / f16 / bf16); strides in elements between batches, tokens and heads.
  void* out = nullptr;
  DType out_dtype = DType::bf16;
  std::int64_t out_strides[3]{};
  int batch = 0, seqlen = 0, heads = 0, dim = 0;
};

// Queues the merge on `stream` (nothing allocated, nothing waited for).
Diagnostics sol_merge(const SolMerge& m, StreamHandle stream);

}  // namespace attnkit::cuda
