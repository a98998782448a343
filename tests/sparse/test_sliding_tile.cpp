// sliding_tile_attn: the tile permutation, STA's window rule and its cut
// variant, the issue's two target geometries, the mask strategy, and the CPU
// plan against the reference under an element mask built independently from
// raster positions.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "attnkit/backends/reference.hpp"
#include "attnkit/backends/sparse.hpp"
#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/backends/cuda.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/runtime/deployment.hpp"
#include "attnkit/sparse/sliding_tile.hpp"
#include "backends/cuda/raster_tiles.hpp"
#include "kernels/cuda/sm90/raster_tokens.hpp"
#include "sparse_test_util.hpp"

namespace attnkit::sparse {
namespace {

TEST(VideoTiles, PermutationIsABijectionAndItsInverse) {
  const VideoTiling g{4, 6, 10, 2, 3, 5};
  ASSERT_TRUE(g.whole_tiles());
  std::set<std::int64_t> seen;
  for (std::int64_t r = 0; r < g.video_tokens() + 7; ++r) {
    const std::int64_t s = tile_order_index(g, r);
    EXPECT_EQ(raster_index(g, s), r);
    seen.insert(s);
  }
  EXPECT_EQ(static_cast<std::int64_t>(seen.size()), g.video_tokens() + 7);
  // Tile (1, 0, 1) = tile index (1 * 2 + 0) * 2 + 1 = 5 holds t in [2, 4), y in [0, 3), x in [5, 10).
  const std::int64_t r = (2 * 6 + 0) * 10 + 5;  // its first token
  EXPECT_EQ(tile_order_index(g, r), 5 * 30);
  EXPECT_EQ(tile_order_index(g, r + 1), 5 * 30 + 1);               // next x: next slot of the tile
  EXPECT_EQ(tile_order_index(g, r + 10), 5 * 30 + 5);              // next y: one tile row later
  EXPECT_EQ(tile_order_index(g, r + 60), 5 * 30 + 15);             // next t
  EXPECT_EQ(tile_order_index(g, g.video_tokens() + 3), g.video_tokens() + 3);  // text stays
}

// fa3bsr's premise (kernels/cuda/sm90/raster_tokens.hpp): every block of
// `rows` tile-ordered tokens is one box of the raster grid, its tokens in the
// box's (t, y, x) order, starting at tile_order_position of its first row.
TEST(SlidingTile, TileOrderBlocksAreBoxesOfTheRasterGrid) {
  using cuda::sm90::raster_box;
  struct Case {
    VideoTiling g;
    int rows;
    int w, h, t;  // the expected box
  };
  const Case cases[] = {
      {{4, 16, 16, 2, 8, 8}, 128, 8, 8, 2},    // whole planes (the cut window's tiles)
      {{12, 16, 16, 6, 8, 8}, 128, 8, 8, 2},   // STA's 6 x 8 x 8 tiles: a third of a tile
      {{2, 16, 32, 1, 8, 16}, 128, 16, 8, 1},  // one plane
      {{2, 32, 32, 1, 16, 16}, 128, 16, 8, 1}, // half a plane: whole lines
      {{4, 8, 64, 4, 4, 16}, 128, 16, 4, 2},
      {{4, 16, 16, 2, 8, 8}, 64, 8, 8, 1},     // 64-row blocks
  };
  for (const Case& c : cases) {
    const VideoTiling& g = c.g;
    ASSERT_TRUE(g.whole_tiles());
    const auto box = raster_box(g, c.rows);
    ASSERT_TRUE(box.ok());
    EXPECT_EQ(box.w, c.w);
    EXPECT_EQ(box.h, c.h);
    EXPECT_EQ(box.t, c.t);
    ASSERT_EQ(box.w * box.h * box.t, c.rows);
    const cuda::sm90::RasterDivisors divisors(g);  // what the kernel computes positions with
    for (int s = 0; s < g.video_tokens(); ++s) {
      const VideoPosition want = tile_order_position(g, s), got = divisors.position(s);
      ASSERT_TRUE(got.t == want.t && got.y == want.y && got.x == want.x) << "row " << s;
    }
    for (int s0 = 0; s0 < g.video_tokens(); s0 += c.rows) {
      const VideoPosition at = tile_order_position(g, s0);
      int n = 0;
      for (int dt = 0; dt < box.t; ++dt)
        for (int dy = 0; dy < box.h; ++dy)
          for (int dx = 0; dx < box.w; ++dx, ++n) {
            const std::int64_t r = (static_cast<std::int64_t>(at.t + dt) * g.height + at.y + dy) * g.width + at.x + dx;
            ASSERT_EQ(raster_index(g, s0 + n), r) << "block " << s0 << " row " << n;
          }
    }
  }
  // Blocks that are not one box: 96- and 192-token tiles (a 128-row block
  // spans two tiles), 128 rows of 24-token lines.
  EXPECT_FALSE(raster_box({3, 8, 8, 3, 4, 8}, 128).ok());
  EXPECT_FALSE(raster_box({4, 48, 16, 4, 3, 16}, 128).ok());
  EXPECT_FALSE(raster_box({2, 16, 48, 2, 16, 24}, 128).ok());
}

// The raster backend's check: the grid rules above as AK2109 (the sliding
// tile backends then gather into tile order instead), its layouts, and the
// dense problems it runs on the family's own kernel.
TEST(SlidingTile, RasterOrderKernelChecksTheGrid) {
  const Platform gpu = *parse_platform("cuda:sm90");
  Problem p = testing::video_problem({4, 16, 16}, 0, 2, 2, 2, 128, DType::bf16);
  p.block_sparse = BlockSparse{128, 128, 1, 1};
  const VideoTiling tiles{4, 16, 16, 2, 8, 8};
  EXPECT_TRUE(make_fa3_raster_block_sparse_backend(tiles)->check(p, gpu).ok())
      << make_fa3_raster_block_sparse_backend(tiles)->check(p, gpu).summary();
  Problem text = testing::video_problem({4, 16, 16}, 100, 2, 2, 2, 128, DType::bf16);  // text tokens after the video's
  text.block_sparse = p.block_sparse;
  EXPECT_TRUE(make_fa3_raster_block_sparse_backend(tiles)->check(text, gpu).ok());
  Problem bhsd = text;
  bhsd.layout = Layout::bhsd;
  EXPECT_TRUE(make_fa3_raster_block_sparse_backend(tiles)->check(bhsd, gpu).ok());
  auto refusal = [&](const Problem& q, const VideoTiling& g) {
    const Diagnostics d = make_fa3_raster_block_sparse_backend(g)->check(q, gpu);
    return d.has_code("AK2109") ? d.summary() : std::string();
  };
  EXPECT_NE(refusal(p, {4, 16, 16, 1, 4, 4}), "");        // 16-token tiles: a 128-row block spans tiles
  EXPECT_NE(refusal(p, {8, 16, 16, 2, 8, 8}), "");        // a grid larger than the sequence
  EXPECT_NE(refusal(p, {4, 16, 16, 3, 8, 8}), "");        // not whole tiles
  Problem cross = p;
  cross.seqlen_k = p.seqlen_q + 128;
  EXPECT_NE(refusal(cross, tiles), "");
  Problem thd = p;
  thd.layout = Layout::thd;
  EXPECT_FALSE(make_fa3_raster_block_sparse_backend(tiles)->check(thd, gpu).ok());
  // 384-token blocks: 192-key tiles (fa3bsr192) when a 192-row block is one
  // box, else the 128-key tiles of fa3bsr.
  auto family = [&](const Problem& q, const VideoTiling& g) {
    const auto instance = cuda_planned_instance(*make_fa3_raster_block_sparse_backend(g), q);
    return instance ? instance->family : std::string("none");
  };
  Problem sta = testing::video_problem({6, 16, 16}, 0, 1, 2, 2, 128, DType::bf16);
  sta.block_sparse = BlockSparse{384, 384, 1, 1};
  EXPECT_TRUE(make_fa3_raster_block_sparse_backend({6, 16, 16, 6, 8, 8})->check(sta, gpu).ok());
  EXPECT_EQ(family(sta, {6, 16, 16, 6, 8, 8}), "fa3bsr192");
  Problem planes = testing::video_problem({3, 16, 32}, 0, 1, 2, 2, 128, DType::bf16);  // 3 x 8 x 16 tiles: 128-token planes
  planes.block_sparse = BlockSparse{384, 384, 1, 1};
  EXPECT_TRUE(make_fa3_raster_block_sparse_backend({3, 16, 32, 3, 8, 16})->check(planes, gpu).ok());
  EXPECT_EQ(family(planes, {3, 16, 32, 3, 8, 16}), "fa3bsr");
  // VSA's 64-token cubes: 64 x 64 tiles (fa3bsrq64), each one cube; 16-token tiles still span boxes.
  Problem cubes = p;
  cubes.block_sparse = BlockSparse{64, 64, 1, 1};
  EXPECT_TRUE(make_fa3_raster_block_sparse_backend({4, 16, 16, 4, 4, 4})->check(cubes, gpu).ok());
  EXPECT_EQ(family(cubes, {4, 16, 16, 4, 4, 4}), "fa3bsrq64");
  EXPECT_NE(refusal(cubes, {4, 16, 16, 1, 4, 4}), "");
  Problem dense = p;
  dense.block_sparse.reset();  // any token order: fa3's own kernel
  EXPECT_TRUE(make_fa3_raster_block_sparse_backend({4, 16, 16, 1, 4, 4})->check(dense, gpu).ok());
}

TEST(SlidingTile, WindowShiftsInwardOrIsCutAtTheBorders) {
  // Kernel 3 over 6 tiles: interior tiles centred, border tiles shifted inward (STA).
  EXPECT_EQ(window_range(0, 3, 6, WindowBorder::shift).lo, 0);
  EXPECT_EQ(window_range(0, 3, 6, WindowBorder::shift).hi, 3);
  EXPECT_EQ(window_range(3, 3, 6, WindowBorder::shift).lo, 2);
  EXPECT_EQ(window_range(5, 3, 6, WindowBorder::shift).lo, 3);
  EXPECT_EQ(window_range(5, 3, 6, WindowBorder::shift).hi, 6);
  // Cut: centred, clipped.
  EXPECT_EQ(window_range(0, 3, 6, WindowBorder::cut).lo, 0);
  EXPECT_EQ(window_range(0, 3, 6, WindowBorder::cut).hi, 2);
  EXPECT_EQ(window_range(5, 5, 6, WindowBorder::cut).lo, 3);
  EXPECT_EQ(window_range(5, 5, 6, WindowBorder::cut).hi, 6);
  // A kernel as large as the grid sees everything; an even kernel starts (k - 1) / 2 before.
  EXPECT_EQ(window_range(2, 9, 6, WindowBorder::shift).hi, 6);
  EXPECT_EQ(window_range(2, 2, 6, WindowBorder::shift).lo, 2);
  EXPECT_EQ(window_range(2, 2, 6, WindowBorder::shift).hi, 4);
}

// The issue's targets: Wan 18 x 48 x 80 with 6x8x8 tiles and a 3x3x3 kernel
// skips 85% of the blocks, every query tile seeing a full kernel; 20 x 32 x 48
// with 2x8x8 tiles and a window of (2, 1, 2) tiles each side cut at the
// borders (kernel 5, 3, 5) skips 82%.
TEST(SlidingTile, TargetGeometriesSkipWhatThePaperSays) {
  TileGeometry wan{{18, 48, 80, 6, 8, 8}, 0, WindowBorder::shift};
  const TileWindow k333[] = {{3, 3, 3}};
  const BlockSparseLists a = sliding_tile_lists(wan, k333);
  ASSERT_EQ(wan.blocks(), 3 * 6 * 10);
  for (int r = 0; r < wan.blocks(); ++r) EXPECT_EQ(a.offsets[r + 1] - a.offsets[r], 27) << r;
  EXPECT_NEAR(1.0 - double(a.nnz()) / (180.0 * 180.0), 0.85, 0.001);
  TileGeometry second{{20, 32, 48, 2, 8, 8}, 0, WindowBorder::cut};
  const TileWindow k535[] = {{5, 3, 5}};
  const BlockSparseLists b = sliding_tile_lists(second, k535);
  const double all = double(second.blocks()) * second.blocks();
  EXPECT_NEAR(1.0 - b.nnz() / all, 0.817, 0.001);  // 44/100 * 10/16 * 24/36 visible
  // Lists are valid CSR for the descriptor.
  Problem p;
  p.seqlen_q = p.seqlen_k = 30720;
  p.block_sparse = BlockSparse{128, 128, 1, 1};
  EXPECT_TRUE(validate_block_sparse_lists(p, b.offsets_view(), b.indices_view()).empty());
}

TEST(SlidingTile, TextTokensAreDense) {
  TileGeometry g{{2, 4, 4, 1, 4, 4}, 40, WindowBorder::shift};  // 2 tiles of 16, 40 text tokens = 3 blocks
  ASSERT_EQ(g.blocks(), 2 + 3);
  const TileWindow k[] = {{1, 1, 1}};
  const BlockSparseLists l = sliding_tile_lists(g, k);
  const std::vector<std::int32_t> first(l.indices.begin() + l.offsets[0], l.indices.begin() + l.offsets[1]);
  EXPECT_EQ(first, (std::vector<std::int32_t>{0, 2, 3, 4}));  // its own tile, then every text block
  for (int r = 2; r < 5; ++r) EXPECT_EQ(l.offsets[r + 1] - l.offsets[r], 5);  // text rows see everything
}

TEST(SlidingTile, MaskStrategyFormat) {
  auto s = parse_mask_strategy(R"({"3_1_0": [3, 3, 3], "3_1_1": [1, 6, 10]})", "m.json");
  ASSERT_TRUE(s.ok()) << s.diagnostics().summary();
  ASSERT_NE(s->find(3, 1, 1), nullptr);
  EXPECT_EQ(s->find(3, 1, 1)->w, 10);
  EXPECT_EQ(s->find(3, 0, 1), nullptr);
  for (const char* bad : {R"([1, 2])", R"({"3-1-0": [3, 3, 3]})", R"({"3_1_0": [3, 3]})", R"({"3_1_0": [3, 0, 3]})",
                          R"({"3_1_0_9": [3, 3, 3]})", R"({})", R"({"3_1_0": [3, 3, 3])"}) {
    auto r = parse_mask_strategy(bad, "m.json");
    EXPECT_TRUE(r.diagnostics().has_code("AK3108")) << bad;
  }
  EXPECT_TRUE(load_mask_strategy("/nonexistent/mask.json").diagnostics().has_code("AK3105"));
}

// A small video problem: 4 x 8 x 8 latents in 2 x 4 x 4 tiles (8 tiles of 32
// tokens) plus 40 text tokens, two heads with different windows.
Problem small_video(DType dtype = DType::f32) { return testing::video_problem({4, 8, 8}, 40, 2, 2, 2, 32, dtype); }

// The element mask of STA from raster positions, without the tile permutation
// or the lists: key j is visible to query i when both are video tokens whose
// tiles are within the query tile's window, or either is a text token.
HostTensor sta_element_mask(const Problem& p, const VideoTiling& g, const std::vector<TileWindow>& windows,
                            WindowBorder border) {
  HostTensor m(DType::u8, {p.batch, p.heads_q, p.seqlen_q, p.seqlen_k});
  auto* bits = m.view().ptr<std::uint8_t>();
  const std::int64_t video = g.video_tokens();
  auto tile_of = [&](std::int64_t r) {
    return std::array<int, 3>{int(r / (g.height * g.width)) / g.tile_t, int((r / g.width) % g.height) / g.tile_h,
                              int(r % g.width) / g.tile_w};
  };
  const int n[3] = {g.tiles_t(), g.tiles_h(), g.tiles_w()};
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const TileWindow& w = windows[windows.size() == 1 ? 0 : h];
      const int k[3] = {w.t, w.h, w.w};
      for (std::int64_t i = 0; i < p.seqlen_q; ++i)
        for (std::int64_t j = 0; j < p.seqlen_k; ++j) {
          bool visible = i >= video || j >= video;
          if (!visible) {
            const auto qi = tile_of(i), kj = tile_of(j);
            visible = true;
            for (int d = 0; d < 3; ++d) {
              const TileRange r = window_range(qi[d], k[d], n[d], border);
              visible = visible && kj[d] >= r.lo && kj[d] < r.hi;
            }
          }
          bits[((static_cast<std::int64_t>(b) * p.heads_q + h) * p.seqlen_q + i) * p.seqlen_k + j] = visible;
        }
    }
  return m;
}

class SlidingTilePlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mask_path_ = testing::temp_file("sta_mask.json",
                                    // step 2: per-head windows; step 3: one window for both heads.
                                    R"({"2_0_0": [1, 1, 1], "2_0_1": [2, 2, 1], "2_1_0": [2, 1, 2], "2_1_1": [2, 1, 2],
                                        "3_0_0": [1, 2, 2], "3_0_1": [1, 2, 2]})");
  }
  select::BackendConfig config(std::string border = "shift") const {
    return {{"mask_strategy_file_path", mask_path_}, {"skip_time_steps", std::int64_t{2}},
            {"tile_size", std::string("2,4,4")}, {"window_border", border}};
  }
  std::string mask_path_;
};

