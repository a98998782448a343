#pragma once
// fa2 whose block-sparse problems run on the fa2bsq64 instances (64-query x
// 64-key tiles, src/kernels/cuda/instances.def): for lists in 64-query blocks,
// which fa2bs (128-row tiles) and fa3bs (128 x 128) refuse with AK2117. Not in
// the registry: sol_attn's CUDA path plans its kept tiles on it directly.
// Plain C++ (cuda_backends.cpp), in every build.
#include <memory>

#include "attnkit/backends/backend.hpp"

namespace attnkit {

std::unique_ptr<Backend> make_fa2_q64_block_sparse_backend();

}  // namespace attnkit
