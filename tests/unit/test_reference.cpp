// The oracle checked against hand-computed cases and against itself under
// re-layouts (paged == contiguous, varlen == per-sequence, bhsd == bshd).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attnkit/backends/reference.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/core/host_tensor.hpp"

namespace attnkit {
namespace {

Problem tiny(int sq, int sk, int d = 4) {
  Problem p;
  p.batch = 1;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.heads_q = p.heads_kv = 1;
  p.head_dim_qk = p.head_dim_v = d;
  p.dtype = DType::f32;
  p.return_lse = true;
  return p;
}

HostProblemData data_for(const Problem& p, std::uint64_t seed = 1) {
  auto d = HostProblemData::create(p, {seed});
  EXPECT_TRUE(d.ok());
  return std::move(d.value());
}

void run(const Problem& p, const AttentionTensors& t) {
  const Diagnostics why = reference_attention(p, t);
  ASSERT_TRUE(why.ok()) << why.summary();
}

TEST(Reference, SingleKeyReturnsItsValue) {
  const Problem p = tiny(3, 1);
  auto d = data_for(p);
  const AttentionTensors t = d.tensors();
  run(p, t);
  double s = 0;
  for (int i = 0; i < 4; ++i) s += t.q.ptr<float>()[i] * t.k.ptr<float>()[i];
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 4; ++c) EXPECT_FLOAT_EQ(t.out.ptr<float>()[i * 4 + c], t.v.ptr<float>()[c]);
  EXPECT_NEAR(t.lse.ptr<float>()[0], s * 0.5, 1e-6);  // scale 1/sqrt(4)
}

TEST(Reference, ZeroQueryAveragesVisibleValuesCausally) {
  Problem p = tiny(3, 5);
  p.mask = MaskKind::causal;
  auto d = data_for(p);
  const AttentionTensors t = d.tensors();
  for (int i = 0; i < 12; ++i) t.q.ptr<float>()[i] = 0.0f;
  run(p, t);
  for (int i = 0; i < 3; ++i) {
    const int visible = i + 2 + 1;  // bottom-right: row i sees keys 0..i+2
    for (int c = 0; c < 4; ++c) {
      double mean = 0;
      for (int j = 0; j < visible; ++j) mean += t.v.ptr<float>()[j * 4 + c];
      EXPECT_NEAR(t.out.ptr<float>()[i * 4 + c], mean / visible, 1e-6);
    }
    EXPECT_NEAR(t.lse.ptr<float>()[i], std::log(visible), 1e-6);
  }
}

TEST(Reference, SinkJoinsTheDenominator) {
  Problem p = tiny(1, 4);
  p.has_sinks = true;
  auto d = data_for(p);
  const AttentionTensors t = d.tensors();
  for (int i = 0; i < 4; ++i) t.q.ptr<float>()[i] = 0.0f;
  t.sinks.ptr<float>()[0] = std::log(4.0f);  // exp(sink) = 4 = the sum of the key terms
  run(p, t);
  for (int c = 0; c < 4; ++c) {
    double sum = 0;
    for (int j = 0; j < 4; ++j) sum += t.v.ptr<float>()[j * 4 + c];
    EXPECT_NEAR(t.out.ptr<float>()[c], sum / 8.0, 1e-6);
  }
  EXPECT_NEAR(t.lse.ptr<float>()[0], std::log(8.0), 1e-6);
}

TEST(Reference, SoftcapBoundsTheLogits) {
  Problem p = tiny(1, 2, 1);
  p.softcap = 2.0f;
  p.scale = 1.0f;
  auto d = data_for(p);
  const AttentionTensors t = d.tensors();
  t.q.ptr<float>()[0] = 10.0f;
  t.k.ptr<float>()[0] = 1.0f;   // s0 = 2 tanh(5)
  t.k.ptr<float>()[1] = -1.0f;  // s1 = 2 tanh(-5)
  t.v.ptr<float>()[0] = 1.0f;
  t.v.ptr<float>()[1] = 0.0f;
  run(p, t);
  const double s0 = 2 * std::tanh(5.0), s1 = 2 * std::tanh(-5.0);
  EXPECT_NEAR(t.out.ptr<float>()[0], std::exp(s0) / (std::exp(s0) + std::exp(s1)), 1e-6);
}

TEST(Reference, FullyMaskedRowsAreZeroWithMinusInfinityLse) {
  Problem p = tiny(4, 2);
  p.mask = MaskKind::causal;  // rows 0 and 1 see no key
  auto d = data_for(p);
  const AttentionTensors t = d.tensors();
  run(p, t);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(std::isinf(t.lse.ptr<float>()[i]) && t.lse.ptr<float>()[i] < 0);
    for (int c = 0; c < 4; ++c) EXPECT_EQ(t.out.ptr<float>()[i * 4 + c], 0.0f);
  }
  EXPECT_TRUE(std::isfinite(t.lse.ptr<float>()[2]));
}

TEST(Reference, GqaSharesKvHeadsInGroups) {
  Problem p = tiny(2, 3);
  p.heads_q = 4;
  p.heads_kv = 2;
  auto d = data_for(p);
  const AttentionTensors t = d.tensors();
  // BSHD v: [1, 3, 2, 4]; make kv head 0 all 1s and kv head 1 all 2s.
  for (int j = 0; j < 3; ++j)
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 4; ++c) t.v.ptr<float>()[(j * 2 + h) * 4 + c] = static_cast<float>(h + 1);
  run(p, t);
  for (int i = 0; i < 2; ++i)
    for (int h = 0; h < 4; ++h) EXPECT_NEAR(t.out.ptr<float>()[(i * 4 + h) * 4], h < 2 ? 1.0 : 2.0, 1e-6) << h;
}

