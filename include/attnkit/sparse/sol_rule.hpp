#pragma once
// Sol-Attn's routing rule (docs/sparse.md section 4) as host / device
// functions: the one source of the arithmetic the CPU path
// (backends/sparse/sol_routing.cpp) and the CUDA kernels
// (backends/cuda/sol_route.cu) both run, operation for operation, so the two
// keep exactly the same tiles. Every sum, product and quotient goes through
// core/unfused.hpp (never fused into a multiply-add), so both round alike.
//
//   per (sequence, head h, query block qb), kv head g = h / (heads_q / heads_kv):
//   q_mean      = sum over the block's queries i, in order, of float(q_i / n_q)   (double accumulator)
//   k_mean[c]   = float(sum over tile c's keys j, in order, of k_j (double) / n_c)
//   z_c         = scale * sum over dims x, in order, of q_mean[x] * k_mean[c][x]
//   cut         = mean(z) + tau * sqrt(var(z))   (population variance, sums in tile order)
//   keep c      when z_c >= cut, c == qb, or tile c overlaps [sink_start, sink_start + sink_tokens)
#include <cmath>
#include <cstdint>

#include "attnkit/core/host_device.hpp"
#include "attnkit/core/unfused.hpp"

namespace attnkit::sparse {

inline constexpr int kSolBlock = 64;  // query block and key tile, in tokens

// The rule's settings in plain values (SolSettings's, sol.hpp).
struct SolRule {
  double tau = 1.0;
  int sink_start = 0, sink_tokens = 0;
};

// One query's term of the block mean: its fp32 value over the block's count, in fp32.
AK_HOST_DEVICE double sol_q_mean_term(float q, int count) {
  return static_cast<double>(unfused_fdiv(q, static_cast<float>(count)));
}
// A tile's mean from the double sum of its keys (or values).
AK_HOST_DEVICE float sol_tile_mean(double sum, int count) {
  return static_cast<float>(unfused_div(sum, static_cast<double>(count)));
}
// The proxy score of one tile: scale * q_mean . k_mean over d dims, in order.
AK_HOST_DEVICE double sol_proxy_score(const double* q_mean, const float* k_mean, int d, double scale) {
  double dot = 0.0;
  for (int x = 0; x < d; ++x) dot = unfused_add(dot, unfused_mul(q_mean[x], static_cast<double>(k_mean[x])));
  return unfused_mul(scale, dot);
}
// The threshold of one query block from its n proxy scores.
AK_HOST_DEVICE double sol_route_cut(const SolRule& r, const double* z, int n) {
  double mean = 0.0;
  for (int c = 0; c < n; ++c) mean = unfused_add(mean, z[c]);
  mean = unfused_div(mean, static_cast<double>(n));
  double var = 0.0;
  for (int c = 0; c < n; ++c) var = unfused_add(var, unfused_mul(z[c] - mean, z[c] - mean));
  return unfused_add(mean, unfused_mul(r.tau, sqrt(unfused_div(var, static_cast<double>(n)))));
}
// Whether query block `query_block` attends tile c (score z_c) exactly; `tokens`: the keys of the sequence.
AK_HOST_DEVICE bool sol_keeps(const SolRule& r, double z_c, double cut, int c, int query_block, int tokens) {
  const int lo = c * kSolBlock, hi = tokens < lo + kSolBlock ? tokens : lo + kSolBlock;
  const int sink_end = r.sink_start + r.sink_tokens;
  const bool sink = r.sink_tokens > 0 && lo < sink_end && hi > r.sink_start;
  return z_c >= cut || c == query_block || sink;
}

}  // namespace attnkit::sparse
