#pragma once
// fa3 over video tokens in raster order (instances.def family fa3bsr): the
// sliding-tile backends' block lists index tokens in tile order
// (core/video_tiles.hpp), and instead of gathering q, k, v into tile order and
// scattering out back (0.66-0.8 ms at 30-70k tokens, docs/perf/gpu-sparse.md)
// the kernel reads each kernel tile of tile-ordered rows (128 query rows; 128
// or 192 keys) as one TMA box of a 5-D map over the caller's raster rows and
// writes output row s at raster_index(s).
//
// Why a box is a block: tile-order rows [s, s + rows) of one tile are the
// tokens (t0 .. t0 + bt, y0 .. y0 + bh, x0 .. x0 + tile_w) in the order
// (t, y, x), which is the order a box (dim, tile_w, bh, bt) lands in shared
// memory. Each token is one 128-byte row of the column block, and the
// 128-byte swizzle is a function of the shared address, so the consumers'
// wgmma descriptors read the same tile either way.
//
// Plain C++: the backend's check (cuda_backends.cpp) states the same rule.
#include <cstdint>

#include "attnkit/core/host_device.hpp"
#include "attnkit/core/video_tiles.hpp"
#include "kernels/cuda/common/fast_divmod.hpp"

namespace attnkit::cuda::sm90 {

// The box (tokens along x, y, t) that holds `rows` consecutive tile-order
// rows starting at a multiple of `rows`: whole planes of a tile (tile_h x
// tile_w divides rows) or whole lines of one plane (tile_w divides rows,
// rows divides the plane). {0, 0, 0}: a block is not one box.
struct RasterBox {
  int w, h, t;
  AK_HOST_DEVICE bool ok() const { return w > 0; }
};
AK_HOST_DEVICE RasterBox raster_box(const VideoTiling& g, int rows) {
  const int plane = g.tile_h * g.tile_w;
  if (rows <= 0 || plane <= 0 || g.tile_tokens() % rows != 0) return {0, 0, 0};
  if (rows % plane == 0) return {g.tile_w, g.tile_h, rows / plane};
  if (plane % rows == 0 && rows % g.tile_w == 0) return {g.tile_w, rows / g.tile_w, 1};
  return {0, 0, 0};
}

// tile_order_position (core/video_tiles.hpp) on divisors built once per launch.
struct RasterDivisors {
  FastDivmod tile_tokens, tiles_w, tiles_h, tile_w, tile_h;
  int tile_t = 1;
  RasterDivisors() = default;
  explicit RasterDivisors(const VideoTiling& g)
      : tile_tokens(static_cast<std::uint32_t>(g.tile_tokens())), tiles_w(static_cast<std::uint32_t>(g.tiles_w())),
        tiles_h(static_cast<std::uint32_t>(g.tiles_h())), tile_w(static_cast<std::uint32_t>(g.tile_w)),
        tile_h(static_cast<std::uint32_t>(g.tile_h)), tile_t(g.tile_t) {}
  AK_HOST_DEVICE VideoPosition position(int s) const {
    const std::uint32_t n = static_cast<std::uint32_t>(s);
    const std::uint32_t tile = tile_tokens.div(n), inside = n - tile * tile_tokens.divisor;
    const std::uint32_t tile_row = tiles_w.div(tile), c = tile - tile_row * tiles_w.divisor;
    const std::uint32_t a = tiles_h.div(tile_row), b = tile_row - a * tiles_h.divisor;
    const std::uint32_t line = tile_w.div(inside), k = inside - line * tile_w.divisor;
    const std::uint32_t i = tile_h.div(line), j = line - i * tile_h.divisor;
    return {static_cast<int>(a) * tile_t + static_cast<int>(i), static_cast<int>(b * tile_h.divisor + j),
            static_cast<int>(c * tile_w.divisor + k)};
  }
};

// How a 5-D raster map folds the batch (the launcher's raster_fold): batch
// b's token (t, head) is box coordinate (t + b * t_per_batch, head + b *
// n_per_batch): into frames when sequences follow one another with no rows
// between (BSHD without text tokens), into heads when heads do (BHSD). Each
// of q, k, v has its own (GQA: k and v have fewer heads per sequence).
struct RasterFold {
  int t_per_batch = 0, n_per_batch = 0;
};

// Why fa3bsr cannot read a problem of `seqlen_q` x `seqlen_k` tokens over
// `g` in blocks of `rows` ("" when it can): the same tokens on both sides
// (self-attention over the grid), whole tiles, video tokens first (text
// tokens after them keep their rows, and start on a block boundary), each
// block one box.
inline const char* raster_tokens_refusal(const VideoTiling& g, int seqlen_q, int seqlen_k, int rows) {
  if (seqlen_q != seqlen_k) return "query and key tokens differ (raster order reads one grid for both)";
  if (!g.whole_tiles()) return "the grid is not a whole number of tiles";
  if (g.video_tokens() > seqlen_q) return "the grid has more tokens than the sequence";
  if (!raster_box(g, rows).ok()) return "a kernel tile of tile-ordered rows is not one box of the grid";
  return "";
}

}  // namespace attnkit::cuda::sm90
