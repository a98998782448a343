#pragma once
// fa3 over block-sparse lists on video tokens in raster order (the fa3bsr
// instances, src/kernels/cuda/sm90/raster_tokens.hpp): the lists index
// tokens in tile order (core/video_tiles.hpp), the kernel reads the caller's
// raster-order q, k, v and writes out in raster order, so the sliding-tile
// backends need no tile-ordered copies. Not in the registry: their CUDA path
// (backends/sparse/cuda_sparse_runner.cpp) plans on it when it takes the
// call, and gathers into tile order when it refuses (AK2109 says why).
// Plain C++ (cuda_backends.cpp), in every build.
#include <memory>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/video_tiles.hpp"

namespace attnkit {

std::unique_ptr<Backend> make_fa3_raster_block_sparse_backend(const VideoTiling& tiling);

}  // namespace attnkit
