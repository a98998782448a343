#pragma once
// The CUDA backends:
//   fa2        FlashAttention-2-class forward (mma.sync / ldmatrix / cp.async),
//              the sm_80 kernel of the `fa` family; runs on sm_80 and later.
//   cuda_sdpa  the generic CUDA kernel: every valid Problem with fp32/fp16/bf16
//              inputs and head dims up to 256 has this path.
// Their capabilities and plans exist in every build (so `attnkit check
// --platform cuda:sm80` validates without a GPU); `built` says whether this
// binary carries the kernels.
#include <memory>
#include <vector>

#include "attnkit/backends/registry.hpp"

namespace attnkit {

void register_cuda_backends(Registry& registry);

std::unique_ptr<Backend> make_fa2_backend();
std::unique_ptr<Backend> make_cuda_sdpa_backend();

// The (dtype, head dim) pairs fa2 has a kernel for, from the instance table
// (src/kernels/cuda/fa2_instances.def), whether or not this build compiled them.
struct Fa2Instance {
  DType dtype;
  int head_dim;
  int block_m, block_n, warps, stages;
  std::size_t smem_bytes;
};
std::vector<Fa2Instance> fa2_instance_table();

}  // namespace attnkit
