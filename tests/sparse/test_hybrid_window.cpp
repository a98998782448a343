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

// out[i] = softmax over the keys j of i's window + gate[i] * phi(q_i).S / phi(q_i).z, in fp64,
// straight from the definition (no running sums): window (left, right) around i.
std::vector<double> oracle(const Problem& p, const AttentionTensors& t, Window w, bool causal_linear) {
  const int S = p.seqlen_q, d = p.head_dim_qk, dv = p.head_dim_v;
  auto at = [&](const TensorView& x, int b, int h, int s, int c) {
    const HeadRows r = head_rows(p.layout, x.strides.data(), b, h, 0);
    return load_as_double(x.data, x.dtype, r.offset + s * r.row_stride + c);
  };
  auto phi = [](double x) { return x > 0 ? x + 1 : std::exp(x); };
  std::vector<double> out(static_cast<std::size_t>(p.batch) * S * p.heads_q * dv);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const int hk = h / p.gqa_ratio();
      for (int i = 0; i < S; ++i) {
        const int lo = w.left < 0 ? 0 : std::max(0, i - w.left), hi = w.right < 0 ? S - 1 : std::min(S - 1, i + w.right);
        std::vector<double> s(S, 0.0);
        double m = -INFINITY, den = 0;
        for (int j = lo; j <= hi; ++j) {
          for (int c = 0; c < d; ++c) s[j] += p.softmax_scale() * at(t.q, b, h, i, c) * at(t.k, b, hk, j, c);
          m = std::max(m, s[j]);
        }
        for (int j = lo; j <= hi; ++j) den += std::exp(s[j] - m);
        const int last = causal_linear ? i : S - 1;
        double lin_den = 0;
        std::vector<double> fq(d);
        for (int c = 0; c < d; ++c) fq[c] = phi(at(t.q, b, h, i, c));
        std::vector<double> kw(last + 1);  // phi(q_i) . phi(k_j)
        for (int j = 0; j <= last; ++j) {
          kw[j] = 0;
          for (int c = 0; c < d; ++c) kw[j] += fq[c] * phi(at(t.k, b, hk, j, c));
          lin_den += kw[j];
        }
        const double g = load_as_double(t.gate.data, DType::f32, gate_offset(p.layout, t.gate.strides.data(), b, h, i, 0));
        for (int e = 0; e < dv; ++e) {
          double soft = 0, lin = 0;
          for (int j = lo; j <= hi; ++j) soft += std::exp(s[j] - m) / den * at(t.v, b, hk, j, e);
          for (int j = 0; j <= last; ++j) lin += kw[j] * at(t.v, b, hk, j, e);
          out[((static_cast<std::size_t>(b) * S + i) * p.heads_q + h) * dv + e] = soft + g * lin / lin_den;
        }
      }
    }
  return out;
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
    EXPECT_LT(testing::rel_l2(testing::bshd_doubles(p, data->tensors().out), oracle(p, data->tensors(), c.window, c.causal_linear)),
              1e-5)
        << mask_kind_name(c.mask) << " " << layout_name(c.layout);
  }
}

TEST(HybridWindow, Bf16MatchesTheOracle) {
  const Problem p = hybrid_problem(MaskKind::causal, Layout::bshd, DType::bf16);
  auto data = HostProblemData::create(p, {.seed = 4});
  ASSERT_TRUE(data.ok());
  ASSERT_TRUE(run_hybrid(p, {}, data->tensors()).ran.ok());  // default window 512: every earlier key
  EXPECT_LT(testing::rel_l2(testing::bshd_doubles(p, data->tensors().out), oracle(p, data->tensors(), {512, 0}, true)), 1e-2);
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
