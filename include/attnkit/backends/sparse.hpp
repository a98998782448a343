#pragma once
// The sparse video backends with kernels in this build (docs/sparse.md): each
// takes dense problems and decides its own sparsity inside, on the
// block-sparse core. The CPU path runs cpu_flash's block-sparse kernel; the
// CUDA path is not built yet (planning on a GPU gives AK2111; a named CUDA
// platform validates as before).
//   sliding_tile_attn  3D tile windows over video latents (STA), per layer / head from a mask strategy
//   sparge_attn        top-k key blocks per query block from pooled q / k similarity (SpargeAttn)
//   sol_attn           dense for its first steps / layers, Sol-Attn's routed tiles after
//   video_sparse_attn_h3   VSA: coarse pooled-cube attention, top-k cubes exact, plus the gated coarse output
//   hybrid_window_attn_h3  VDN-H3: window softmax plus the gated linear-attention branch
#include <memory>

#include "attnkit/backends/registry.hpp"

namespace attnkit {

std::unique_ptr<Backend> make_sliding_tile_backend();
std::unique_ptr<Backend> make_sparge_backend();
std::unique_ptr<Backend> make_sol_backend();
std::unique_ptr<Backend> make_video_sparse_backend();
std::unique_ptr<Backend> make_hybrid_window_backend();
// All of the above, in that order.
void register_sparse_backends(Registry& registry);

}  // namespace attnkit
