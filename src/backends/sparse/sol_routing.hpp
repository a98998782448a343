#pragma once
// What sol_attn's CPU and CUDA plans share (docs/sparse.md section 4): the
// sizes of a routed call, the pooled problem, the host routing (the CPU
// path's, and the oracle the GPU tests hold the device routing to), and the
// plan makers. The rule's arithmetic itself is sparse/sol_rule.hpp.
#include <cstdint>
#include <memory>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/sparse/sol.hpp"

namespace attnkit::sparse {

// A routed call's lists: rows = batch * heads_q * query blocks (CSR rows, as
// core/block_sparse.hpp numbers them for BlockSparse{64, 64, batch, heads_q}),
// one flag per (row, key tile).
struct SolShape {
  int nq = 0, tiles = 0;
  std::int64_t rows = 0;
  static SolShape of(const Problem& p) {
    SolShape s;
    s.nq = num_blocks(p.seqlen_q, kSolBlock);
    s.tiles = num_blocks(p.seqlen_k, kSolBlock);
    s.rows = static_cast<std::int64_t>(p.batch) * p.heads_q * s.nq;
    return s;
  }
  static BlockSparse layout(const Problem& p) { return {kSolBlock, kSolBlock, p.batch, p.heads_q}; }
};

// The pooled tiles as an attention problem of their own: every query against
// one pseudo-key per tile, k' = [mean(k), ln(tokens) / scale] and q' = [q, 1]
// (so scale q' . k' = scale q . mean(k) + ln(tokens)), value mean(v); a
// custom mask [batch, heads_q, seqlen_q, tiles] hides the tiles the query's
// block attends exactly. fp32, BSHD, LSE returned.
Problem sol_pooled_problem(const Problem& p);

// Host: q' [batch, seqlen, heads_q, d + 1], k' [batch, tiles, heads_kv, d + 1]
// and v' [batch, tiles, heads_kv, dv] (fp32, contiguous) of the call's q, k, v.
void sol_pool_host(const Problem& p, const AttentionTensors& t, float* q1, float* k1, float* v1);
// Host: keep[row * tiles + c] from q' and k' (sol_rule.hpp's arithmetic).
void sol_route_host(const Problem& p, const SolSettings& s, const float* q1, const float* k1, std::uint8_t* keep);
// Host: the CSR lists of `keep`; returns the entries.
std::int64_t sol_lists_host(const SolShape& shape, const std::uint8_t* keep, std::int32_t* offsets,
                            std::int32_t* indices);

// The plans without the backend's checks (SolBackend's plan_cpu / plan_cuda
// call them after check(); the GPU tests call them directly, whether or not
// the CUDA path is declared). The CUDA plan: AK6002 in a build without CUDA.
Result<std::unique_ptr<Plan>> make_sol_cpu_plan(const Problem& p, const Platform& cpu, const SolSettings& s);
Result<std::unique_ptr<Plan>> make_sol_cuda_plan(const Problem& p, const Platform& gpu, const SolSettings& s);
// What make_sol_cuda_plan refuses about the kernels, without a device (check() shares it).
Diagnostics sol_cuda_kernel_refusals(const Problem& p, const Platform& gpu);

// The CSR lists a CUDA plan's last routed call wrote into `ws` (device int32
// views: offsets [rows + 1], indices [rows * tiles] of which offsets[rows]
// are used); AK6002 for a plan that is not sol_attn's CUDA plan.
struct SolDeviceLists {
  TensorView offsets, indices;
};
Result<SolDeviceLists> sol_cuda_lists(const Plan& plan, Workspace ws);

}  // namespace attnkit::sparse
