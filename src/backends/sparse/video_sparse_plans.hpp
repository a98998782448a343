#pragma once
// video_sparse_attn_h3's plans without the backend's checks (the backend's
// plan_cpu / plan_cuda call them after check(); the GPU tests call them
// directly, whether or not the CUDA path is declared), and what the CUDA
// plan shows the tests.
#include <memory>

#include "attnkit/backends/backend.hpp"
#include "attnkit/sparse/video_sparse.hpp"

namespace attnkit::sparse {

Result<std::unique_ptr<Plan>> make_video_sparse_cpu_plan(const Problem& p, const Platform& cpu,
                                                         const VideoSparseSettings& s);
// AK6002 in a build without CUDA.
Result<std::unique_ptr<Plan>> make_video_sparse_cuda_plan(const Problem& p, const Platform& gpu,
                                                          const VideoSparseSettings& s);
// What make_video_sparse_cuda_plan refuses about the kernels, without a device (check() shares it).
Diagnostics video_sparse_cuda_kernel_refusals(const Problem& p, const Platform& gpu);

// The cube lists a CUDA plan's last call wrote into `ws` (device int32 views:
// offsets [rows + 1], indices [rows * cubes] of which offsets[rows] are used).
struct VideoSparseDeviceLists {
  TensorView offsets, indices;
};
Result<VideoSparseDeviceLists> video_sparse_cuda_lists(const Plan& plan, Workspace ws);

}  // namespace attnkit::sparse
