#pragma once
// hybrid_window_attn_h3's rule (docs/sparse.md section 5c) in fp64, straight
// from the definition, independent of the implementation: the CPU tests
// (test_hybrid_window.cpp) and the GPU tests (gpu/test_hybrid_window_gpu.cpp)
// hold their paths to it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit::testing {

// out[i] = softmax over the keys j of i's window + gate[i] * phi(q_i).S / phi(q_i).z, in fp64,
// straight from the definition (no running sums): window (left, right) around i.
inline std::vector<double> hybrid_window_oracle(const Problem& p, const AttentionTensors& t, Window w, bool causal_linear) {
  const int S = p.seqlen_q, d = p.head_dim_qk, dv = p.head_dim_v;
  auto at = [&](const TensorView& x, int b, int h, int s, int c) {
    const HeadRows r = head_rows(p.layout, x.strides.data(), b, h, 0);
    return load_as_double(x.data, x.dtype, r.offset + s * r.row_stride + c);
  };
  auto phi = [](double x) { return x > 0 ? x + 1 : std::exp(x); };
  std::vector<double> out(static_cast<std::size_t>(p.batch) * S * p.heads_q * dv);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const int hk = h / p.gqa_ratio();
      for (int i = 0; i < S; ++i) {
        const int lo = w.left < 0 ? 0 : std::max(0, i - w.left), hi = w.right < 0 ? S - 1 : std::min(S - 1, i + w.right);
        std::vector<double> s(S, 0.0);
        double m = -INFINITY, den = 0;
        for (int j = lo; j <= hi; ++j) {
          for (int c = 0; c < d; ++c) s[j] += p.softmax_scale() * at(t.q, b, h, i, c) * at(t.k, b, hk, j, c);
          m = std::max(m, s[j]);
        }
        for (int j = lo; j <= hi; ++j) den += std::exp(s[j] - m);
        const int last = causal_linear ? i : S - 1;
        double lin_den = 0;
        std::vector<double> fq(d);
        for (int c = 0; c < d; ++c) fq[c] = phi(at(t.q, b, h, i, c));
        std::vector<double> kw(last + 1);  // phi(q_i) . phi(k_j)
        for (int j = 0; j <= last; ++j) {
          kw[j] = 0;
          for (int c = 0; c < d; ++c) kw[j] += fq[c] * phi(at(t.k, b, hk, j, c));
          lin_den += kw[j];
        }
        const double g =  // no gate: zero gates
            t.gate.data ? load_as_double(t.gate.data, DType::f32, gate_offset(p.layout, t.gate.strides.data(), b, h, i, 0)) : 0.0;
        for (int e = 0; e < dv; ++e) {
          double soft = 0, lin = 0;
          for (int j = lo; j <= hi; ++j) soft += std::exp(s[j] - m) / den * at(t.v, b, hk, j, e);
          for (int j = 0; j <= last; ++j) lin += kw[j] * at(t.v, b, hk, j, e);
          out[((static_cast<std::size_t>(b) * S + i) * p.heads_q + h) * dv + e] = soft + g * lin / lin_den;
        }
      }
    }
  return out;
}

}  // namespace attnkit::testing
