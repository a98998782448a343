#pragma once
// hybrid_window_attn_h3's plans without the backend's checks (the backend's
// plan_cpu / plan_cuda call them after check(); the GPU tests call them
// directly, whether or not the CUDA path is declared).
#include <memory>

#include "attnkit/backends/backend.hpp"
#include "attnkit/sparse/hybrid_window.hpp"

namespace attnkit::sparse {

Result<std::unique_ptr<Plan>> make_hybrid_window_cpu_plan(const Problem& p, const Platform& cpu,
                                                          const HybridWindowSettings& s);
// AK6002 in a build without CUDA.
Result<std::unique_ptr<Plan>> make_hybrid_window_cuda_plan(const Problem& p, const Platform& gpu,
                                                           const HybridWindowSettings& s);
// What make_hybrid_window_cuda_plan refuses about the kernels, without a device (check() shares it).
Diagnostics hybrid_window_cuda_kernel_refusals(const Problem& p, const Platform& gpu,
                                               const HybridWindowSettings& s);

}  // namespace attnkit::sparse