TEST_F(SlidingTilePlanTest, MatchesTheReferenceUnderTheElementMask) {
  const auto backend = make_sliding_tile_backend();
  const Platform cpu = detect_cpu_platform();
  for (const std::string border : {"shift", "cut"})
    for (auto [step, layer] : {std::pair{2, 0}, {2, 1}, {3, 0}}) {
      const Problem p = small_video();
      auto plan = backend->plan_configured(p, cpu, config(border));
      ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
      auto data = HostProblemData::create(p, {.seed = 3});
      ASSERT_TRUE(data.ok());
      testing::fill_video_like(p, data->tensors());
      std::vector<std::byte> ws((*plan)->workspace_bytes());
      SparsityStats stats;
      CallContext where{step, layer, std::nullopt, &stats};
      ASSERT_TRUE((*plan)->run_at(where, data->tensors(), ws, nullptr).ok());
      // The oracle: the reference with STA's element mask.
      auto strategy = load_mask_strategy(mask_path_);
      std::vector<TileWindow> windows = {*strategy->find(step, layer, 0), *strategy->find(step, layer, 1)};
      const VideoTiling g{4, 8, 8, 2, 4, 4};
      HostTensor mask = sta_element_mask(p, g, windows, border == "cut" ? WindowBorder::cut : WindowBorder::shift);
      Problem rp = p;
      rp.mask = MaskKind::custom;
      rp.out_dtype_override = DType::f64;
      HostTensor ref = data->make_output(DType::f64);
      AttentionTensors rt = data->tensors_with_outputs(ref.view(), {});
      rt.custom_mask = mask.view();
      ASSERT_TRUE(reference_attention(rp, rt).ok());
      const ErrorStats e = compare_outputs(data->tensors().out, ref.view());
      EXPECT_TRUE(e.clean()) << describe(e);
      EXPECT_LT(e.rel_l2, 1e-5) << border << " step " << step << " layer " << layer << ": " << describe(e);
      EXPECT_FALSE(stats.dense);
      EXPECT_GT(stats.blocks_skipped, 0);
      EXPECT_LT(stats.blocks_skipped, stats.blocks);
    }
}

