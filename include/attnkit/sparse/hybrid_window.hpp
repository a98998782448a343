#pragma once
// hybrid_window_attn_h3 (VDN-H3): sliding-window softmax attention plus a
// gated linear-attention branch, per (sequence, head):
//   out[i] = window_softmax[i] + gate[i] * linear[i]
//   linear[i] = phi(q_i) . S_i / (phi(q_i) . z_i),
//   S_i = sum_{j in J(i)} phi(k_j) v_j^T,   z_i = sum_{j in J(i)} phi(k_j),
//   phi(x) = elu(x) + 1 (elementwise, > 0, so the denominator is positive)
// J(i) = every key, or keys j <= i when the window sees no later key (right 0: causal).
// The window: the problem's sliding window, else `window_size` (left, right;
// causal: left, 0). No softmax scale in the linear branch. The exact rule is in
// docs/sparse.md.
#include <cmath>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/host_device.hpp"

namespace attnkit::sparse {

struct HybridWindowSettings {
  Window window{512, 512};  // used when the problem has no sliding window
};
// The hybrid_window_attn_h3 keys of a validated config.
HybridWindowSettings hybrid_window_settings(const select::BackendConfig& config);

// The window softmax problem of a hybrid call `p`: its sliding window, or the
// settings' window (right side 0 under a causal mask).
Window hybrid_softmax_window(const Problem& p, const HybridWindowSettings& s);

// The softmax branch's problem: the call without its gate, a sliding window
// (hybrid_softmax_window), out in the call's dtype (the CPU path overrides it to fp32).
Problem hybrid_softmax_problem(const Problem& p, const HybridWindowSettings& s);

// The linear branch's formulas, shared by the CPU path (double) and the CUDA
// kernels (float, backends/cuda/hybrid_linear.cu).
// The feature map: elu(x) + 1.
AK_HOST_DEVICE double linear_feature(double x) { return x > 0 ? x + 1.0 : exp(x); }
AK_HOST_DEVICE float linear_feature(float x) { return x > 0 ? x + 1.0f : expf(x); }
// out = window_softmax + gate * (phi(q) . S) / (phi(q) . z).
template <class T>
AK_HOST_DEVICE T hybrid_combine(T soft, T gate, T num, T den) {
  return soft + gate * (num / den);
}

}  // namespace attnkit::sparse
