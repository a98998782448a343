#pragma once
// Video latents in contiguous 3D tiles: the token permutation the sliding-tile
// backends apply before block-sparse attention (so a tile is one key / query
// block) and undo after. Host and device share it (a kernel can gather rows
// with the same index math).
//
// Raster order (the model's): token (t, y, x) of a T x H x W grid is
//   r = (t * H + y) * W + x.
// Tile order, with tiles of tt x th x tw tokens and nh = H / th, nw = W / tw:
//   tile (a, b, c) = (t / tt, y / th, x / tw),   inside it (i, j, k) = (t % tt, y % th, x % tw)
//   s = ((a * nh + b) * nw + c) * (tt * th * tw) + (i * th + j) * tw + k.
// The grid must be a whole number of tiles. Tokens past T * H * W (text tokens
// of joint attention) keep their positions.
#include <cstdint>

#include "attnkit/core/host_device.hpp"

namespace attnkit {

struct VideoTiling {
  int frames = 0, height = 0, width = 0;  // T, H, W (latent tokens)
  int tile_t = 1, tile_h = 1, tile_w = 1;  // tt, th, tw (tokens per tile side)

  AK_HOST_DEVICE std::int64_t video_tokens() const { return static_cast<std::int64_t>(frames) * height * width; }
  AK_HOST_DEVICE int tile_tokens() const { return tile_t * tile_h * tile_w; }
  AK_HOST_DEVICE int tiles_t() const { return frames / tile_t; }
  AK_HOST_DEVICE int tiles_h() const { return height / tile_h; }
  AK_HOST_DEVICE int tiles_w() const { return width / tile_w; }
  AK_HOST_DEVICE int tiles() const { return tiles_t() * tiles_h() * tiles_w(); }
  // Every side a whole number of tiles.
  AK_HOST_DEVICE bool whole_tiles() const {
    return frames > 0 && height > 0 && width > 0 && tile_t > 0 && tile_h > 0 && tile_w > 0 &&
           frames % tile_t == 0 && height % tile_h == 0 && width % tile_w == 0;
  }
};

// Raster position -> tile-order position (identity past the video tokens).
AK_HOST_DEVICE std::int64_t tile_order_index(const VideoTiling& g, std::int64_t r) {
  if (r >= g.video_tokens()) return r;
  const std::int64_t x = r % g.width, y = (r / g.width) % g.height, t = r / (static_cast<std::int64_t>(g.width) * g.height);
  const std::int64_t tile = (t / g.tile_t * g.tiles_h() + y / g.tile_h) * g.tiles_w() + x / g.tile_w;
  const std::int64_t inside = ((t % g.tile_t) * g.tile_h + y % g.tile_h) * g.tile_w + x % g.tile_w;
  return tile * g.tile_tokens() + inside;
}

// The grid position (t, y, x) of video token s in tile order (s < video_tokens;
// 32-bit: sequences are int-sized).
struct VideoPosition {
  int t, y, x;
};
AK_HOST_DEVICE VideoPosition tile_order_position(const VideoTiling& g, int s) {
  const int tile = s / g.tile_tokens(), inside = s % g.tile_tokens();
  const int c = tile % g.tiles_w(), b = (tile / g.tiles_w()) % g.tiles_h(), a = tile / (g.tiles_w() * g.tiles_h());
  const int k = inside % g.tile_w, j = (inside / g.tile_w) % g.tile_h, i = inside / (g.tile_w * g.tile_h);
  return {a * g.tile_t + i, b * g.tile_h + j, c * g.tile_w + k};
}

// The raster row of grid position `at`: (t * H + y) * W + x.
AK_HOST_DEVICE std::int64_t raster_row(const VideoTiling& g, const VideoPosition& at) {
  return (static_cast<std::int64_t>(at.t) * g.height + at.y) * g.width + at.x;
}

// Tile-order position -> raster position (the inverse).
AK_HOST_DEVICE std::int64_t raster_index(const VideoTiling& g, std::int64_t s) {
  if (s >= g.video_tokens()) return s;
  return raster_row(g, tile_order_position(g, static_cast<int>(s)));
}

}  // namespace attnkit