TEST_F(SlidingTilePlanTest, DenseStepsRunTheDenseKernelExactly) {
  const Problem p = small_video(DType::bf16);
  auto plan = make_sliding_tile_backend()->plan_configured(p, detect_cpu_platform(), config());
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
  auto dense = make_cpu_flash_backend()->plan(p, detect_cpu_platform());
  ASSERT_TRUE(dense.ok());
  auto data = HostProblemData::create(p, {.seed = 4});
  ASSERT_TRUE(data.ok());
  HostTensor out_dense = data->make_output(p.out_dtype());
  AttentionTensors td = data->tensors_with_outputs(out_dense.view(), {});
  std::vector<std::byte> ws(std::max((*plan)->workspace_bytes(), (*dense)->workspace_bytes()));
  ASSERT_TRUE((*dense)->run(td, ws, nullptr).ok());
  SparsityStats stats;
  ASSERT_TRUE((*plan)->run_at({1, 0, std::nullopt, &stats}, data->tensors(), ws, nullptr).ok());  // 1 < skip_time_steps
  EXPECT_TRUE(stats.dense);
  EXPECT_NE(stats.dense_reason.find("skip_time_steps"), std::string::npos);
  const TensorView& o = data->tensors().out;
  EXPECT_EQ(std::memcmp(o.data, out_dense.view().data, o.numel() * dtype_size(o.dtype)), 0);
}

