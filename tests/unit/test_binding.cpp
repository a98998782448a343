#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/host_tensor.hpp"

namespace attnkit {
namespace {

Problem small(Layout layout = Layout::bshd) {
  Problem p;
  p.layout = layout;
  p.batch = 2;
  p.seqlen_q = 5;
  p.seqlen_k = 7;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim_qk = p.head_dim_v = 8;
  p.dtype = DType::f32;
  return p;
}

HostProblemData make(const Problem& p, ProblemDataOptions o = {}) {
  auto d = HostProblemData::create(p, o);
  EXPECT_TRUE(d.ok()) << d.diagnostics().summary();
  return std::move(d.value());
}

TEST(Binding, GeneratedDataIsValidForEveryLayout) {
  for (Layout l : {Layout::bshd, Layout::bhsd, Layout::thd}) {
    Problem p = small(l);
    p.return_lse = true;
    p.has_sinks = true;
    ProblemDataOptions o;
    if (l == Layout::thd) o.q_lens = {5, 0}, o.k_lens = {7, 3};
    const auto d = make(p, o);
    EXPECT_TRUE(validate_binding(p, d.tensors()).empty()) << validate_binding(p, d.tensors()).summary();
  }
}

TEST(Binding, MissingWrongAndMisplacedTensors) {
  Problem p = small();
  auto d = make(p);
  AttentionTensors t = d.tensors();
  t.k = {};
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1101"));

  t = d.tensors();
  t.q.rank = 3;
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1102"));

  t = d.tensors();
  t.v.shape[3] = 16;  // v head dim != head_dim_v
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1103"));

  t = d.tensors();
  t.k.dtype = DType::bf16;
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1104"));

  t = d.tensors();
  t.q.device = {DeviceKind::cuda, 0};
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1105"));
  EXPECT_TRUE(validate_binding(p, d.tensors(), {DeviceKind::cuda, 16}).has_code("AK1105"));

  t = d.tensors();
  t.q.strides[3] = 2;
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1106"));

  t = d.tensors();
  t.q.data = static_cast<char*>(t.q.data) + 4;  // misaligned base for a 16-byte rule
  EXPECT_TRUE(validate_binding(p, t, {DeviceKind::cpu, 16}).has_code("AK1107"));

  p.return_lse = true;  // asked for but not bound
  EXPECT_TRUE(validate_binding(p, d.tensors()).has_code("AK1101"));
}

TEST(Binding, CuSeqlensMustBeMonotonicFromZero) {
  Problem p = small(Layout::thd);
  ProblemDataOptions o;
  o.q_lens = {3, 2};
  o.k_lens = {4, 0};
  auto d = make(p, o);
  AttentionTensors t = d.tensors();
  auto* cu = t.cu_seqlens_q.ptr<std::int32_t>();
  cu[1] = 6;  // [0, 6, 5]: decreases
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1108"));
  cu[1] = 3;
  cu[2] = 99;  // past the packed length
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1108"));
  cu[2] = 5;
  cu[0] = 1;
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1108"));
}

TEST(Binding, PagedTableMustNameExistingPages) {
  Problem p = small();
  p.paged_kv = PagedKv{4};
  auto d = make(p);
  AttentionTensors t = d.tensors();
  EXPECT_TRUE(validate_binding(p, t).empty()) << validate_binding(p, t).summary();
  t.block_table.ptr<std::int32_t>()[0] = 9999;
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1111"));
  t.block_table.ptr<std::int32_t>()[0] = 0;
  t.seqlens_k.ptr<std::int32_t>()[1] = 1000;
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1111"));
}

TEST(Binding, NonFiniteInputsAreRefused) {
  Problem p = small();
  auto d = make(p);
  EXPECT_TRUE(scan_nonfinite_inputs(p, d.tensors()).empty());
  AttentionTensors t = d.tensors();
  t.v.ptr<float>()[17] = INFINITY;
  const Diagnostics why = scan_nonfinite_inputs(p, t);
  ASSERT_TRUE(why.has_code("AK1109"));
  EXPECT_NE(why.items()[0].message.find("'v'"), std::string::npos);
  t.v.ptr<float>()[17] = 0.0f;
  t.q.ptr<float>()[3] = std::nanf("");
  EXPECT_TRUE(scan_nonfinite_inputs(p, t).has_code("AK1109"));
}

TEST(Binding, HeadRowsAddressEveryLayout) {
  const std::int64_t bshd[] = {1000, 100, 10, 1};
  EXPECT_EQ(head_rows(Layout::bshd, bshd, 2, 3, 0).offset, 2030);
  EXPECT_EQ(head_rows(Layout::bshd, bshd, 2, 3, 0).row_stride, 100);
  EXPECT_EQ(head_rows(Layout::bhsd, bshd, 2, 3, 0).offset, 2300);
  EXPECT_EQ(head_rows(Layout::bhsd, bshd, 2, 3, 0).row_stride, 10);
  const std::int64_t thd[] = {64, 8, 1};
  EXPECT_EQ(head_rows(Layout::thd, thd, 5, 3, 11).offset, 11 * 64 + 3 * 8);
  EXPECT_EQ(head_rows(Layout::thd, thd, 5, 3, 11).row_stride, 64);
}

TEST(HostData, OutputsArePoisoned) {
  auto d = make(small());
  const TensorView out = d.tensors().out;
  for (std::int64_t i = 0; i < out.numel(); ++i) ASSERT_TRUE(std::isnan(out.ptr<float>()[i]));
}

// key_growth scales key j of a sequence of n by 1 + growth * j / (n - 1), the
// same draws otherwise; element indices written out per layout here.
TEST(HostData, KeyGrowthScalesEachKeyByItsPosition) {
  for (int variant = 0; variant < 4; ++variant) {
    Problem p = small(variant == 1 ? Layout::bhsd : variant == 2 ? Layout::thd : Layout::bshd);
    ProblemDataOptions o;
    o.seed = 5;
    if (variant == 2) o.q_lens = {5, 0}, o.k_lens = {7, 3};
    if (variant == 3) p.paged_kv = PagedKv{4}, o.k_lens = {7, 6};
    const auto plain = make(p, o);
    o.key_growth = 3.0;
    const auto grown = make(p, o);
    const TensorView k0 = plain.tensors().k, k1 = grown.tensors().k, table = grown.tensors().block_table;
    const std::int64_t S = p.seqlen_k, H = p.heads_kv, D = p.head_dim_qk;
    std::int64_t first = 0;
    for (int b = 0; b < p.batch; ++b) {
      const int n = variant >= 2 ? o.k_lens[b] : p.seqlen_k;
      for (int j = 0; j < n; ++j)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t c = 0; c < D; ++c) {
            std::int64_t i = 0;
            switch (variant) {
              case 0: i = ((b * S + j) * H + h) * D + c; break;
              case 1: i = ((b * H + h) * S + j) * D + c; break;
              case 2: i = ((first + j) * H + h) * D + c; break;
              default: {
                const std::int64_t page = table.ptr<std::int32_t>()[b * table.shape[1] + j / 4];
                i = ((page * 4 + j % 4) * H + h) * D + c;
              }
            }
            const double f = 1.0 + (n > 1 ? 3.0 * j / (n - 1) : 0.0);
            ASSERT_NEAR(k1.ptr<float>()[i], f * k0.ptr<float>()[i], 1e-5) << variant << " b" << b << " j" << j;
          }
      first += n;
    }
  }
}

}  // namespace
}  // namespace attnkit
