#include "attnkit/sparse/sparge.hpp"

#include <algorithm>
#include <cmath>

namespace attnkit::sparse {

SpargeSettings sparge_settings(const select::BackendConfig& config) {
  SpargeSettings s;
  if (auto topk = select::config_number(config, "topk")) s.topk = *topk;
  if (auto cdf = select::config_number(config, "cdfthreshd")) s.cdfthreshd = *cdf;
  if (auto sim = select::config_number(config, "simthreshd1")) s.simthreshd1 = *sim;
  return s;
}

int sparge_topk_blocks(double topk, int key_blocks) {
  // The 1e-9 keeps a product that rounds just above an integer (0.3 * 10) from taking one more.
  return std::max(1, static_cast<int>(std::ceil(topk * static_cast<double>(key_blocks) - 1e-9)));
}

double pool_block(const float* x, int n, int d, float* mean, double* scratch) {
  std::fill(scratch, scratch + d, 0.0);
  std::fill(mean, mean + d, 0.0f);
  for (int i = 0; i < n; ++i) {
    double norm = 0;
    for (int c = 0; c < d; ++c) {
      norm += double(x[i * d + c]) * x[i * d + c];
      mean[c] += x[i * d + c] / n;
    }
    norm = std::sqrt(norm);
    if (norm == 0) continue;  // a zero vector has no direction: it adds nothing
    for (int c = 0; c < d; ++c) scratch[c] += x[i * d + c] / norm;
  }
  double sq = 0;
  for (int c = 0; c < d; ++c) sq += scratch[c] * scratch[c];
  return sq / (double(n) * n);
}

void sparge_select(const SpargeSettings& s, std::span<const double> scores, bool query_smooth,
                   std::span<std::uint8_t> keep, std::span<double> prob, std::span<std::uint32_t> order) {
  const std::size_t n = scores.size();
  if (!query_smooth) {
    std::fill(keep.begin(), keep.end(), 1);
    return;
  }
  // Non-smooth key blocks (-inf) are kept and left out of the softmax.
  std::size_t candidates = 0;
  double m = -INFINITY;
  for (std::size_t kb = 0; kb < n; ++kb) {
    keep[kb] = std::isinf(scores[kb]) ? 1 : 0;
    if (!keep[kb]) {
      order[candidates++] = static_cast<std::uint32_t>(kb);
      m = std::max(m, scores[kb]);
    }
  }
  if (candidates == 0) return;
  double total = 0;
  for (std::size_t i = 0; i < candidates; ++i) total += prob[order[i]] = std::exp(scores[order[i]] - m);
  for (std::size_t i = 0; i < candidates; ++i) prob[order[i]] /= total;
  // Descending, ties by block index; std::sort allocates nothing.
  std::sort(order.begin(), order.begin() + candidates,
            [&](std::uint32_t a, std::uint32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); });
  std::size_t take = 0;
  if (s.cdfthreshd > 0) {  // the fewest blocks whose probability reaches cdfthreshd
    double cum = 0;
    while (take < candidates && cum < s.cdfthreshd) cum += prob[order[take++]];
  } else {  // ceil(topk * key blocks), at least one
    take = std::min(candidates, static_cast<std::size_t>(sparge_topk_blocks(s.topk, static_cast<int>(n))));
  }
  for (std::size_t i = 0; i < take; ++i) keep[order[i]] = 1;
}

}  // namespace attnkit::sparse
