#include "attnkit/sparse/sliding_tile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "attnkit/core/host_memory.hpp"
#include "core/text_file.hpp"
#include "select/json_text.hpp"

namespace attnkit::sparse {

BlockSparseLists sliding_tile_lists(const TileGeometry& g, std::span<const TileWindow> head_windows) {
  const VideoTiling& v = g.tiling;
  const int nt = v.tiles_t(), nh = v.tiles_h(), nw = v.tiles_w();
  const int video = g.video_blocks(), all = g.blocks();
  BlockSparseLists out;
  out.offsets.push_back(0);
  for (const TileWindow& w : head_windows) {
    for (int q = 0; q < video; ++q) {
      const int a = q / (nh * nw), b = (q / nw) % nh, c = q % nw;
      const TileRange rt = window_range(a, w.t, nt, g.border), rh = window_range(b, w.h, nh, g.border),
                      rw = window_range(c, w.w, nw, g.border);
      for (int x = rt.lo; x < rt.hi; ++x)
        for (int y = rh.lo; y < rh.hi; ++y)
          for (int z = rw.lo; z < rw.hi; ++z) out.indices.push_back((x * nh + y) * nw + z);
      for (int t = video; t < all; ++t) out.indices.push_back(t);  // text keys: dense
      out.offsets.push_back(static_cast<std::int32_t>(out.indices.size()));
    }
    for (int q = video; q < all; ++q) {  // text queries: dense
      for (int t = 0; t < all; ++t) out.indices.push_back(t);
      out.offsets.push_back(static_cast<std::int32_t>(out.indices.size()));
    }
  }
  return out;
}

const TileWindow* MaskStrategy::find(int step, int layer, int head) const {
  const auto it = windows.find({step, layer, head});
  return it == windows.end() ? nullptr : &it->second;
}

namespace {

// "15_0_3" as (step, layer, head): three non-negative ints, nothing else
// (from_chars: no overflow, unlike sscanf's %d).
bool parse_strategy_key(std::string_view key, std::array<int, 3>& index) {
  const char* at = key.data();
  const char* end = key.data() + key.size();
  for (int i = 0; i < 3; ++i) {
    if (i > 0) {
      if (at == end || *at != '_') return false;
      ++at;
    }
    const auto [next, error] = std::from_chars(at, end, index[i]);
    if (error != std::errc() || next == at || index[i] < 0) return false;
    at = next;
  }
  return at == end;
}

}  // namespace

Result<MaskStrategy> parse_mask_strategy(std::string_view json, const std::string& path) {
  auto malformed = [&](std::string detail) {
    return Diagnostics(diagnose("AK3108", {{"path", path}, {"detail", std::move(detail)}}));
  };
  const select::JsonText parsed = select::parse_json_text(json);
  if (!parsed.value) return malformed(parsed.problem);
  const nlohmann::json& j = *parsed.value;
  if (!j.is_object()) return malformed("the top level must be an object {\"step_layer_head\": [t, h, w]}");
  MaskStrategy s;
  s.path = path;
  for (const auto& [key, value] : j.items()) {
    std::array<int, 3> index{};
    if (!parse_strategy_key(key, index))
      return malformed("key '" + shortened(key) + "' is not step_layer_head (three non-negative integers)");
    if (!value.is_array() || value.size() != 3)
      return malformed("the window of '" + key + "' is not [t, h, w]: " + select::shown_json(value));
    int dims[3];
    for (int d = 0; d < 3; ++d) {
      // Read as int64: get<int>() of a value past int32 would wrap to a small window.
      const bool integer = value[d].is_number_integer() && !(value[d].is_number_unsigned() && value[d].get<std::uint64_t>() > INT_MAX);
      const std::int64_t w = integer ? value[d].get<std::int64_t>() : 0;
      if (w < 1 || w > INT_MAX)
        return malformed("the window of '" + key + "' must be three positive integers (tiles): " +
                         select::shown_json(value));
      dims[d] = static_cast<int>(w);
    }
    s.windows[index] = TileWindow{dims[0], dims[1], dims[2]};
  }
  if (s.windows.empty()) return malformed("it names no window");
  return s;
}

Result<MaskStrategy> load_mask_strategy(const std::string& path) {
  const TextFile file = read_text_file(path);
  if (!file.text)
    return Diagnostics(diagnose("AK3105", {{"path", path}, {"what", "'mask_strategy_file_path'"}, {"reason", file.problem}}));
  return parse_mask_strategy(*file.text, path);
}

namespace {

std::string grid_text(const VideoTiling& v) { return fmt::format("{}x{}x{}", v.frames, v.height, v.width); }

Diagnostic geometry_refusal(std::string reason) {
  return diagnose("AK2116", {{"backend", "sliding_tile_attn"}, {"reason", std::move(reason)}});
}

// Tile sizes (t, h, w) that divide `v`'s grid into tiles of a multiple of 16
// tokens, at most 512 a tile, at most `most` of them: multiples of 128 tokens
// first (the GPU kernels' block sizes, so they run everywhere), then the
// shapes nearest the requested tile (sum over sides of |log2 ratio|).
std::vector<std::array<int, 3>> whole_tile_sizes(const VideoTiling& v, std::size_t most) {
  std::vector<std::array<int, 3>> out;
  for (int t = 1; t <= std::min(v.frames, 512); ++t)
    for (int h = 1; h <= std::min(v.height, 512 / t); ++h)
      for (int w = 1; w <= std::min(v.width, 512 / (t * h)); ++w)
        if (v.frames % t == 0 && v.height % h == 0 && v.width % w == 0 && (t * h * w) % 16 == 0)
          out.push_back({t, h, w});
  const double wanted[3] = {double(v.tile_t), double(v.tile_h), double(v.tile_w)};
  auto rank = [&](const std::array<int, 3>& a) {
    double distance = 0;
    for (int d = 0; d < 3; ++d) distance += std::abs(std::log2(a[d] / wanted[d]));
    return std::pair{(a[0] * a[1] * a[2]) % 128 != 0, distance};
  };
  std::stable_sort(out.begin(), out.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  if (out.size() > most) out.resize(most);
  return out;
}

std::string not_whole_tiles(const VideoTiling& v, const std::string& tiles) {
  const std::vector<std::array<int, 3>> fits = whole_tile_sizes(v, 3);
  std::string hint;
  for (const auto& f : fits) hint += fmt::format("{}{},{},{}", hint.empty() ? "" : " or ", f[0], f[1], f[2]);
  return "the video grid " + grid_text(v) + " is not a whole number of " + tiles + " tiles (" +
         (hint.empty() ? "no tile size divides it into tiles of a multiple of 16 tokens: pad the latents or run a "
                         "dense backend"
                       : "tile_size " + hint + " divides it") +
         ")";
}

// The tile geometry of a call under the config's tile_size and window_border:
// refuses a problem without a video grid (AK2115), a grid that is not whole
// tiles, tiles that are not a multiple of 16 tokens, or a call that is not
// self-attention over one sequence (AK2116, naming tile sizes that fit).
Result<TileGeometry> sliding_tile_geometry(const Problem& p, const select::BackendConfig& config) {
  if (!p.video) return Diagnostics(diagnose("AK2115", {{"backend", "sliding_tile_attn"}}));
  const std::vector<std::int64_t> tile = select::config_int_list(config, "tile_size").value_or(std::vector<std::int64_t>{6, 8, 8});
  TileGeometry g;
  VideoTiling& v = g.tiling;
  v = {p.video->frames, p.video->height, p.video->width, static_cast<int>(tile[0]), static_cast<int>(tile[1]),
       static_cast<int>(tile[2])};
  const std::string tiles = fmt::format("{}x{}x{}", tile[0], tile[1], tile[2]);
  if (!v.whole_tiles()) return Diagnostics(geometry_refusal(not_whole_tiles(v, tiles)));
  if (v.tile_tokens() % 16 != 0)
    return Diagnostics(geometry_refusal("a " + tiles + " tile holds " + std::to_string(v.tile_tokens()) +
                                        " tokens, not a multiple of 16 (a tile is one attention block)"));
  if (p.seqlen_q != p.seqlen_k)
    return Diagnostics(geometry_refusal("it is self-attention over one token sequence (seqlen_q " +
                                        std::to_string(p.seqlen_q) + " != seqlen_k " + std::to_string(p.seqlen_k) +
                                        ")"));
  g.text_tokens = static_cast<int>(p.seqlen_q - v.video_tokens());
  g.border = select::config_string(config, "window_border").value_or("shift") == "cut" ? WindowBorder::cut
                                                                                       : WindowBorder::shift;
  return g;
}

}  // namespace

Result<SlidingTileSchedule> SlidingTileSchedule::prepare(const Problem& p, const select::BackendConfig& config) {
  auto geometry = sliding_tile_geometry(p, config);
  if (!geometry) return geometry.diagnostics();
  SlidingTileSchedule s;
  s.problem_ = p;
  s.geometry_ = *geometry;
  const std::string mode = select::config_string(config, "sta_mode").value_or("STA_inference");
  if (mode != "STA_inference") return Diagnostics(diagnose("AK3110", {{"mode", mode}}));
  s.skip_time_steps_ = static_cast<int>(select::config_int(config, "skip_time_steps").value_or(15));
  const std::optional<std::string> path = select::config_string(config, "mask_strategy_file_path");
  if (!path) return s;  // required: the config check says so (AK3104)
  auto strategy = load_mask_strategy(*path);
  if (!strategy) return strategy.diagnostics();
  s.strategy_ = std::move(*strategy);
  // Every row lists at most blocks() blocks: the lists of one head set hold at
  // most heads x blocks^2 int32 entries, whose offsets must stay int32.
  const std::size_t step_layers = s.sparse_step_layers().size();
  const std::int64_t per_head = std::int64_t{s.geometry_.blocks()} * s.geometry_.blocks();
  const std::int64_t most = per_head * (step_layers == 0 ? 0 : p.heads_q);
  if (most > INT32_MAX)
    return Diagnostics(diagnose("AK1012", {{"what", "the sliding-tile lists of one step and layer (heads x blocks^2)"},
                                           {"value", std::to_string(most)}, {"limit", std::to_string(INT32_MAX)}}));
  if (Diagnostics why = check_host_allocation("the sliding-tile lists", 4 * most * std::int64_t(step_layers)); !why.ok())
    return why;
  return s;
}

std::set<std::pair<int, int>> SlidingTileSchedule::sparse_step_layers() const {
  std::set<std::pair<int, int>> out;
  for (const auto& [key, window] : strategy_.windows)
    if (key[0] >= skip_time_steps_) out.insert({key[0], key[1]});
  return out;
}

Result<TileGeometry> SlidingTileSchedule::check(const Problem& p, const select::BackendConfig& config) {
  auto prepared = prepare(p, config);
  if (!prepared) return prepared.diagnostics();
  return prepared->geometry_;
}

Result<SlidingTileSchedule> SlidingTileSchedule::create(const Problem& p, const select::BackendConfig& config) {
  const select::BackendSchema* schema = select::find_schema("sliding_tile_attn");
  if (Diagnostics why = select::validate_own_config(config, *schema); !why.ok()) return why;
  auto prepared = prepare(p, config);
  if (!prepared) return prepared.diagnostics();
  SlidingTileSchedule& s = *prepared;
  // The lists of every (step, layer) whose heads the strategy names in full.
  for (const auto& [step, layer] : s.sparse_step_layers()) {
    std::vector<TileWindow> heads;
    for (int h = 0; h < p.heads_q; ++h)
      if (const TileWindow* w = s.strategy_.find(step, layer, h)) heads.push_back(*w);
    if (static_cast<int>(heads.size()) != p.heads_q) continue;  // choose() names the missing head
    if (std::all_of(heads.begin(), heads.end(), [&](const TileWindow& w) { return w == heads[0]; })) heads.resize(1);
    if (!s.lists_.count(heads)) s.lists_.emplace(heads, sliding_tile_lists(s.geometry_, heads));
  }
  return prepared;
}

Result<SlidingTileSchedule::Choice> SlidingTileSchedule::choose(const CallContext& where) const {
  if (where.step < 0 || where.layer_index < 0)
    return Diagnostics(diagnose("AK3021", {{"backend", "sliding_tile_attn"},
                                           {"missing", where.step < 0 ? "the denoising step" : "the layer index"}}));
  Choice c;
  if (where.step < skip_time_steps_) {
    c.dense = true;
    c.dense_reason = "step " + std::to_string(where.step) + " < skip_time_steps " + std::to_string(skip_time_steps_);
    return c;
  }
  std::vector<TileWindow> heads;
  for (int h = 0; h < problem_.heads_q; ++h) {
    const TileWindow* w = strategy_.find(static_cast<int>(where.step), static_cast<int>(where.layer_index), h);
    if (w == nullptr)
      return Diagnostics(diagnose("AK3109", {{"path", strategy_.path},
                                             {"step", std::to_string(where.step)},
                                             {"layer", std::to_string(where.layer_index)},
                                             {"head", std::to_string(h)}}));
    heads.push_back(*w);
  }
  if (std::all_of(heads.begin(), heads.end(), [&](const TileWindow& w) { return w == heads[0]; })) heads.resize(1);
  const auto it = lists_.find(heads);  // built by create() for every complete (step, layer)
  c.lists = &it->second;
  c.layout = BlockSparse{geometry_.block(), geometry_.block(), 1, heads.size() == 1 ? 1 : problem_.heads_q};
  return c;
}

}  // namespace attnkit::sparse
