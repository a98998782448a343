#include "attnkit/sparse/video_sparse.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attnkit/sparse/video_sparse_rule.hpp"

namespace attnkit::sparse {

VideoSparseSettings video_sparse_settings(const select::BackendConfig& config) {
  VideoSparseSettings s;
  if (auto sparsity = select::config_number(config, "sparsity")) s.sparsity = *sparsity;
  return s;
}

VideoTiling video_cubes(const VideoGrid& grid) {
  constexpr int c = VideoSparseSettings::kCube;
  return VideoTiling{grid.frames, grid.height, grid.width, c, c, c};
}

int video_sparse_keep(double sparsity, int cubes) {
  // (1 - sparsity) * cubes, less a rounding hair so that an exact product is not ceiled up.
  const double want = (1.0 - sparsity) * cubes;
  const int keep = static_cast<int>(std::ceil(want - 1e-9 * cubes));
  return std::clamp(keep, 1, std::max(cubes, 1));
}

void pool_cubes(const VideoTiling& cubes, const void* x, DType dtype, std::int64_t offset, std::int64_t row_stride,
                int d, float* mean, double* sum) {
  const int n = cubes.tile_tokens();
  for (int c = 0; c < cubes.tiles(); ++c) {
    std::fill(sum, sum + d, 0.0);
    for (int t = 0; t < n; ++t) {
      const std::int64_t r = raster_index(cubes, static_cast<std::int64_t>(c) * n + t);
      for (int e = 0; e < d; ++e) sum[e] = unfused_add(sum[e], load_as_double(x, dtype, offset + r * row_stride + e));
    }
    for (int e = 0; e < d; ++e) mean[static_cast<std::int64_t>(c) * d + e] = vsa_cube_mean(sum[e], n);
  }
}

void top_cubes(std::span<const double> scores, std::span<std::int32_t> keep, std::span<std::uint32_t> order) {
  std::iota(order.begin(), order.end(), 0u);
  const auto higher = [&](std::uint32_t a, std::uint32_t b) { return vsa_ranks_before(scores[a], a, scores[b], b); };
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep.size()), order.end(), higher);
  std::copy(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep.size()), keep.begin());
  std::sort(keep.begin(), keep.end());
}

}  // namespace attnkit::sparse
