#pragma once
// sol_attn's pooled pass on the tensor cores: fa2's 64 x 64 tile over one
// pooled key per 64-token tile (instances.def family fa2solpool, the score
// term of kernels/cuda/fa2/sol_pooled.hpp). The pooled problem is the call's
// shape with seqlen_k = the number of tiles, mask none, LSE out; k / v are
// the tiles' mean keys / values in q's dtype. Plain C++ (cuda_backends.cpp:
// the instance table is the one place that knows the kernels).
#include <cstdint>

#include "attnkit/backends/backend.hpp"
#include "backends/cuda/launchers.hpp"

namespace attnkit::cuda {

struct SolPooledTerms {
  const std::uint8_t* keep = nullptr;  // device [batch * heads_q * q_blocks, tiles]: 1 = kept exactly (hidden here)
  int q_blocks = 0;                    // 64-query blocks per (sequence, head)
  float bias_full = 0.0f, bias_last = 0.0f;  // ln(tokens) / scale of a full tile, of the last tile
};

// The instance for a pooled problem, found once at plan time.
struct SolPooledKernel {
  LaunchFn launch = nullptr;  // null: not compiled into this binary (the launch says AK6002)
};

// Why the pooled instance cannot run `pooled` on `gpu` (none compiled for its dtype / head dims).
Diagnostics sol_pooled_refusals(const Problem& pooled, const Platform& gpu);
// The instance of `pooled`, its shared-memory limit raised when `gpu` is this machine's.
Result<SolPooledKernel> sol_pooled_kernel(const Problem& pooled, const Platform& gpu);
// Queues the pass on `stream`: allocates nothing, waits for nothing.
Diagnostics sol_pooled_launch(const SolPooledKernel& kernel, const Problem& pooled, const AttentionTensors& t,
                              const SolPooledTerms& terms, StreamHandle stream);

}  // namespace attnkit::cuda
