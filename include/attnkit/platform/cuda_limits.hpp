#pragma once
// Per-architecture CUDA limits that plans check before any launch.
#include <cstddef>

namespace attnkit {

// The most shared memory one CTA can opt in to on compute capability `sm`
// (cudaDevAttrMaxSharedMemoryPerBlockOptin), for kernels that size their
// shared memory by the problem.
constexpr std::size_t cuda_smem_per_block(int sm) {
  if (sm == 80 || sm == 87) return 163 * 1024;
  if (sm >= 90 && sm < 120) return 227 * 1024;
  if (sm == 75) return 64 * 1024;
  if (sm < 80) return 96 * 1024;
  return 99 * 1024;  // sm_86, sm_89, sm_120 / 121
}

}  // namespace attnkit
