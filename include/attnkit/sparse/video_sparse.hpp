#pragma once
// video_sparse_attn_h3 (VSA, arXiv 2505.13389, with MiniMax-H3's gate): the
// video latents are cut into cubes of 4 x 4 x 4 tokens (core/video_tiles.hpp
// tile order, one cube = one attention block of 64 tokens). Per (sequence,
// head), with mean-pooled cubes q_c, k_c, v_c:
//   coarse scores  C[a, c] = scale * q_a . k_c
//   coarse output  O_coarse[a] = sum_c softmax_c(C[a, c]) v_c
//   fine output    O_fine[i]   = softmax attention of token i over the tokens of
//                                the top-k key cubes of C[cube(i), :]
//   out[i] = O_fine[i] + gate[i] * O_coarse[cube(i)]
// with k = max(1, ceil((1 - sparsity) * cubes)). Zero gates (no gate input):
// pure block-sparse attention. The exact rule is in docs/sparse.md; these
// host functions are what a CUDA plan would share.
#include <cstdint>
#include <span>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/video_tiles.hpp"

namespace attnkit::sparse {

struct VideoSparseSettings {
  static constexpr int kCube = 4;  // tokens per cube side: 64-token cubes
  double sparsity = 0.9;           // the fraction of key cubes each query cube skips
};
// The video_sparse_attn_h3 keys of a validated config.
VideoSparseSettings video_sparse_settings(const select::BackendConfig& config);

// The cubes of a grid (whole cubes only: VideoTiling::whole_tiles()).
VideoTiling video_cubes(const VideoGrid& grid);

// Key cubes each query cube keeps: max(1, ceil((1 - sparsity) * cubes)).
int video_sparse_keep(double sparsity, int cubes);

// The means of every cube of one (sequence, head) slice: rows of `x` (a
// caller's tensor, raster order, row r at x[offset + r * row_stride + c]),
// mean[cube * d + c] = mean over the cube's tokens of x[token, c]. `sum`: d doubles of scratch.
void pool_cubes(const VideoTiling& cubes, const void* x, DType dtype, std::int64_t offset, std::int64_t row_stride,
                int d, float* mean, double* sum);

// The `keep.size()` highest of `scores` (ties: the lower cube), written to
// `keep` in ascending cube order. Scratch: `order`, scores.size() entries.
void top_cubes(std::span<const double> scores, std::span<std::int32_t> keep, std::span<std::uint32_t> order);

}  // namespace attnkit::sparse