TEST(Reference, PagedCacheEqualsContiguous) {
  Problem paged = tiny(3, 40, 8);
  paged.batch = 2;
  paged.heads_q = 4;
  paged.heads_kv = 2;
  paged.mask = MaskKind::causal;
  paged.paged_kv = PagedKv{8};
  ProblemDataOptions o;
  o.seed = 5;
  o.k_lens = {40, 13};
  auto pd = HostProblemData::create(paged, o);
  ASSERT_TRUE(pd.ok());
  const AttentionTensors pt = pd->tensors();
  run(paged, pt);
  // Gather each sequence's keys into a contiguous BSHD problem and compare.
  for (int b = 0; b < 2; ++b) {
    Problem flat = paged;
    flat.paged_kv.reset();
    flat.batch = 1;
    flat.seqlen_k = o.k_lens[b];
    auto fd = HostProblemData::create(flat, {9});
    const AttentionTensors ft = fd->tensors();
    for (int j = 0; j < flat.seqlen_k; ++j) {
      const int page = pt.block_table.ptr<std::int32_t>()[b * pt.block_table.strides[0] + j / 8];
      for (int h = 0; h < 2; ++h)
        for (int c = 0; c < 8; ++c) {
          const std::int64_t src = page * pt.k.strides[0] + (j % 8) * pt.k.strides[1] + h * 8 + c;
          ft.k.ptr<float>()[(j * 2 + h) * 8 + c] = pt.k.ptr<float>()[src];
          ft.v.ptr<float>()[(j * 2 + h) * 8 + c] = pt.v.ptr<float>()[src];
        }
    }
    for (int i = 0; i < 3 * 4 * 8; ++i) ft.q.ptr<float>()[i] = pt.q.ptr<float>()[b * pt.q.strides[0] + i];
    run(flat, ft);
    for (int i = 0; i < 3 * 4 * 8; ++i)
      EXPECT_NEAR(ft.out.ptr<float>()[i], pt.out.ptr<float>()[b * pt.out.strides[0] + i], 1e-6);
  }
}

TEST(Reference, VarlenEqualsSeparateSequencesAndBhsdEqualsBshd) {
  Problem packed = tiny(6, 7, 8);
  packed.layout = Layout::thd;
  packed.batch = 3;
  packed.heads_q = 2;
  packed.mask = MaskKind::causal;
  ProblemDataOptions o;
  o.q_lens = {6, 0, 2};
  o.k_lens = {7, 3, 5};
  auto pd = HostProblemData::create(packed, o);
  ASSERT_TRUE(pd.ok());
  const AttentionTensors pt = pd->tensors();
  run(packed, pt);
  // Sequence 2 (q tokens 6..7, k tokens 10..14) on its own, in BHSD.
  Problem one = tiny(2, 5, 8);
  one.layout = Layout::bhsd;
  one.heads_q = 2;
  one.mask = MaskKind::causal;
  auto od = HostProblemData::create(one, {3});
  const AttentionTensors ot = od->tensors();
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 8; ++c) {
      for (int i = 0; i < 2; ++i) ot.q.ptr<float>()[(h * 2 + i) * 8 + c] = pt.q.ptr<float>()[((6 + i) * 2 + h) * 8 + c];
      if (h == 0)
        for (int j = 0; j < 5; ++j) {
          ot.k.ptr<float>()[j * 8 + c] = pt.k.ptr<float>()[(10 + j) * 8 + c];
          ot.v.ptr<float>()[j * 8 + c] = pt.v.ptr<float>()[(10 + j) * 8 + c];
        }
    }
  run(one, ot);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 2; ++i) {
      for (int c = 0; c < 8; ++c)
        EXPECT_NEAR(ot.out.ptr<float>()[(h * 2 + i) * 8 + c], pt.out.ptr<float>()[((6 + i) * 2 + h) * 8 + c], 1e-6);
      EXPECT_NEAR(ot.lse.ptr<float>()[h * 2 + i], pt.lse.ptr<float>()[h * 8 + 6 + i], 1e-5);
    }
}

TEST(Reference, OnlyHeadsLeavesOthersUntouched) {
  Problem p = tiny(4, 4);
  p.heads_q = p.heads_kv = 2;
  auto d = data_for(p);
  ReferenceOptions only;
  only.only_heads = {{0, 1}};
  ASSERT_TRUE(reference_attention(p, d.tensors(), only).ok());
  const AttentionTensors t = d.tensors();
  EXPECT_TRUE(std::isnan(t.out.ptr<float>()[0]));     // head 0: still poisoned
  EXPECT_TRUE(std::isfinite(t.out.ptr<float>()[4]));  // head 1: written
}

TEST(Reference, RefusesBadInput) {
  Problem p = tiny(2, 2);
  auto d = data_for(p);
  AttentionTensors t = d.tensors();
  t.k.ptr<float>()[1] = std::nanf("");
  EXPECT_TRUE(reference_attention(p, t).has_code("AK1109"));
  p.heads_q = 3;
  p.heads_kv = 2;
  EXPECT_TRUE(reference_attention(p, d.tensors()).has_code("AK1002"));
}

}  // namespace
}  // namespace attnkit