TEST_F(SlidingTilePlanTest, RefusalsAreCatalogued) {
  const auto backend = make_sliding_tile_backend();
  const Platform cpu = detect_cpu_platform();
  Problem p = small_video();
  // No config: the mask strategy is required.
  EXPECT_TRUE(backend->plan(p, cpu).diagnostics().has_code("AK3104"));
  select::BackendConfig c = config();
  c["sta_mode"] = std::string("STA_tuning");
  EXPECT_TRUE(backend->plan_configured(p, cpu, c).diagnostics().has_code("AK3110"));
  Problem no_grid = p;
  no_grid.video.reset();
  EXPECT_TRUE(backend->plan_configured(no_grid, cpu, config()).diagnostics().has_code("AK2115"));
  c = config();
  c["tile_size"] = std::string("3,4,4");  // 4 frames are not whole 3-frame tiles
  EXPECT_TRUE(backend->plan_configured(p, cpu, c).diagnostics().has_code("AK2116"));
  c["tile_size"] = std::string("1,2,4");  // 8-token tiles: not a multiple of 16
  EXPECT_TRUE(backend->plan_configured(p, cpu, c).diagnostics().has_code("AK2116"));
  c["tile_size"] = std::string("2,4");
  EXPECT_TRUE(backend->plan_configured(p, cpu, c).diagnostics().has_code("AK3103"));
  // At run time: no context, a step the strategy lacks.
  auto plan = backend->plan_configured(p, cpu, config());
  ASSERT_TRUE(plan.ok());
  auto data = HostProblemData::create(p);
  std::vector<std::byte> ws((*plan)->workspace_bytes());
  EXPECT_TRUE((*plan)->run(data->tensors(), ws, nullptr).has_code("AK3021"));
  EXPECT_TRUE((*plan)->run_at({5, 0}, data->tensors(), ws, nullptr).has_code("AK3109"));
  // A GPU: the CUDA path runs fa3 / fa2 over the lists, so their limits are
  // the plan's: these 32-token tiles at head dim 32 are not whole kernel tiles
  // of any block-sparse instance (tests/gpu/test_sparse_gpu.cpp runs 128-token tiles).
  Platform gpu = *parse_platform("cuda:sm90");
  EXPECT_TRUE(backend->check(small_video(DType::bf16), gpu).ok()) << backend->check(small_video(DType::bf16), gpu).summary();
  EXPECT_TRUE(backend->check(small_video(DType::f32), gpu).has_code("AK2104"));
  const Diagnostics on_gpu = backend->plan_configured(small_video(DType::bf16), gpu, config()).diagnostics();
  EXPECT_TRUE(on_gpu.has_code("AK2105")) << on_gpu.summary();
}

