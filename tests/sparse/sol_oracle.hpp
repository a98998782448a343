#pragma once
// sol_attn's rule of docs/sparse.md section 4, all in fp64, independent of
// the implementation (sparse/sol_rule.hpp): per (sequence, head, query block)
// the proxy z_c = scale mean(q) . mean(k_c); kept: z_c >= mean(z) + tau
// std(z), the diagonal tile, tiles overlapping the sink tokens; the rest one
// pooled key each. The CPU tests (test_sol.cpp) and the GPU tests
// (gpu/test_sol_gpu.cpp) hold their paths to it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit::testing {

struct SolOracle {
  std::vector<double> out;  // [batch, seqlen, heads_q, head_dim_v]
  std::vector<std::uint8_t> keep;  // [batch, heads_q, query blocks, tiles]
  double pooled_fraction = 0;
  // The smallest |z_c - cut| of a tile the score decides (not diagonal, not
  // sink): how far the inputs keep every decision from a tie.
  double margin = std::numeric_limits<double>::infinity();
};

inline SolOracle sol_oracle(const Problem& p, const AttentionTensors& t, double tau, int sink_tokens,
                            int sink_start = 0) {
  constexpr int kTile = 64;
  const double scale = p.softmax_scale();
  const int S = p.seqlen_q, D = p.head_dim_qk, Dv = p.head_dim_v, nt = (S + kTile - 1) / kTile;
  SolOracle o;
  o.out.assign(static_cast<std::size_t>(p.batch) * S * p.heads_q * Dv, 0.0);
  o.keep.assign(static_cast<std::size_t>(p.batch) * p.heads_q * nt * nt, 0);
  std::int64_t pooled = 0, all = 0;
  for (int b = 0; b < p.batch; ++b) {
    auto at = [&](const TensorView& x, int h, int s, int c) {
      const HeadRows r = head_rows(p.layout, x.strides.data(), b, h, 0);
      return load_as_double(x.data, x.dtype, r.offset + s * r.row_stride + c);
    };
    for (int h = 0; h < p.heads_q; ++h) {
      const int g = h / p.gqa_ratio();
      std::vector<std::vector<double>> km(nt, std::vector<double>(D)), vm(nt, std::vector<double>(Dv));
      std::vector<int> n(nt);
      for (int c = 0; c < nt; ++c) {
        n[c] = std::min(S, (c + 1) * kTile) - c * kTile;
        for (int j = c * kTile; j < c * kTile + n[c]; ++j) {
          for (int d = 0; d < D; ++d) km[c][d] += at(t.k, g, j, d) / n[c];
          for (int d = 0; d < Dv; ++d) vm[c][d] += at(t.v, g, j, d) / n[c];
        }
      }
      for (int qb = 0; qb < nt; ++qb) {
        const int lo = qb * kTile, hi = std::min(S, lo + kTile);
        std::vector<double> qm(D), z(nt);
        for (int i = lo; i < hi; ++i)
          for (int d = 0; d < D; ++d) qm[d] += at(t.q, h, i, d) / (hi - lo);
        double mean = 0, var = 0;
        for (int c = 0; c < nt; ++c) {
          for (int d = 0; d < D; ++d) z[c] += scale * qm[d] * km[c][d];
          mean += z[c] / nt;
        }
        for (int c = 0; c < nt; ++c) var += (z[c] - mean) * (z[c] - mean) / nt;
        std::vector<bool> keep(nt);
        for (int c = 0; c < nt; ++c) {
          const int c_lo = c * kTile, c_hi = c_lo + n[c];
          const bool sink = sink_tokens > 0 && c_lo < sink_start + sink_tokens && c_hi > sink_start;
          const double cut = mean + tau * std::sqrt(var);
          keep[c] = z[c] >= cut || c == qb || sink;
          if (c != qb && !sink) o.margin = std::min(o.margin, std::abs(z[c] - cut));
          o.keep[((static_cast<std::size_t>(b) * p.heads_q + h) * nt + qb) * nt + c] = keep[c];
          all += 1, pooled += !keep[c];
        }
        for (int i = lo; i < hi; ++i) {
          // Scores: exact keys of kept tiles, one pooled key per other tile.
          std::vector<std::pair<double, std::vector<double>>> terms;
          for (int c = 0; c < nt; ++c) {
            if (keep[c]) {
              for (int j = c * kTile; j < c * kTile + n[c]; ++j) {
                double dot = 0;
                for (int d = 0; d < D; ++d) dot += at(t.q, h, i, d) * at(t.k, g, j, d);
                std::vector<double> v(Dv);
                for (int d = 0; d < Dv; ++d) v[d] = at(t.v, g, j, d);
                terms.push_back({scale * dot, v});
              }
            } else {
              double dot = 0;
              for (int d = 0; d < D; ++d) dot += at(t.q, h, i, d) * km[c][d];
              terms.push_back({scale * dot + std::log(double(n[c])), vm[c]});
            }
          }
          double m = -std::numeric_limits<double>::infinity(), l = 0;
          for (const auto& x : terms) m = std::max(m, x.first);
          std::vector<double> acc(Dv);
          for (const auto& x : terms) {
            const double w = std::exp(x.first - m);
            l += w;
            for (int d = 0; d < Dv; ++d) acc[d] += w * x.second[d];
          }
          for (int d = 0; d < Dv; ++d)
            o.out[((static_cast<std::size_t>(b) * S + i) * p.heads_q + h) * Dv + d] = acc[d] / l;
        }
      }
    }
  }
  o.pooled_fraction = double(pooled) / all;
  return o;
}

}  // namespace attnkit::testing
