#pragma once
// The CUDA backends:
//   fa2        FlashAttention-2-class forward (mma.sync / ldmatrix / cp.async),
//              the sm_80 kernel of the `fa` family; runs on sm_80 and later.
//   fa3        FlashAttention-3-class forward (wgmma / TMA / warp-specialised
//              producer and consumers), the sm_90 kernel of the `fa` family.
//   cuda_sdpa  the generic CUDA kernel: every valid Problem with fp32/fp16/bf16
//              inputs and head dims up to 256 has this path (sm_70 and later).
// Their capabilities and plans exist in every build (so `attnkit check
// --platform cuda:sm90` validates without a GPU); `built` says whether this
// binary carries the kernels.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/backends/registry.hpp"

namespace attnkit {

void register_cuda_backends(Registry& registry);

std::unique_ptr<Backend> make_fa2_backend();
std::unique_ptr<Backend> make_fa3_backend();
std::unique_ptr<Backend> make_cuda_sdpa_backend();

// One line of the kernel instance table (src/kernels/cuda/instances.def),
// whether or not this build compiled it.
struct CudaKernelInstance {
  std::string family;  // "fa2", "fa3", "sdpa", "fa2bs" / "fa3bs" (block-sparse), ... (instances.def)
  std::string arch;    // the compile target: "sm80", "sm90a", "sm70"
  DType dtype;
  int head_dim_qk, head_dim_v;  // 0: any (sdpa)
  int block_m, block_n;         // tile shape (0 for sdpa)
  std::size_t smem_bytes;       // dynamic shared memory per CTA (0 for sdpa)
  bool built;                   // this binary carries its kernel
};
std::vector<CudaKernelInstance> cuda_kernel_instances();
// The line a CUDA backend's plan() runs `p` on, as its check() judges it
// (whether it runs there is check()'s answer); nullopt for another backend or
// a problem the table has no instance for.
std::optional<CudaKernelInstance> cuda_planned_instance(const Backend& backend, const Problem& p);

}  // namespace attnkit