// check_configured() (what `check` runs at start-up) refuses what the plan
// refuses, with the same codes, so that a deployment never fails late: the
// geometry, the mode, the strategy file, and on a GPU the kernels.
TEST_F(SlidingTilePlanTest, CheckRefusesWhatThePlanRefuses) {
  const auto backend = make_sliding_tile_backend();
  const Platform cpu = detect_cpu_platform();
  const Platform gpu = *parse_platform("cuda:sm90");
  auto codes = [](const Diagnostics& d) {
    std::set<std::string> out;
    for (const Diagnostic& x : d) out.insert(x.code);
    return out;
  };
  struct Case {
    const char* what;
    Problem p;
    select::BackendConfig c;
    Platform platform;
    const char* code;  // "" : both accept
  };
  Problem no_grid = small_video();
  no_grid.video.reset();
  std::vector<Case> cases;
  auto with = [&](const char* key, std::string value) {
    select::BackendConfig c = config();
    c[key] = std::move(value);
    return c;
  };
  cases.push_back({"valid", small_video(), config(), cpu, ""});
  cases.push_back({"no grid", no_grid, config(), cpu, "AK2115"});
  cases.push_back({"3-frame tiles of 4 frames", small_video(), with("tile_size", "3,4,4"), cpu, "AK2116"});
  cases.push_back({"8-token tiles", small_video(), with("tile_size", "1,2,4"), cpu, "AK2116"});
  cases.push_back({"mask search mode", small_video(), with("sta_mode", "STA_tuning"), cpu, "AK3110"});
  cases.push_back({"two tile sides", small_video(), with("tile_size", "2,4"), cpu, "AK3103"});
  cases.push_back({"no such strategy file", small_video(), with("mask_strategy_file_path", "/nonexistent/mask.json"),
                   cpu, "AK3105"});
  cases.push_back({"a strategy naming no window", small_video(),
                   with("mask_strategy_file_path", testing::temp_file("empty_mask.json", "{}")), cpu, "AK3108"});
  cases.push_back({"32-token tiles at head dim 32 on sm_90", small_video(DType::bf16), config(), gpu, "AK2105"});
  for (const Case& k : cases) {
    // What `check` runs: the config's keys (the selection), then the layer's check.
    Diagnostics checked = select::validate_own_config(k.c, *select::find_schema("sliding_tile_attn"));
    checked.append(backend->check_configured(k.p, k.platform, k.c));
    const Diagnostics planned = backend->plan_configured(k.p, k.platform, k.c).diagnostics();
    if (*k.code == '\0') {
      EXPECT_TRUE(checked.ok()) << k.what << ": " << checked.summary();
      EXPECT_TRUE(planned.ok()) << k.what << ": " << planned.summary();
      continue;
    }
    EXPECT_TRUE(checked.has_code(k.code)) << k.what << ": " << checked.summary();
    EXPECT_EQ(codes(checked), codes(planned)) << k.what << ": check " << checked.summary() << " | plan "
                                              << planned.summary();
  }
  // The tile sizes the refusal names divide the grid (here: 4 x 8 x 8 tokens).
  const Diagnostics odd = backend->check_configured(small_video(), cpu, with("tile_size", "3,4,4"));
  EXPECT_NE(odd.summary().find("tile_size 4,4,8"), std::string::npos) << odd.summary();
}

