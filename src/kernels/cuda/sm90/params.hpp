#pragma once
// The fa3 kernel's parameters: the shared AttnParams plus the TMA tensor maps
// of q, k and v, built on the host at each launch (tma_maps.hpp) and passed
// by value as a __grid_constant__ kernel parameter.
#include <cuda.h>

#include "kernels/cuda/common/tile_scheduler.hpp"
#include "kernels/cuda/params.hpp"
#include "kernels/cuda/sm90/raster_tokens.hpp"

namespace attnkit::cuda::sm90 {

struct Fa3Params {
  AttnParams a;
  CUtensorMap tma_q, tma_k, tma_v;  // 4-D: (head dim, rows, heads, batch)
  // The tile walk (common/tile_scheduler.hpp): 0 = in order; > 0 = cost
  // ordered in groups of this many (batch, head) slices (dealt in snake order
  // unless dynamic).
  int cost_group = 0;
  // Nonzero: the CTAs take tiles in cost order from a.tile_counter (the
  // producer publishes each to the consumers in shared memory); zero: each
  // CTA walks blockIdx.x, blockIdx.x + gridDim.x, ...
  int dynamic_tiles = 0;
  // The same walk on divisors built at launch (TileWalk; disabled past 2^31 walk positions).
  TileWalk walk;
  // fa3bsr (raster_tokens.hpp): 5-D maps (head dim, x, y, t, n) of q, k, v
  // whose boxes are one kernel tile of video tokens, each with its batch fold.
  // tma_q / tma_k / tma_v still read the text tokens' rows.
  CUtensorMap raster_q, raster_k, raster_v;
  RasterFold fold_q, fold_k, fold_v;
  RasterDivisors raster_div;  // a.raster's, for the rows -> (t, y, x) of boxes and of the epilogue
  // Traits::kStoreOTma: a 4-D map of out (head dim, rows, heads, batch) in
  // boxes of one warpgroup's 64 rows, and whether this call stores O through
  // it (BSHD / BHSD whose out TMA can address; 0: each thread stores its rows).
  CUtensorMap tma_o;
  int store_o_tma = 0;
};

}  // namespace attnkit::cuda::sm90
