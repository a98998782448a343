// hybrid_window_attn_h3 on the CPU: the plan against an fp64 oracle of
// docs/sparse.md (window softmax + gate * linear attention with elu + 1
// features) for full, causal and explicit windows, zero gates as plain window
// softmax, and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/backends/sparse.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "backends/sparse/hybrid_window_plans.hpp"
#include "hybrid_window_oracle.hpp"
#include "sparse_test_util.hpp"

namespace attnkit::sparse {
namespace {

// 300 tokens, 2 sequences, 4 query heads over 2 kv heads, d64.
Problem hybrid_problem(MaskKind mask, Layout layout = Layout::bshd, DType dtype = DType::f32) {
  Problem p = testing::make_test_problem(300, 300, 4, 2, 64, dtype, mask);
  p.batch = 2;
  p.layout = layout;
  p.has_gate = true;
  if (mask == MaskKind::sliding_window) p.window = {40, 7};
  return p;
}

testing::SparseRun run_hybrid(const Problem& p, const select::BackendConfig& c, const AttentionTensors& t) {
  return testing::run_on_cpu(*make_hybrid_window_backend(), p, c, {}, t);
}

TEST(HybridWindow, MatchesAnFp64Oracle) {
  struct Case {
    MaskKind mask;
    Layout layout;
    Window window;  // what the oracle uses
    bool causal_linear;
  };
  // window_size=24,24 from the config; a causal call keeps (24, 0); a sliding-window call its own (40, 7).
  const Case cases[] = {{MaskKind::none, Layout::bshd, {24, 24}, false},
                        {MaskKind::none, Layout::bhsd, {24, 24}, false},
                        {MaskKind::causal, Layout::bshd, {24, 0}, true},
                        {MaskKind::sliding_window, Layout::bshd, {40, 7}, false},
                        {MaskKind::sliding_window, Layout::bhsd, {40, 0}, true}};
  for (const Case& c : cases) {
    Problem p = hybrid_problem(c.mask, c.layout);
    if (c.mask == MaskKind::sliding_window) p.window = c.window;
    auto data = HostProblemData::create(p, {.seed = 3});
    ASSERT_TRUE(data.ok());
    const testing::SparseRun r = run_hybrid(p, {{"window_size", std::string("24,24")}}, data->tensors());
    ASSERT_TRUE(r.ran.ok()) << r.ran.summary();
    EXPECT_LT(testing::rel_l2(testing::bshd_doubles(p, data->tensors().out), testing::hybrid_window_oracle(p, data->tensors(), c.window, c.causal_linear)),
              1e-5)
        << mask_kind_name(c.mask) << " " << layout_name(c.layout);
  }
}

TEST(HybridWindow, Bf16MatchesTheOracle) {
  const Problem p = hybrid_problem(MaskKind::causal, Layout::bshd, DType::bf16);
  auto data = HostProblemData::create(p, {.seed = 4});
  ASSERT_TRUE(data.ok());
  ASSERT_TRUE(run_hybrid(p, {}, data->tensors()).ran.ok());  // default window 512: every earlier key
  EXPECT_LT(testing::rel_l2(testing::bshd_doubles(p, data->tensors().out), testing::hybrid_window_oracle(p, data->tensors(), {512, 0}, true)), 1e-2);
}

TEST(HybridWindow, ZeroGatesAreWindowSoftmax) {
  Problem p = hybrid_problem(MaskKind::none);
  auto data = HostProblemData::create(p, {.seed = 5});
  ASSERT_TRUE(data.ok());
  std::memset(data->tensors().gate.data, 0, data->tensors().gate.numel() * sizeof(float));
  ASSERT_TRUE(run_hybrid(p, {{"window_size", std::string("30,10")}}, data->tensors()).ran.ok());
  Problem w = p;
  w.has_gate = false;
  w.mask = MaskKind::sliding_window;
  w.window = {30, 10};
  auto flash = make_cpu_flash_backend()->plan(w, detect_cpu_platform());
  ASSERT_TRUE(flash.ok()) << flash.diagnostics().summary();
  HostTensor out = data->make_output(p.out_dtype());
  std::vector<std::byte> ws((*flash)->workspace_bytes());
  ASSERT_TRUE((*flash)->run(data->tensors_with_outputs(out.view(), {}), ws, nullptr).ok());
  EXPECT_EQ(testing::bshd_doubles(p, data->tensors().out), testing::bshd_doubles(p, out.view()));
}

// The CUDA path's kernels exist on named sm_90 / sm_80 platforms for the
// calls its GPU tests run (fa3 / fa2 under a sliding window, d64 / d128);
// other head dims are AK2105 there, in `check` as in the plan.
TEST(HybridWindow, CudaPathKernelsExistForItsShapes) {
  for (const char* name : {"cuda:sm90", "cuda:sm80"}) {
    auto gpu = parse_platform(name);
    ASSERT_TRUE(gpu.ok());
    for (MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::sliding_window})
      for (DType dtype : {DType::bf16, DType::f16})
        for (int dim : {64, 128}) {
          Problem p = hybrid_problem(mask, Layout::bshd, dtype);
          p.head_dim_qk = p.head_dim_v = dim;
          const Diagnostics why = hybrid_window_cuda_kernel_refusals(p, *gpu, {});
          EXPECT_TRUE(why.ok()) << name << " " << mask_kind_name(mask) << " d" << dim << ": " << why.summary();
        }
    Problem p = hybrid_problem(MaskKind::none, Layout::bshd, DType::bf16);
    p.head_dim_qk = p.head_dim_v = 96;
    EXPECT_TRUE(hybrid_window_cuda_kernel_refusals(p, *gpu, {}).has_code("AK2105")) << name;
    EXPECT_TRUE(make_hybrid_window_backend()->check(p, *gpu).has_code("AK2105")) << name;
    EXPECT_TRUE(make_hybrid_window_backend()->plan(p, *gpu).diagnostics().has_code("AK2105")) << name;
  }
}

// The linear branch's kernels size their shared memory by head dim and mask:
// the causal d128 one (134 KB) does not fit the 99 KB a CTA gets on sm_86 /
// 89 / 120, which is AK2102 at check time, not a failed launch; the full d128
// and every d64 one fit there, and everything fits sm_80 and sm_90. Without a
// gate the branch does not run, so nothing is refused.
TEST(HybridWindow, LinearBranchSharedMemoryFitsTheGpu) {
  for (const char* name : {"cuda:sm86", "cuda:sm89", "cuda:sm120", "cuda:sm80", "cuda:sm90"}) {
    auto gpu = parse_platform(name);
    ASSERT_TRUE(gpu.ok());
    const bool small = gpu->sm != 80 && gpu->sm != 90;
    for (MaskKind mask : {MaskKind::none, MaskKind::causal})
      for (int dim : {64, 128})
        for (bool gated : {true, false}) {
          Problem p = hybrid_problem(mask, Layout::bshd, DType::bf16);
          p.head_dim_qk = p.head_dim_v = dim;
          p.has_gate = gated;
          const bool refused = small && gated && mask == MaskKind::causal && dim == 128;
          EXPECT_EQ(hybrid_window_cuda_kernel_refusals(p, *gpu, {}).has_code("AK2102"), refused)
              << name << " " << mask_kind_name(mask) << " d" << dim << (gated ? " gated" : "");
        }
  }
}

TEST(HybridWindow, Refusals) {
  const Platform cpu = detect_cpu_platform();
  Problem p = hybrid_problem(MaskKind::none);
  p.seqlen_q = 100;
  EXPECT_TRUE(make_hybrid_window_backend()->plan(p, cpu).diagnostics().has_code("AK2116"));
  EXPECT_TRUE(make_hybrid_window_backend()->check_configured(p, cpu, {}).has_code("AK2116"));
  EXPECT_TRUE(make_hybrid_window_backend()->check_configured(hybrid_problem(MaskKind::none), cpu, {}).ok());
  p = hybrid_problem(MaskKind::custom);
  EXPECT_TRUE(make_hybrid_window_backend()->check(p, cpu).has_code("AK2107"));
  const Diagnostics one_side = run_hybrid(hybrid_problem(MaskKind::none), {{"window_size", std::string("4")}}, {}).ran;
  EXPECT_TRUE(one_side.has_code("AK3102") || one_side.has_code("AK3103")) << one_side.summary();  // two sides
  EXPECT_TRUE(run_hybrid(hybrid_problem(MaskKind::none), {{"window_size", std::string("4,-2")}}, {}).ran.has_code("AK3103"));
  EXPECT_TRUE(make_cpu_flash_backend()->check(hybrid_problem(MaskKind::none), cpu).has_code("AK2109"));
  auto data = HostProblemData::create(hybrid_problem(MaskKind::none));
  ASSERT_TRUE(data.ok());
  AttentionTensors t = data->tensors();
  t.gate = {};
  EXPECT_TRUE(run_hybrid(hybrid_problem(MaskKind::none), {}, t).ran.has_code("AK1101"));
}

}  // namespace
}  // namespace attnkit::sparse
