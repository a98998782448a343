#pragma once
// Sliding tile attention (STA, arXiv 2502.04507) as block-sparse lists: the
// video latents are permuted into contiguous 3D tiles (core/video_tiles.hpp),
// each tile is one query block and one key block, and a query tile attends to
// the key tiles of a 3D window around it. Text tokens of joint attention sit
// after the video tokens and are attended densely: every video tile sees every
// text block, every text block sees everything. The exact semantics are in
// docs/sparse.md. The builders are host functions; a CUDA plan calls them at
// plan time as the CPU plan does.
#include <array>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/host_device.hpp"
#include "attnkit/core/video_tiles.hpp"

namespace attnkit::sparse {

// A window of key tiles: its size along (t, h, w), in tiles.
struct TileWindow {
  int t = 1, h = 1, w = 1;
  friend auto operator<=>(const TileWindow&, const TileWindow&) = default;
};

// Where a window goes at the edge of the grid.
enum class WindowBorder : std::uint8_t {
  shift,  // STA's rule: the window keeps its size and moves inward, so every query tile sees a full kernel
  cut,    // centred on the query tile and cut at the edges: border tiles see fewer tiles
};

struct TileRange {
  int lo = 0, hi = 0;  // key tiles [lo, hi) along one dimension
};

// The key tiles along one dimension of n tiles that query tile q sees with a
// window of k tiles: k tiles starting (k - 1) / 2 before q, shifted inward
// (shift) or clipped (cut) at the edges; all n when k >= n.
AK_HOST_DEVICE TileRange window_range(int q, int k, int n, WindowBorder border) {
  if (k >= n) return {0, n};
  int lo = q - (k - 1) / 2;
  if (border == WindowBorder::shift) {
    lo = lo < 0 ? 0 : (lo > n - k ? n - k : lo);
    return {lo, lo + k};
  }
  const int hi = lo + k > n ? n : lo + k;
  return {lo < 0 ? 0 : lo, hi};
}

// The token geometry of one call.
struct TileGeometry {
  VideoTiling tiling;    // the latent grid and the tile size
  int text_tokens = 0;   // after the video tokens
  WindowBorder border = WindowBorder::shift;

  int block() const { return tiling.tile_tokens(); }  // block_q = block_k
  int video_blocks() const { return tiling.tiles(); }
  int blocks() const { return video_blocks() + num_blocks(text_tokens, block()); }
};

// The lists for heads with windows `head_windows`: one window gives lists
// shared by every head (BlockSparse::heads = 1), heads_q windows one list set
// per head. Row qb < video_blocks(): its window's tiles in tile order, then
// every text block; a text row: every block.
BlockSparseLists sliding_tile_lists(const TileGeometry& g, std::span<const TileWindow> head_windows);

// FastVideo's mask strategy file: a JSON object {"step_layer_head": [t, h, w]}
// of windows in tiles, e.g. {"15_0_3": [3, 3, 3]}.
struct MaskStrategy {
  std::string path;
  std::map<std::array<int, 3>, TileWindow> windows;  // (step, layer, head) -> window
  const TileWindow* find(int step, int layer, int head) const;
};
Result<MaskStrategy> parse_mask_strategy(std::string_view json, const std::string& path);  // AK3108
Result<MaskStrategy> load_mask_strategy(const std::string& path);                          // AK3105, AK3108

// Everything a sliding-tile plan decides before any call, shared by the CPU
// and CUDA paths: the geometry, the mask strategy, and the lists of every
// (step, layer) the strategy names (identical window sets share one list set).
class SlidingTileSchedule {
 public:
  // Reads the backend's config keys (select/config.cpp: sliding_tile_attn).
  // Refuses a problem without a video grid (AK2115), a grid that is not whole
  // tiles or tiles that are not a multiple of 16 tokens (AK2116), a mask-search
  // sta_mode (AK3110) and bad strategy files (AK3105, AK3108).
  static Result<SlidingTileSchedule> create(const Problem& p, const select::BackendConfig& config);
  // What create() refuses, found without building any list (the selection's
  // check at start-up): all of the above but the config's own keys, which the
  // selection validates itself; the strategy file is read when the config
  // names one. The geometry create() would plan when it accepts.
  static Result<TileGeometry> check(const Problem& p, const select::BackendConfig& config);

  // What the call at `where` runs: dense (a step before skip_time_steps), or
  // the lists of its step and layer. Refused without a step and layer
  // (AK3021) or when the strategy lacks a window of the call (AK3109).
  struct Choice {
    bool dense = false;
    std::string dense_reason;
    const BlockSparseLists* lists = nullptr;
    BlockSparse layout;  // block sizes and lists per head of `lists`
  };
  Result<Choice> choose(const CallContext& where) const;

  const TileGeometry& geometry() const { return geometry_; }
  int skip_time_steps() const { return skip_time_steps_; }
  std::size_t distinct_list_sets() const { return lists_.size(); }
  // Every list set choose() can return (a CUDA plan uploads them at plan time).
  std::vector<const BlockSparseLists*> list_sets() const {
    std::vector<const BlockSparseLists*> out;
    for (const auto& [windows, lists] : lists_) out.push_back(&lists);
    return out;
  }

 private:
  // create() without the config check and the lists.
  static Result<SlidingTileSchedule> prepare(const Problem& p, const select::BackendConfig& config);
  // The (step, layer) pairs the strategy names at or after skip_time_steps.
  std::set<std::pair<int, int>> sparse_step_layers() const;

  Problem problem_;
  TileGeometry geometry_;
  MaskStrategy strategy_;
  int skip_time_steps_ = 15;
  // Per head windows -> their lists (one window: shared by the heads).
  std::map<std::vector<TileWindow>, BlockSparseLists> lists_;
};

}  // namespace attnkit::sparse
