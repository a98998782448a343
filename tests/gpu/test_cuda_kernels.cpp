// GPU checks of the CUDA backends beyond the shared parity list: the cases the
// list runs only in fp32 (windows, empty rows, BHSD) in fp16/bf16 so fa2 takes
// them, several tiles and query blocks per head, long varlen sequences, and a
// CUDA-graph capture of Plan::run, paged KV caches on fa3. Skips with a message
// when no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "attnkit/backends/cuda.hpp"
#include "attnkit/backends/reference.hpp"
#include "attnkit/backends/registry.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/gather_rows.hpp"
#include "gpu/device_buffers.hpp"
#include "testing/backend_runner.hpp"
#include "testing/error_norms.hpp"
#include "testing/parity_cases.hpp"
#include "testing/reference_check.hpp"

#if defined(ATTNKIT_HAS_CUDA)
#include <cuda_runtime.h>
#endif

namespace attnkit::testing {
namespace {

Problem make(int sq, int sk, int hq, int hkv, int d, DType t, MaskKind mask = MaskKind::none) {
  return make_test_problem(sq, sk, hq, hkv, d, t, mask);
}

std::vector<ParityCase> gpu_cases() {
  std::vector<ParityCase> c;
  auto add = [&](std::string name, Problem p, ProblemDataOptions o = {}) {
    o.seed = 1000 + c.size() * 31;
    c.push_back({std::move(name), p, o});
  };
  int wi = 0;
  for (auto [l, r] : {std::pair{32, 0}, {16, 16}, {-1, 8}, {0, 0}, {200, 3}}) {
    Problem p = make(300, 450, 4, 2, 64, DType::bf16, MaskKind::sliding_window);
    p.window = {l, r};
    add("window" + std::to_string(wi++) + "_bf16", p);
  }
  {
    Problem p = make(90, 33, 4, 4, 128, DType::f16, MaskKind::causal);
    p.return_lse = true;
    add("lse_empty_rows_f16", p);
    p.has_sinks = true;
    add("lse_empty_rows_sinks_f16", p);
    Problem q = make(200, 260, 4, 2, 64, DType::bf16, MaskKind::causal);
    q.layout = Layout::bhsd;
    add("bhsd_causal_bf16", q);
  }
  {
    Problem p = make(2048, 2048, 8, 2, 128, DType::bf16, MaskKind::causal);
    p.batch = 1;
    p.return_lse = true;
    add("s2048_d128_causal_gqa4_bf16", p);
    Problem q = make(1500, 1500, 2, 2, 64, DType::f16);
    add("s1500_d64_f16", q);
    Problem r = make(700, 700, 2, 1, 256, DType::bf16, MaskKind::causal);
    add("s700_d256_causal_bf16", r);
    Problem s = make(513, 513, 2, 2, 192, DType::f16);
    add("s513_d192_f16", s);
    Problem u = make(1, 5000, 8, 1, 128, DType::bf16, MaskKind::causal);
    u.return_lse = true;
    add("decode_k5000_bf16", u);
    Problem w = make(333, 333, 4, 2, 128, DType::bf16);
    w.softcap = 30.0f;
    w.has_sinks = true;
    w.return_lse = true;
    w.scale = 0.2f;
    add("softcap_sinks_lse_s333_bf16", w);
    Problem x = make(640, 640, 3, 3, 96, DType::bf16, MaskKind::causal);
    add("s640_d96_causal_bf16", x);
  }
  {
    // More tiles than a persistent fa3 grid has CTAs (132 on an H200): each
    // CTA walks several, across the Q / K / V barrier phases.
    Problem p = make(1024, 1024, 16, 4, 64, DType::bf16);
    p.batch = 2;
    add("persistent_192_tiles_d64_bf16", p);
    Problem q = make(900, 1100, 20, 5, 128, DType::f16);  // key rows that end inside a tile, LSE
    q.batch = 2;
    q.return_lse = true;
    add("persistent_320_tiles_d128_f16", q);
    Problem k = make(1000, 1000, 9, 3, 128, DType::bf16);  // CTAs storing several tiles through one O staging tile
    k.batch = 2;
    add("persistent_144_tiles_d128_k1000_bf16", k);
    Problem r = make(300, 300, 8, 2, 128, DType::bf16);
    r.layout = Layout::thd;
    r.batch = 40;
    ProblemDataOptions o;
    for (int b = 0; b < 40; ++b) {
      o.q_lens.push_back(b % 7 == 3 ? 0 : 17 + (b * 37) % 284);
      o.k_lens.push_back(b % 11 == 5 ? 0 : 5 + (b * 53) % 296);
    }
    add("persistent_varlen_40_sequences_bf16", r, o);
  }
  {
    Problem p = make(777, 900, 4, 2, 128, DType::bf16, MaskKind::causal);
    p.layout = Layout::thd;
    p.batch = 4;
    p.return_lse = true;
    ProblemDataOptions o;
    o.q_lens = {300, 1, 777, 0};
    o.k_lens = {300, 50, 900, 10};
    add("varlen_long_causal_bf16", p, o);
  }
  {
    // fa3's dynamic scheduler (causal / window masks, more query blocks than
    // the short-sequence rule's 8 and more tiles than CTAs): tiles handed out
    // from the workspace counter; varlen tiles past a short sequence are
    // skipped unpublished, rows without keys still published (zeros).
    Problem p = make(2200, 2200, 8, 2, 128, DType::bf16, MaskKind::causal);
    p.return_lse = true;
    add("dynamic_144_tiles_causal_d128_bf16", p);
    Problem q = make(1900, 2300, 16, 4, 64, DType::f16, MaskKind::sliding_window);
    q.window = {256, 64};
    add("dynamic_160_tiles_window_d64_f16", q);
    Problem r = make(1500, 1500, 12, 12, 256, DType::bf16, MaskKind::causal);
    r.has_sinks = true;
    add("dynamic_144_tiles_causal_d256_bf16", r);
    Problem v = make(1300, 1400, 4, 1, 128, DType::bf16, MaskKind::causal);
    v.layout = Layout::thd;
    v.batch = 30;
    v.return_lse = true;
    ProblemDataOptions o;
    for (int b = 0; b < 30; ++b) {
      o.q_lens.push_back(b % 9 == 4 ? 0 : b == 7 ? 1300 : 1 + (b * 97) % 1300);
      o.k_lens.push_back(b % 13 == 6 ? 0 : b == 7 ? 1400 : 1 + (b * 131) % 1400);
    }
    add("dynamic_varlen_30_sequences_causal_bf16", v, o);
  }
  {
    // Block-sparse lists of unequal length (random, empty rows) over more
    // tiles than CTAs, no mask: fa3 takes them from the workspace counter too;
    // varlen tiles past a short sequence are skipped unpublished.
    ProblemDataOptions o;
    o.mask_density = 0.35;
    o.empty_block_rows = 0.1;
    Problem p = make(1100, 1300, 16, 4, 128, DType::bf16);
    p.block_sparse = BlockSparse{128, 128, 1, 16};
    p.return_lse = true;
    add("dynamic_144_tiles_block_sparse_d128_bf16", p, o);
    Problem v = make(600, 700, 8, 2, 128, DType::f16);
    v.layout = Layout::thd;
    v.batch = 12;
    v.block_sparse = BlockSparse{128, 128, 12, 1};
    for (int b = 0; b < 12; ++b) {
      o.q_lens.push_back(b % 5 == 2 ? 0 : b == 3 ? 600 : 1 + (b * 151) % 600);
      o.k_lens.push_back(b % 7 == 4 ? 0 : b == 3 ? 700 : 1 + (b * 173) % 700);
    }
    add("dynamic_block_sparse_varlen_12_sequences_f16", v, o);
  }
  {
    // Long d128 key rows on fa3's lazily rescaled 128-key tiles (which the
    // 176-key fa3wide family ran until 2026-12-07): key rows that end inside a
    // tile, GQA / MQA, every optional input, more tiles than CTAs, sequences
    // without queries or keys.
    Problem p = make(300, 1500, 8, 2, 128, DType::bf16);
    p.softcap = 30.0f;
    p.has_sinks = true;
    p.return_lse = true;
    add("long_keys_k1500_gqa4_softcap_sinks_lse_bf16", p);
    Problem q = make(600, 1201, 14, 1, 128, DType::bf16);
    q.batch = 2;
    add("long_keys_140_tiles_mqa_bf16", q);
    Problem r = make(333, 1999, 4, 2, 128, DType::f16);
    r.layout = Layout::thd;
    r.batch = 6;
    r.return_lse = true;
    ProblemDataOptions o;
    o.q_lens = {200, 0, 1, 333, 57, 90};
    o.k_lens = {1030, 0, 300, 1999, 0, 17};
    add("long_keys_varlen_empty_sequences_f16", r, o);
  }
  return c;
}

using GpuParam = BackendCase;

std::vector<GpuParam> gpu_params() {
  std::vector<GpuParam> out;
  for (const char* b : {"fa3", "fa2", "cuda_sdpa"})
    for (const ParityCase& c : gpu_cases()) out.push_back({b, c});
  return out;
}

class CudaKernels : public ::testing::TestWithParam<GpuParam> {};

TEST_P(CudaKernels, MatchesReference) {
  const GpuParam& param = GetParam();
  const Backend* backend = default_registry().find(param.backend);
  ASSERT_NE(backend, nullptr) << param.backend << " is not registered";
  const TestPlatform tp = test_platform_for(*backend);
  if (!tp.platform) GTEST_SKIP() << param.backend << ": " << tp.skip_reason;
  auto data = HostProblemData::create(param.c.problem, param.c.data);
  ASSERT_TRUE(data.ok()) << data.diagnostics().summary();
  const Problem& p = data->problem();
  ASSERT_TRUE(!p.paged_kv || backend->capabilities().paged_kv) << param.backend << " declares no paged KV caches";
  const Diagnostics refused = backend->check(p, *tp.platform);
  ASSERT_TRUE(refused.empty()) << "every case here is meant to run on " << param.backend << ": " << refused.summary();

  const Diagnostics ran = run_backend(*backend, *tp.platform, *data);
  ASSERT_TRUE(ran.ok()) << ran.summary();

  expect_matches_reference(*data);
}

INSTANTIATE_TEST_SUITE_P(Gpu, CudaKernels, ::testing::ValuesIn(gpu_params()),
                         [](const auto& info) { return info.param.backend + "_" + info.param.c.name; });

// Paged KV caches (shuffled block tables): fa3 copies whole pages into a key
// tile (16, 64 at d128's 128-key tiles; 16 at d256's 80) or whole tiles out of
// a page (256); prefill over a cached prefix (sq < sk, causal bottom-right),
// GQA, an empty cache, sinks + LSE, a window, decode. cuda_sdpa on the same.
std::vector<GpuParam> paged_params() {
  std::vector<ParityCase> c;
  auto add = [&](std::string name, Problem p, int page_size, std::vector<int> k_lens) {
    p.paged_kv = PagedKv{page_size};
    p.batch = static_cast<int>(k_lens.size());
    ProblemDataOptions o;
    o.seed = 7000 + c.size() * 17;
    o.k_lens = std::move(k_lens);
    c.push_back({std::move(name), p, o});
  };
  Problem prefill = make(200, 900, 8, 2, 128, DType::bf16, MaskKind::causal);
  prefill.return_lse = true;
  add("paged16_prefill_causal_gqa_lse_bf16", prefill, 16, {900, 333, 0});
  Problem sinks = make(130, 700, 4, 4, 128, DType::f16);
  sinks.has_sinks = true;
  add("paged64_sinks_f16", sinks, 64, {700, 129});
  Problem window = make(64, 1000, 4, 1, 128, DType::bf16, MaskKind::sliding_window);
  window.window = {100, 0};
  add("paged256_window_mqa_bf16", window, 256, {1000, 513});
  add("paged16_d256_causal_bf16", make(100, 500, 2, 2, 256, DType::bf16, MaskKind::causal), 16, {500, 77});
  add("paged32_d64_bf16", make(333, 777, 6, 3, 64, DType::bf16), 32, {777, 40, 391});
  add("paged16_decode_bf16", make(1, 5000, 8, 1, 128, DType::bf16), 16, {5000, 1, 2048});
  std::vector<GpuParam> out;
  for (const char* b : {"fa3", "cuda_sdpa"})
    for (const ParityCase& k : c) out.push_back({b, k});
  return out;
}
INSTANTIATE_TEST_SUITE_P(GpuPaged, CudaKernels, ::testing::ValuesIn(paged_params()),
                         [](const auto& info) { return info.param.backend + "_" + info.param.c.name; });

// fa3 reads pages whole per key tile or tiles whole per page: other page sizes
// are a coded reason in check() and plan() alike (no device needed).
TEST(CudaBackends, Fa3PageSizesFollowItsKeyTiles) {
  const Backend* fa3 = default_registry().find("fa3");
  ASSERT_TRUE(fa3->capabilities().paged_kv) << "fa3 declares no paged KV caches (cuda_backends.cpp kFa3PagedVerified)";
  Platform sm90;
  sm90.kind = PlatformKind::cuda;
  sm90.sm = 90;
  for (auto [dim, page, fits] : {std::tuple{128, 16, true}, {128, 64, true}, {128, 256, true}, {128, 48, false},
                                 {128, 12, false}, {256, 16, true}, {256, 32, false}, {256, 160, true},
                                 {64, 32, true}}) {
    Problem p = make(16, 512, 2, 2, dim, DType::bf16);
    p.paged_kv = PagedKv{page};
    const Diagnostics why = fa3->check(p, sm90);
    EXPECT_EQ(why.has_code("AK2119"), !fits) << "d" << dim << " page " << page << ": " << why.summary();
    if (fits) EXPECT_TRUE(why.empty()) << "d" << dim << " page " << page << ": " << why.summary();
  }
  // Head dims without a paged instance name the ones there are.
  Problem d192 = make(16, 512, 2, 2, 192, DType::bf16);
  d192.paged_kv = PagedKv{16};
  EXPECT_TRUE(fa3->check(d192, sm90).has_code("AK2105")) << fa3->check(d192, sm90).summary();
}

// The flash backends' capability lists come from the instance table: every
// table entry is a declared head dim, a pair the table lacks is a coded reason
// (the same one check() and plan() give), and the arch bounds are the
// instance arch's.
// fa3 hands out causal / window tiles and block-sparse tiles (mask or not)
// from a counter in the caller's workspace; dense unmasked calls and the
// other kernels need none (no device needed: a plan for a named platform has
// its workspace size).
TEST(CudaBackends, Fa3AsksForATileCounterUnderCausalAndWindowMasksAndBlockLists) {
  Platform sm90;
  sm90.kind = PlatformKind::cuda;
  sm90.sm = 90;
  Problem window = make(512, 512, 2, 2, 128, DType::bf16, MaskKind::sliding_window);
  window.window = {64, 0};
  Problem listed = make(512, 512, 2, 2, 128, DType::bf16);
  listed.block_sparse = BlockSparse{128, 128, 1, 1};
  Problem listed64 = listed;  // fa3bsk64
  listed64.block_sparse = BlockSparse{128, 64, 1, 1};
  Problem listed_q64 = listed;  // fa3bsq64
  listed_q64.block_sparse = BlockSparse{64, 64, 1, 1};
  for (auto [backend, p, wants] : {std::tuple{"fa3", make(512, 512, 2, 2, 128, DType::bf16, MaskKind::causal), true},
                                   {"fa3", window, true},
                                   {"fa3", listed, true},
                                   {"fa3", listed64, true},
                                   {"fa3", listed_q64, true},
                                   {"fa3", make(512, 512, 2, 2, 128, DType::bf16), false},
                                   {"fa3", make(2048, 2048, 2, 2, 128, DType::bf16), false},
                                   {"fa2", listed, false},
                                   {"fa2", make(512, 512, 2, 2, 128, DType::bf16, MaskKind::causal), false}}) {
    auto plan = default_registry().find(backend)->plan(p, sm90);
    ASSERT_TRUE(plan.ok()) << backend << ": " << plan.diagnostics().summary();
    EXPECT_EQ((*plan)->workspace_bytes() > 0, wants) << backend << " mask " << static_cast<int>(p.mask);
  }
}

// fa3 plans each call on the instance of the family its inputs need (dense,
// paged, block-sparse lists by block size) and dense d128 calls on one tile at
// every length and mask; check() judges the instance plan() runs (no device
// needed: plans for a named platform).
TEST(CudaBackends, Fa3PlansEachCallOnItsFamilysInstance) {
  const Backend* fa3 = default_registry().find("fa3");
  Platform sm90;
  sm90.kind = PlatformKind::cuda;
  sm90.sm = 90;
  auto instance = [&](const Problem& p) -> std::string {
    const Diagnostics why = fa3->check(p, sm90);
    if (!why.empty()) return "refused: " + why.summary();
    auto plan = fa3->plan(p, sm90);
    if (!plan.ok()) return "plan refused: " + plan.diagnostics().summary();
    const std::optional<CudaKernelInstance> i = cuda_planned_instance(*fa3, p);
    if (!i) return "no instance";
    return i->family + " " + std::to_string(i->block_m) + "x" + std::to_string(i->block_n);
  };
  const Problem full = make(2048, 2048, 4, 4, 128, DType::bf16);
  EXPECT_EQ(instance(full), "fa3 128x128");
  Problem f16 = make(16, 1024, 8, 2, 128, DType::f16);  // GQA, few queries, every optional input
  f16.softcap = 30.0f;
  f16.has_sinks = f16.return_lse = true;
  EXPECT_EQ(instance(f16), "fa3 128x128");
  Problem varlen = full;
  varlen.layout = Layout::thd;
  varlen.batch = 3;
  EXPECT_EQ(instance(varlen), "fa3 128x128");

  EXPECT_EQ(instance(make(2048, 1023, 4, 4, 128, DType::bf16)), "fa3 128x128");
  EXPECT_EQ(instance(make(512, 512, 4, 4, 128, DType::bf16)), "fa3 128x128");
  EXPECT_EQ(instance(make(2048, 2048, 4, 4, 128, DType::bf16, MaskKind::causal)), "fa3 128x128");
  Problem window = make(2048, 2048, 4, 4, 128, DType::bf16, MaskKind::sliding_window);
  window.window = {256, 0};
  EXPECT_EQ(instance(window), "fa3 128x128");
  Problem paged = full;
  paged.paged_kv = PagedKv{64};
  EXPECT_EQ(instance(paged), "fa3pg 128x128");
  Problem sparse = full;
  sparse.block_sparse = BlockSparse{128, 128, 1, 1};
  EXPECT_EQ(instance(sparse), "fa3bs 128x128");
  sparse.block_sparse = BlockSparse{128, 64, 1, 1};
  EXPECT_EQ(instance(sparse), "fa3bsk64 128x64");
  sparse.block_sparse = BlockSparse{64, 64, 1, 1};  // sol_attn's kept tiles, VSA's cubes
  EXPECT_EQ(instance(sparse), "fa3bsq64 64x64");
  sparse.block_sparse = BlockSparse{64, 128, 1, 1};  // two 64-key tiles a block
  EXPECT_EQ(instance(sparse), "fa3bsq64 64x64");
  sparse.block_sparse = BlockSparse{192, 64, 1, 1};  // three 64-row tiles a block (128-row tiles split it)
  EXPECT_EQ(instance(sparse), "fa3bsq64 64x64");
  sparse.block_sparse = BlockSparse{384, 384, 1, 1};  // STA's 6 x 8 x 8 tiles
  EXPECT_EQ(instance(sparse), "fa3bs192 128x192");
  sparse.block_sparse = BlockSparse{128, 256, 1, 1};
  EXPECT_EQ(instance(sparse), "fa3bs 128x128");
  EXPECT_EQ(instance(make(2048, 2048, 4, 4, 64, DType::bf16)), "fa3 192x128");
  EXPECT_EQ(instance(make(2048, 2048, 4, 4, 256, DType::bf16)), "fa3 128x80");
  EXPECT_EQ(instance(make(2048, 2048, 4, 4, 192, DType::bf16)), "fa3 128x96");
  // The GPU cases meant for d128's dense tile run there.
  for (const ParityCase& c : gpu_cases())
    if (c.name.rfind("long_keys_", 0) == 0 || c.name.rfind("persistent_", 0) == 0)
      if (c.problem.head_dim_qk == 128 && !c.problem.block_sparse && !c.problem.paged_kv)
        EXPECT_EQ(instance(c.problem), "fa3 128x128") << c.name;
}

TEST(CudaBackends, FlashCapabilitiesFollowTheInstanceTable) {
  for (const char* name : {"fa2", "fa3"}) {
    const Backend* b = default_registry().find(name);
    ASSERT_NE(b, nullptr);
    const auto& dims = b->capabilities().head_dims;
    int entries = 0;
    for (const CudaKernelInstance& i : cuda_kernel_instances()) {
      if (i.family != name) continue;
      ++entries;
      EXPECT_NE(std::find(dims.begin(), dims.end(), i.head_dim_qk), dims.end()) << name << " " << i.head_dim_qk;
      EXPECT_NE(std::find(dims.begin(), dims.end(), i.head_dim_v), dims.end()) << name << " " << i.head_dim_v;
    }
    EXPECT_GT(entries, 0) << name;
  }
  const Backend* fa2 = default_registry().find("fa2");
  const Backend* fa3 = default_registry().find("fa3");
  Problem p = make(64, 64, 2, 2, 80, DType::bf16);
  Platform sm80;
  sm80.kind = PlatformKind::cuda;
  sm80.sm = 80;
  EXPECT_TRUE(fa2->check(p, sm80).has_code("AK2105"));
  p.head_dim_qk = p.head_dim_v = 128;
  EXPECT_TRUE(fa2->check(p, sm80).empty()) << fa2->check(p, sm80).summary();
  EXPECT_TRUE(fa3->check(p, sm80).has_code("AK2102"));  // the sm_90 kernel on Ampere: names fa2
  sm80.sm = 75;
  EXPECT_TRUE(fa2->check(p, sm80).has_code("AK2102"));
  Platform sm90 = sm80;
  sm90.sm = 90;
  EXPECT_TRUE(fa3->check(p, sm90).empty()) << fa3->check(p, sm90).summary();
  // qk 192 / v 128 is an fa3 pair; 128 / 192 is not, and plan() says the same as check().
  p.head_dim_qk = 192;
  EXPECT_TRUE(fa3->check(p, sm90).empty()) << fa3->check(p, sm90).summary();
  EXPECT_TRUE(fa2->check(p, sm90).has_code("AK2106"));
  p.head_dim_qk = 128;
  p.head_dim_v = 192;
  const Diagnostics refused = fa3->check(p, sm90);
  EXPECT_TRUE(refused.has_code("AK2105")) << refused.summary();
  auto planned = fa3->plan(p, sm90);
  ASSERT_FALSE(planned.ok());
  EXPECT_TRUE(planned.diagnostics().has_code("AK2105")) << planned.diagnostics().summary();
  Platform sm100 = sm90;
  sm100.sm = 100;
  p.head_dim_v = 128;
  EXPECT_TRUE(fa3->check(p, sm100).has_code("AK2103"));  // not for Blackwell

  // Block-sparse lists run on the fa2bs / fa3bs instances: head dims of those,
  // blocks whole multiples of the instance's tiles (AK2117), check() == plan().
  Problem bs = make(512, 512, 2, 2, 128, DType::bf16);
  bs.block_sparse = BlockSparse{128, 128, 1, 1};
  EXPECT_TRUE(fa3->check(bs, sm90).empty()) << fa3->check(bs, sm90).summary();
  sm80.sm = 80;
  EXPECT_TRUE(fa2->check(bs, sm80).empty()) << fa2->check(bs, sm80).summary();
  bs.block_sparse = BlockSparse{384, 384, 1, 1};  // 6x8x8 video tiles: three key tiles a block
  EXPECT_TRUE(fa3->check(bs, sm90).empty()) << fa3->check(bs, sm90).summary();
  // 64-query blocks: fa3's 64 x 64 tiles (fa3bsq64); fa2's registered tiles are 128 rows.
  bs.block_sparse = BlockSparse{64, 64, 1, 1};
  EXPECT_TRUE(fa3->check(bs, sm90).empty()) << fa3->check(bs, sm90).summary();
  EXPECT_TRUE(fa2->check(bs, sm80).has_code("AK2117")) << fa2->check(bs, sm80).summary();
  // 32-query blocks split every fa3 tile.
  bs.block_sparse = BlockSparse{32, 64, 1, 1};
  EXPECT_TRUE(fa3->check(bs, sm90).has_code("AK2117")) << fa3->check(bs, sm90).summary();
  auto bs_plan = fa3->plan(bs, sm90);
  ASSERT_FALSE(bs_plan.ok());
  EXPECT_TRUE(bs_plan.diagnostics().has_code("AK2117"));
  bs.block_sparse = BlockSparse{128, 128, 1, 1};
  bs.head_dim_qk = bs.head_dim_v = 64;  // dense fa3 has d64; its block-sparse instances do not
  EXPECT_TRUE(fa3->check(bs, sm90).has_code("AK2105")) << fa3->check(bs, sm90).summary();
}

#if defined(ATTNKIT_HAS_CUDA)
// Device-resident block-sparse lists are not validated (the binding cannot
// read them): lists that decrease, point past nnz or hold indices out of range
// must give numbers, never an out-of-bounds access (gpu_check.sh runs this
// under compute-sanitizer memcheck).
TEST(CudaBackends, BadDeviceBlockListsStayInBounds) {
  for (const char* name : {"fa3", "fa2", "cuda_sdpa"}) {
    const Backend* backend = default_registry().find(name);
    ASSERT_NE(backend, nullptr);
    const TestPlatform tp = test_platform_for(*backend);
    if (!tp.platform) GTEST_SKIP() << name << ": " << tp.skip_reason;
    Problem p = make(600, 700, 2, 1, 128, DType::bf16);
    p.block_sparse = BlockSparse{128, 128, 1, 1};
    auto data = HostProblemData::create(p, {});
    ASSERT_TRUE(data.ok()) << data.diagnostics().summary();
    auto plan = backend->plan(p, *tp.platform);
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.diagnostics().summary();
    // 5 query blocks: offsets [6], indices [7], every kind of wrong.
    const std::vector<std::int32_t> offsets = {0, 5, 2, 1000, -4, 7};
    const std::vector<std::int32_t> indices = {3, 1, -9, 1 << 29, 2, 6, 0};
    AttentionTensors host = data->tensors();
    host.block_offsets.data = const_cast<std::int32_t*>(offsets.data());
    host.block_offsets.shape[0] = static_cast<std::int64_t>(offsets.size());
    host.block_indices.data = const_cast<std::int32_t*>(indices.data());
    host.block_indices.shape[0] = static_cast<std::int64_t>(indices.size());
    const DeviceBinding dev(host);
    ASSERT_EQ(dev.buffers.size(), 6u) << name << ": q, k, v, out and the two lists on the device";
    DeviceWorkspace ws((*plan)->workspace_bytes());
    const Diagnostics ran = (*plan)->run(dev.t, ws.span(), nullptr);
    EXPECT_TRUE(ran.ok()) << name << ": " << ran.summary();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name;
  }
}

// The token-row gather (raster latents <-> contiguous tiles): dst row i of
// every sequence is src row index[i], for 16-byte rows and for odd ones, and
// an index outside the source is skipped instead of read.
TEST(CudaGatherRows, GathersRowsByIndex) {
  if (!detect_cuda_platform()) GTEST_SKIP() << "no CUDA device on this machine";
  for (int dim : {128, 3}) {
    const int batch = 2, rows = 37, heads = 3;
    const std::int64_t n = static_cast<std::int64_t>(batch) * rows * heads * dim;
    std::vector<std::uint16_t> src(n), dst(n, 0xffff);
    for (std::int64_t i = 0; i < n; ++i) src[i] = static_cast<std::uint16_t>(i * 7 + 1);
    std::vector<std::int32_t> index(rows);
    for (int r = 0; r < rows; ++r) index[r] = (r * 11) % rows;
    index[5] = rows + 4;  // out of range: dst row 5 stays as it was
    void *d_src = nullptr, *d_dst = nullptr, *d_index = nullptr;
    ASSERT_EQ(cudaMalloc(&d_src, n * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_dst, n * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_index, rows * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_src, src.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_dst, dst.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_index, index.data(), rows * 4, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::GatherRows g;
    g.src = d_src;
    g.dst = d_dst;
    g.index = static_cast<const std::int32_t*>(d_index);
    g.rows = g.src_rows = rows;
    g.batch = batch;
    g.heads = heads;
    g.dim = dim;
    g.elem_bytes = 2;
    const std::int64_t strides[3] = {static_cast<std::int64_t>(rows) * heads * dim, heads * dim, dim};  // BSHD
    for (int i = 0; i < 3; ++i) g.src_strides[i] = g.dst_strides[i] = strides[i];
    ASSERT_TRUE(cuda::gather_rows(g, nullptr).ok());
    ASSERT_EQ(cudaMemcpy(dst.data(), d_dst, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    int wrong = 0;
    for (int b = 0; b < batch; ++b)
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h)
          for (int e = 0; e < dim; ++e) {
            const std::int64_t d = b * strides[0] + r * strides[1] + h * strides[2] + e;
            const std::uint16_t want =
                r == 5 ? 0xffff : src[b * strides[0] + index[r] * strides[1] + h * strides[2] + e];
            wrong += dst[d] != want;
          }
    EXPECT_EQ(wrong, 0) << "dim " << dim;
    cudaFree(d_src);
    cudaFree(d_dst);
    cudaFree(d_index);
  }
}

// Every CUDA return code becomes AK6001 naming the call and the CUDA error;
// success is silent. Needs no GPU: the error strings come from the runtime.
TEST(CudaDeviceLayer, FailedCallsBecomeCatalogedDiagnostics) {
  EXPECT_TRUE(cuda::check_cuda(cudaSuccess, "cudaMemcpy").empty());
  const Diagnostics d = cuda::check_cuda(cudaErrorInvalidValue, "cudaMemcpy(q)");
  ASSERT_TRUE(d.has_code("AK6001"));
  EXPECT_NE(d.items()[0].message.find("cudaMemcpy(q)"), std::string::npos) << d.summary();
  EXPECT_NE(d.items()[0].message.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << d.summary();
}

// Plan::run allocates nothing and only enqueues: a CUDA graph captures it, and
// the replays write the same bytes as a direct run. The causal shape has more
// tiles than an H200 has SMs, so fa3 runs its dynamic scheduler: the counter
// in a poisoned workspace is reset by the launch (its memset is captured too),
// and a workspace smaller than the plan asks for is refused (AK1110).
// One backend per case, so that sharded sanitizer runs split them (racecheck
// took 459 s over the three in one test, 2026-12-02).
class CudaBackendsCapture : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaBackendsCapture, RunIsGraphCapturable) {
  const char* name = GetParam();
  const Backend* backend = default_registry().find(name);
  ASSERT_NE(backend, nullptr);
  const TestPlatform tp = test_platform_for(*backend);
  if (!tp.platform) GTEST_SKIP() << name << ": " << tp.skip_reason;
  Problem p = make(2200, 2200, 8, 2, 128, DType::bf16, MaskKind::causal);
  auto data = HostProblemData::create(p, {});
  ASSERT_TRUE(data.ok());
  auto plan = backend->plan(p, *tp.platform);
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
  const DeviceBinding binding(data->tensors());
  ASSERT_EQ(binding.buffers.size(), 4u) << name << ": q, k, v and out on the device";
  const AttentionTensors& dev = binding.t;
  const auto bytes = static_cast<std::size_t>(dev.out.span_bytes());
  const std::size_t ws_bytes = (*plan)->workspace_bytes();
  if (std::string(name) == "fa3") EXPECT_GT(ws_bytes, 0u) << "fa3's causal plans ask for the tile counter";
  DeviceWorkspace ws(ws_bytes);
  if (ws_bytes > 0) {
    ASSERT_NE(ws.data, nullptr);
    ASSERT_EQ(cudaMemset(ws.data, 0xff, ws_bytes), cudaSuccess);
    EXPECT_TRUE((*plan)->run(dev, {static_cast<std::byte*>(ws.data), ws_bytes - 1}, nullptr).has_code("AK1110"));
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_TRUE((*plan)->run(dev, ws.span(), stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<unsigned char> direct(bytes), replay(bytes);
  ASSERT_EQ(cudaMemcpy(direct.data(), dev.out.data, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  std::memcpy(data->tensors().out.data, direct.data(), bytes);
  expect_matches_reference(*data);

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Diagnostics captured = (*plan)->run(dev, ws.span(), stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.summary();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replays = 0; replays < 2; ++replays) {  // the second replay finds the counter the first left
    ASSERT_EQ(cudaMemset(dev.out.data, 0xff, bytes), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(replay.data(), dev.out.data, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(direct.data(), replay.data(), bytes), 0) << name << ": graph replay " << replays << " differs";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Backends, CudaBackendsCapture, ::testing::Values("fa3", "fa2", "cuda_sdpa"),
                         [](const auto& info) { return std::string(info.param); });

// ---- device metadata that lies (issue 20; params.hpp, lying_metadata.hpp).
// Device-resident cu_seqlens / seqlens_k / block tables are not read on the
// host. The kernels clamp every address into the tensors (memcheck stays
// clean: gpu_check.sh runs CudaLyingMetadata.* under compute-sanitizer) and
// answer loudly: sequence metadata that breaks the host's rules (AK1108 /
// AK1111) makes the whole call's O and LSE NaN; a block-table entry outside
// the cache makes the tiles that read it NaN (cudnn: the whole sequence that
// reads it, through its aux kernels), the other rows stay correct. cudnn runs
// every case too where cuDNN loads.

// One run of `backend`, planned for `planned` (which may lie about lengths),
// on `data`'s inputs with the index tensors replaced by `lies` (empty vectors
// keep data's), all copied to the device; out and LSE are zeroed first, so a
// NaN is one the kernel wrote. Returns out (as double) and LSE on the host.
struct LyingIndices {
  std::vector<std::int32_t> cu_q, cu_k, seqlens_k, block_table;
};
struct LyingOutputs {
  std::vector<double> out;  // out's elements in storage order (empty: the backend declared it cannot run the case)
  std::vector<float> lse;
};
void run_lying(const Backend& backend, const Platform& platform, const HostProblemData& data, const Problem& planned,
               LyingIndices lies, LyingOutputs& got) {
  AttentionTensors host = data.tensors();
  auto replace = [](TensorView& v, std::vector<std::int32_t>& values) {
    if (values.empty()) return;
    ASSERT_EQ(static_cast<std::int64_t>(values.size()), v.numel());
    v.data = values.data();
  };
  replace(host.cu_seqlens_q, lies.cu_q);
  replace(host.cu_seqlens_k, lies.cu_k);
  replace(host.seqlens_k, lies.seqlens_k);
  replace(host.block_table, lies.block_table);
  got = {};
  if (const Diagnostics refused = backend.check(planned, platform); !refused.empty()) {
    // Declared: the case is not this backend's (as the parity harness skips it); said, not failed.
    std::printf("%s declares it cannot run %s: %s\n", std::string(backend.name()).c_str(), planned.summary().c_str(),
                refused.summary().c_str());
    return;
  }
  auto plan = backend.plan(planned, platform);
  ASSERT_TRUE(plan.ok()) << backend.name() << ": " << plan.diagnostics().summary();
  const DeviceBinding dev(host);
  ASSERT_EQ(cudaMemset(dev.t.out.data, 0, dev.t.out.span_bytes()), cudaSuccess);
  if (planned.return_lse) ASSERT_EQ(cudaMemset(dev.t.lse.data, 0, dev.t.lse.span_bytes()), cudaSuccess);
  DeviceWorkspace ws((*plan)->workspace_bytes());
  const Diagnostics ran = (*plan)->run(dev.t, ws.span(), nullptr);
  ASSERT_TRUE(ran.ok()) << backend.name() << ": " << ran.summary();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << backend.name();
  const std::vector<std::byte> out = dev.out();
  got.out.resize(static_cast<std::size_t>(dev.t.out.numel()));
  for (std::size_t i = 0; i < got.out.size(); ++i) got.out[i] = load_as_double(out.data(), dev.t.out.dtype, i);
  got.lse.assign(planned.return_lse ? static_cast<std::size_t>(dev.t.lse.numel()) : 0, 0.0f);
  if (planned.return_lse)
    ASSERT_EQ(cudaMemcpy(got.lse.data(), dev.t.lse.data, got.lse.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
}

// Every element of out and LSE is NaN (the call's whole output).
void expect_all_nan(const LyingOutputs& got, const std::string& what) {
  std::size_t finite = 0;
  for (double x : got.out) finite += !std::isnan(x);
  for (float x : got.lse) finite += !std::isnan(x);
  EXPECT_EQ(finite, 0u) << what << ": a call whose device metadata lies must be NaN everywhere";
}

// The fp64 reference of `data` (honest metadata).
struct Reference {
  HostTensor out, lse;
};
Reference reference_of(const HostProblemData& data) {
  Problem p = data.problem();
  p.out_dtype_override = DType::f64;
  Reference r{data.make_output(DType::f64), p.return_lse ? data.make_lse() : HostTensor()};
  const Diagnostics ran = reference_attention(p, data.tensors_with_outputs(r.out.view(), r.lse.view()));
  EXPECT_TRUE(ran.ok()) << ran.summary();
  return r;
}

// Output row `row` of sequence b (BSHD: row of batch b) for every head: NaN
// count, and the squared error / norm against the reference.
struct RowCheck {
  int nan = 0, elements = 0;
  double err2 = 0, ref2 = 0;
  int lse_nan = 0;
};
void check_row(const HostProblemData& data, const LyingOutputs& got, const Reference& ref, int b, std::int64_t row,
               RowCheck& c) {
  const Problem& p = data.problem();
  const TensorView& out = data.tensors().out;
  for (int h = 0; h < p.heads_q; ++h) {
    const HeadRows o = head_rows(p.layout, out.strides.data(), b, h, 0);
    for (int d = 0; d < p.head_dim_v; ++d) {
      const std::int64_t at = o.offset + row * o.row_stride + d;
      const double g = got.out[at], want = load_as_double(ref.out.view().data, DType::f64, at);
      ++c.elements;
      if (std::isnan(g)) ++c.nan;
      else c.err2 += (g - want) * (g - want);
      c.ref2 += want * want;
    }
    if (p.return_lse) {
      const TensorView& lse = data.tensors().lse;
      const std::int64_t at = p.layout == Layout::thd ? h * lse.strides[0] + row * lse.strides[1]
                                                      : b * lse.strides[0] + h * lse.strides[1] + row * lse.strides[2];
      c.lse_nan += std::isnan(got.lse[at]);
    }
  }
}

Problem lying_varlen(DType t) {
  Problem p = make(300, 300, 4, 2, 128, t);
  p.layout = Layout::thd;
  p.batch = 3;
  p.return_lse = true;
  return p;
}
const ProblemDataOptions kLyingVarlenData{.seed = 20, .q_lens = {100, 300, 50}, .k_lens = {120, 300, 60}};

// cu_seqlens_q / cu_seqlens_k that lie, planned (or not) with a max_seqlen_q
// smaller than a sequence: NaN everywhere on fa2, fa3, cuda_sdpa and cudnn.
void run_lying_varlen(const char* case_name, auto make_lie) {
  std::string skipped;
  for (const char* name : {"fa3", "fa2", "cuda_sdpa", "cudnn"}) {
    const Backend* backend = default_registry().find(name);
    ASSERT_NE(backend, nullptr);
    const TestPlatform tp = test_platform_for(*backend);
    if (!tp.platform) {
      skipped += std::string(name) + ": " + tp.skip_reason + "; ";
      continue;
    }
    auto data = HostProblemData::create(lying_varlen(DType::bf16), kLyingVarlenData);
    ASSERT_TRUE(data.ok()) << data.diagnostics().summary();
    Problem planned = data->problem();
    LyingIndices lies;
    make_lie(planned, lies, data->total_q());
    LyingOutputs got;
    run_lying(*backend, *tp.platform, *data, planned, lies, got);
    expect_all_nan(got, std::string(name) + " " + case_name);
  }
  if (skipped.size() > 0) std::printf("%s skipped %s\n", case_name, skipped.c_str());
  if (skipped.find("cuda_sdpa:") != std::string::npos) GTEST_SKIP() << skipped;
}

TEST(CudaLyingMetadata, MaxSeqlenQShorterThanASequence) {
  // Sequence 1 has 300 rows; the launch covers 128 per sequence: rows 128..299
  // would stay unwritten (a prefill's last-token logits among them).
  run_lying_varlen("max_seqlen_q 128 < 300", [](Problem& p, LyingIndices&, std::int64_t) { p.seqlen_q = 128; });
}

TEST(CudaLyingMetadata, MaxSeqlenKShorterThanASequence) {
  run_lying_varlen("max_seqlen_k 200 < 300", [](Problem& p, LyingIndices&, std::int64_t) { p.seqlen_k = 200; });
}

TEST(CudaLyingMetadata, CuSeqlensPastThePackedRows) {
  run_lying_varlen("cu_seqlens_q past the rows", [](Problem&, LyingIndices& l, std::int64_t rows) {
    l.cu_q = {0, 100, 400, static_cast<std::int32_t>(rows) + 64};
  });
  run_lying_varlen("cu_seqlens_k far past the rows", [](Problem&, LyingIndices& l, std::int64_t) {
    l.cu_k = {0, 120, 420, 1 << 30};
  });
  run_lying_varlen("cu_seqlens_q negative", [](Problem&, LyingIndices& l, std::int64_t) {
    l.cu_q = {0, -1000000, 400, 450};
  });
}

TEST(CudaLyingMetadata, DecreasingCuSeqlens) {
  // Sequences 0 and 2 would both claim rows 60..99.
  run_lying_varlen("cu_seqlens_q decreasing", [](Problem&, LyingIndices& l, std::int64_t) { l.cu_q = {0, 100, 60, 450}; });
  run_lying_varlen("cu_seqlens_k decreasing", [](Problem&, LyingIndices& l, std::int64_t) { l.cu_k = {0, 420, 120, 480}; });
}

Problem lying_paged() {
  Problem p = make(200, 500, 4, 2, 128, DType::bf16);
  p.paged_kv = PagedKv{16};
  p.batch = 3;
  p.return_lse = true;
  return p;
}
const ProblemDataOptions kLyingPagedData{.seed = 21, .k_lens = {500, 300, 77}};

// `body(name, backend, platform, data)` for each backend with paged caches
// (fa3, cuda_sdpa, cudnn) on the lying_paged() case; the test skips without a GPU.
void for_each_paged_backend(
    const std::function<void(const char*, const Backend&, const Platform&, HostProblemData&)>& body) {
  for (const char* name : {"fa3", "cuda_sdpa", "cudnn"}) {
    const Backend* backend = default_registry().find(name);
    ASSERT_NE(backend, nullptr);
    const TestPlatform tp = test_platform_for(*backend);
    if (!tp.platform) {
      if (std::string(name) == "cuda_sdpa") GTEST_SKIP() << name << ": " << tp.skip_reason;  // no GPU at all
      std::printf("%s skipped: %s\n", name, tp.skip_reason.c_str());
      continue;
    }
    auto data = HostProblemData::create(lying_paged(), kLyingPagedData);
    ASSERT_TRUE(data.ok()) << data.diagnostics().summary();
    body(name, *backend, *tp.platform, *data);
  }
}

TEST(CudaLyingMetadata, CacheSeqlensPastTheBlockTable) {
  for_each_paged_backend([](const char* name, const Backend& backend, const Platform& platform, HostProblemData& data) {
    const std::int64_t capacity = data.tensors().block_table.shape[1] * 16;  // 32 columns x 16
    for (std::int32_t lie : {static_cast<std::int32_t>(capacity) + 100, 1 << 30, -5, 501}) {
      LyingOutputs got;
      run_lying(backend, platform, data, data.problem(), {.seqlens_k = {500, lie, 77}}, got);
      expect_all_nan(got, std::string(name) + " cache_seqlens[1] = " + std::to_string(lie));
    }
  });
}

// Sequence 1's first two block-table entries outside the cache: every tile of
// sequence 1 reads them (no mask), so its rows are NaN (O and LSE); sequences
// 0 and 2 read only their own pages and match the reference.
TEST(CudaLyingMetadata, BlockTableEntriesOutsideTheCache) {
  for_each_paged_backend([](const char* name, const Backend& backend, const Platform& platform, HostProblemData& data) {
    const TensorView& bt = data.tensors().block_table;
    const std::int64_t cols = bt.shape[1], pages = data.tensors().k.shape[0];
    for (const auto& [first, second] : {std::pair<std::int64_t, std::int64_t>{pages + 7, -3}, {1 << 30, pages}}) {
      std::vector<std::int32_t> table(static_cast<std::size_t>(bt.numel()));
      std::copy_n(bt.ptr<const std::int32_t>(), table.size(), table.begin());
      table[cols + 0] = static_cast<std::int32_t>(first);
      table[cols + 1] = static_cast<std::int32_t>(second);
      LyingOutputs got;
      run_lying(backend, platform, data, data.problem(), {.block_table = table}, got);
      if (got.out.empty()) continue;  // declared it cannot run the case (printed)
      const Reference ref = reference_of(data);
      for (int b = 0; b < 3; ++b) {
        RowCheck c;
        for (int i = 0; i < data.problem().seqlen_q; ++i) check_row(data, got, ref, b, i, c);
        if (b == 1) {
          EXPECT_EQ(c.nan, c.elements) << name << ": sequence 1 read pages outside the cache";
          EXPECT_EQ(c.lse_nan, data.problem().seqlen_q * data.problem().heads_q) << name << ": its LSE too";
        } else {
          EXPECT_EQ(c.nan, 0) << name << ": sequence " << b << " reads only its own pages";
          EXPECT_EQ(c.lse_nan, 0) << name << ": sequence " << b;
          EXPECT_LE(std::sqrt(c.err2 / c.ref2), rel_l2_bound(DType::bf16)) << name << ": sequence " << b;
        }
      }
    }
  });
}

// The honest calls of the cases above still match the reference (the checks
// add no false alarm): varlen on the four backends, paged on those with paged caches.
TEST(CudaLyingMetadata, HonestCallsOfTheseCasesMatchTheReference) {
  for (const char* name : {"fa3", "fa2", "cuda_sdpa", "cudnn"}) {
    const Backend* backend = default_registry().find(name);
    ASSERT_NE(backend, nullptr);
    const TestPlatform tp = test_platform_for(*backend);
    if (!tp.platform) {
      if (std::string(name) == "cuda_sdpa") GTEST_SKIP() << name << ": " << tp.skip_reason;
      continue;
    }
    for (bool paged : {false, true}) {
      if (paged && !backend->capabilities().paged_kv) continue;
      auto data = paged ? HostProblemData::create(lying_paged(), kLyingPagedData)
                        : HostProblemData::create(lying_varlen(DType::bf16), kLyingVarlenData);
      ASSERT_TRUE(data.ok());
      if (const Diagnostics refused = backend->check(data->problem(), *tp.platform); !refused.empty()) {
        std::printf("%s declares it cannot run %s: %s\n", name, data->problem().summary().c_str(),
                    refused.summary().c_str());
        continue;
      }
      const Diagnostics ran = run_backend(*backend, *tp.platform, *data);
      ASSERT_TRUE(ran.ok()) << name << ": " << ran.summary();
      expect_matches_reference(*data);
    }
  }
}
#endif

}  // namespace
}  // namespace attnkit::testing
