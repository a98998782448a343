#pragma once
// video_sparse_attn_h3's selection arithmetic (docs/sparse.md section 5b) as
// host / device functions: the cube means, the coarse scores and the ranking
// the CPU path (backends/sparse/video_sparse_backend.cpp, sparse/video_sparse.cpp)
// and the CUDA kernels (backends/cuda/vsa_select.cu) both run, in the same
// order and rounded alike (core/unfused.hpp), so they keep the same cubes.
//   mean[cube][e] = float(sum over the cube's tokens, in tile order, of x[token][e] (double) / tokens)
//   C[a, c]       = scale * sum over e, in order, of double(q_mean[a][e]) * double(k_mean[c][e])
//   kept          = the `keep` cubes ranked first: higher score, ties the lower cube
#include <cstdint>

#include "attnkit/core/host_device.hpp"
#include "attnkit/core/unfused.hpp"

namespace attnkit::sparse {

AK_HOST_DEVICE float vsa_cube_mean(double sum, int tokens) {
  return static_cast<float>(unfused_div(sum, static_cast<double>(tokens)));
}
// q's mean as float, or already widened to double (exact: the same products).
template <class Q>
AK_HOST_DEVICE double vsa_cube_score(const Q* q_mean, const float* k_mean, int d, double scale) {
  double dot = 0.0;
  for (int e = 0; e < d; ++e) dot = unfused_add(dot, unfused_mul(static_cast<double>(q_mean[e]), static_cast<double>(k_mean[e])));
  return unfused_mul(scale, dot);
}
// Whether cube a (score sa) ranks before cube b (score sb).
AK_HOST_DEVICE bool vsa_ranks_before(double sa, std::int64_t a, double sb, std::int64_t b) {
  return sa > sb || (sa == sb && a < b);
}

// The GPU's selection (backends/cuda/vsa_select.cu) keeps the same cubes
// without ranking each against all others. A score as an unsigned key that
// orders as the scores do (-0 as +0: vsa_ranks_before does not tell them
// apart; scores are finite):
AK_HOST_DEVICE std::uint64_t vsa_score_key(double score) {
  const double s = score == 0.0 ? 0.0 : score;
  std::uint64_t bits = 0;
  static_assert(sizeof bits == sizeof s);
  __builtin_memcpy(&bits, &s, sizeof bits);
  return (bits >> 63) != 0 ? ~bits : bits | (std::uint64_t{1} << 63);
}
// With cut = the largest key that at least `keep` keys reach (found bit by
// bit) and `above` = the keys past it, cube c (key k, of the keys equal to
// the cut `ties_before` come before it) is kept when
//   k > cut, or k == cut and ties_before < keep - above,
// which is vsa_ranks_before's "fewer than keep cubes rank before c".
AK_HOST_DEVICE bool vsa_kept_by_cut(std::uint64_t key, std::uint64_t cut, int ties_before, int keep, int above) {
  return key > cut || (key == cut && ties_before < keep - above);
}

}  // namespace attnkit::sparse
