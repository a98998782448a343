#pragma once
// fa2 whose block-sparse problems run on the fa2bsq64 instances (64-query x
// 64-key tiles, src/kernels/cuda/instances.def): for lists in 64-query blocks,
// which fa2bs (128-row tiles) refuses with AK2117. Not in the registry: the
// sparse video backends' CUDA paths reach it through flash_for
// (backends/sparse/cuda_sparse_runner.hpp) where fa3 (fa3bsq64) does not take
// the lists.
// Plain C++ (cuda_backends.cpp), in every build.
#include <memory>

#include "attnkit/backends/backend.hpp"

namespace attnkit {

std::unique_ptr<Backend> make_fa2_q64_block_sparse_backend();

}  // namespace attnkit
