#pragma once
// video_sparse_attn_h3's rule (docs/sparse.md section 5b) in fp64, from token
// coordinates, independent of the implementation: the CPU tests
// (test_video_sparse.cpp) and the GPU tests (gpu/test_video_sparse_gpu.cpp)
// hold their paths to it.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit::testing {

// docs/sparse.md section "video_sparse_attn_h3" in fp64, from token
// coordinates: cube means, coarse softmax, the top-k cubes by a stable sort,
// token-level softmax over the kept cubes' keys, out = fine + gate * coarse.
// gate_scale multiplies the gate (0: the pure fine pass).
inline std::vector<double> video_sparse_oracle(const Problem& p, const AttentionTensors& t, double sparsity,
                                               double gate_scale) {
  const VideoGrid g = *p.video;
  const int ch = g.height / 4, cw = g.width / 4, nc = (g.frames / 4) * ch * cw, S = p.seqlen_q;
  const int d = p.head_dim_qk, dv = p.head_dim_v;
  const int keep = std::max(1, static_cast<int>(std::ceil((1 - sparsity) * nc - 1e-9)));
  auto cube = [&](int r) {
    const int w = r % g.width, y = r / g.width % g.height, f = r / (g.width * g.height);
    return ((f / 4) * ch + y / 4) * cw + w / 4;
  };
  auto at = [&](const TensorView& x, int b, int h, int s, int c) {
    const HeadRows r = head_rows(p.layout, x.strides.data(), b, h, 0);
    return load_as_double(x.data, x.dtype, r.offset + s * r.row_stride + c);
  };
  std::vector<double> out(static_cast<std::size_t>(p.batch) * S * p.heads_q * dv);  // [b, s, h, dv]
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const int hk = h / p.gqa_ratio();
      std::vector<double> Q(static_cast<std::size_t>(S) * d), K(Q.size()), V(static_cast<std::size_t>(S) * dv);
      for (int r = 0; r < S; ++r) {
        for (int c = 0; c < d; ++c) Q[r * d + c] = at(t.q, b, h, r, c), K[r * d + c] = at(t.k, b, hk, r, c);
        for (int c = 0; c < dv; ++c) V[r * dv + c] = at(t.v, b, hk, r, c);
      }
      std::vector<std::vector<double>> qm(nc, std::vector<double>(d)), km(nc, std::vector<double>(d)),
          vm(nc, std::vector<double>(dv));
      for (int r = 0; r < S; ++r) {
        for (int c = 0; c < d; ++c) qm[cube(r)][c] += Q[r * d + c] / 64, km[cube(r)][c] += K[r * d + c] / 64;
        for (int c = 0; c < dv; ++c) vm[cube(r)][c] += V[r * dv + c] / 64;
      }
      for (int a = 0; a < nc; ++a) {
        std::vector<double> sc(nc), coarse(dv, 0.0);
        for (int c = 0; c < nc; ++c) {
          sc[c] = 0;
          for (int e = 0; e < d; ++e) sc[c] += p.softmax_scale() * qm[a][e] * km[c][e];
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (int c = 0; c < nc; ++c) z += std::exp(sc[c] - mx);
        for (int c = 0; c < nc; ++c)
          for (int e = 0; e < dv; ++e) coarse[e] += std::exp(sc[c] - mx) / z * vm[c][e];
        std::vector<int> order(nc);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return sc[x] > sc[y]; });
        std::vector<bool> kept(nc, false);
        for (int i = 0; i < keep; ++i) kept[order[i]] = true;
        for (int i = 0; i < S; ++i) {
          if (cube(i) != a) continue;
          std::vector<double> s(S, -INFINITY);
          double m = -INFINITY;
          for (int j = 0; j < S; ++j)
            if (kept[cube(j)]) {
              s[j] = 0;
              for (int e = 0; e < d; ++e) s[j] += p.softmax_scale() * Q[i * d + e] * K[j * d + e];
              m = std::max(m, s[j]);
            }
          double den = 0;
          for (int j = 0; j < S; ++j) den += kept[cube(j)] ? std::exp(s[j] - m) : 0.0;
          const double gate = p.has_gate ? gate_scale * load_as_double(t.gate.data, DType::f32,
                                                                       gate_offset(p.layout, t.gate.strides.data(), b, h, i, 0))
                                         : 0.0;
          for (int e = 0; e < dv; ++e) {
            double fine = 0;
            for (int j = 0; j < S; ++j)
              if (kept[cube(j)]) fine += std::exp(s[j] - m) / den * V[j * dv + e];
            out[((static_cast<std::size_t>(b) * S + i) * p.heads_q + h) * dv + e] = fine + gate * coarse[e];
          }
        }
      }
    }
  return out;
}


}  // namespace attnkit::testing