// Through a Deployment: the request's step and the layer's index choose the
// windows; skip steps and cross-attention run dense (the latter recorded).
TEST_F(SlidingTilePlanTest, DeploymentRunsStepsAndLayers) {
  auto dep = runtime::Deployment::create(
      {.model = std::string(ATTNKIT_SOURCE_DIR) + "/tests/select/profiles/sta-video.yaml", .platform = "cpu",
       .dtype = "fp32", .attention_backend = "sliding_tile_attn",
       .attention_backend_config = "mask_strategy_file_path=" + mask_path_ + ",skip_time_steps=2,tile_size=2,4,4"},
      default_registry(), [](std::string_view) {});
  ASSERT_TRUE(dep.ok()) << dep.diagnostics().summary();
  const select::Decision* cross = &(**(*dep)->layer("transformer", "cross", 0)).decision();
  EXPECT_NE(cross->backend, "sliding_tile_attn");
  EXPECT_NE(cross->fallback_reason.find("AK3003"), std::string::npos) << cross->fallback_reason;
  runtime::AttentionLayer& self1 = **(*dep)->layer("transformer", "self", 1);
  EXPECT_EQ(self1.backend().name(), "sliding_tile_attn");
  const Problem p = self1.decision().problem;
  ASSERT_TRUE(p.video.has_value());
  auto data = HostProblemData::create(p, {.seed = 9});
  ASSERT_TRUE(data.ok());
  testing::fill_video_like(p, data->tensors());
  std::vector<std::byte> ws((**self1.plan(p)).workspace_bytes());
  std::vector<float> outs[2];
  for (int step : {1, 2}) {
    auto req = (*dep)->prepare({.step = step});
    ASSERT_TRUE(req.ok());
    (*dep)->apply(*req);
    ASSERT_TRUE(self1.run(p, data->tensors(), ws, nullptr).ok()) << step;
    const TensorView& o = data->tensors().out;
    outs[step - 1].assign(o.ptr<float>(), o.ptr<float>() + o.numel());
  }
  // Step 1 is dense, step 2 runs layer 1's windows of step 2.
  EXPECT_NE(outs[0], outs[1]);
  auto later = (*dep)->prepare({.step = 3});  // the file gives step 3 no layer 1
  ASSERT_TRUE(later.ok());
  (*dep)->apply(*later);
  EXPECT_TRUE(self1.run(p, data->tensors(), ws, nullptr).has_code("AK3109"));
}

}  // namespace
}  // namespace attnkit::sparse
