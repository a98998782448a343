#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/core/mask.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit {
namespace {

Problem valid() {
  Problem p;
  p.batch = 2;
  p.seqlen_q = p.seqlen_k = 64;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim_qk = p.head_dim_v = 64;
  return p;
}

TEST(Problem, DefaultsAndDerivedValues) {
  Problem p = valid();
  EXPECT_TRUE(validate_problem(p).empty());
  EXPECT_FLOAT_EQ(p.softmax_scale(), 1.0f / 8.0f);
  p.scale = 0.5f;
  EXPECT_FLOAT_EQ(p.softmax_scale(), 0.5f);
  EXPECT_EQ(p.gqa_ratio(), 4);
  EXPECT_EQ(p.out_dtype(), DType::bf16);
  p.dtype = DType::f8e4m3;
  EXPECT_EQ(p.out_dtype(), DType::bf16);
  EXPECT_DOUBLE_EQ(valid().flops(), 2.0 * 2 * 8 * 64 * 64 * 128);
  p = valid();
  p.mask = MaskKind::causal;
  EXPECT_DOUBLE_EQ(p.flops(), valid().flops() / 2);
  EXPECT_EQ(p.effective_window(), (Window{-1, 0}));
}

struct BadProblem {
  const char* code;
  void (*mutate)(Problem&);
};

TEST(Problem, EachInvalidFieldHasItsCode) {
  const BadProblem cases[] = {
      {"AK1001", [](Problem& p) { p.batch = 0; }},
      {"AK1001", [](Problem& p) { p.seqlen_q = 0; }},
      {"AK1001", [](Problem& p) { p.heads_kv = 0; }},
      {"AK1001", [](Problem& p) { p.head_dim_v = -1; }},
      {"AK1002", [](Problem& p) { p.heads_q = 3; }},
      {"AK1003", [](Problem& p) { p.head_dim_qk = 1024; }},
      {"AK1004", [](Problem& p) { p.mask = MaskKind::sliding_window; p.window = {-5, 0}; }},
      {"AK1005", [](Problem& p) { p.softcap = -1.0f; }},
      {"AK1005", [](Problem& p) { p.softcap = std::nanf(""); }},
      {"AK1006", [](Problem& p) { p.scale = 0.0f; }},
      {"AK1006", [](Problem& p) { p.k_descale = INFINITY; }},
      {"AK1007", [](Problem& p) { p.dtype = DType::i32; }},
      {"AK1007", [](Problem& p) { p.out_dtype_override = DType::i8; }},
      {"AK1008", [](Problem& p) { p.block_sparse = BlockSparse{0, 64}; }},
      {"AK1008", [](Problem& p) { p.block_sparse = BlockSparse{100, 64}; }},  // not a multiple of 16
      {"AK1015", [](Problem& p) { p.block_sparse = BlockSparse{64, 64, 1, 3}; }},  // heads: 1 or heads_q
      {"AK1015", [](Problem& p) { p.block_sparse = BlockSparse{64, 64, 5, 1}; }},  // batch: 1 or batch
      {"AK1009", [](Problem& p) { p.paged_kv = PagedKv{0}; }},
      {"AK1010", [](Problem& p) { p.layout = Layout::bhsd; p.paged_kv = PagedKv{16}; }},
  };
  for (const BadProblem& c : cases) {
    Problem p = valid();
    c.mutate(p);
    const Diagnostics d = validate_problem(p);
    EXPECT_FALSE(d.ok());
    EXPECT_TRUE(d.has_code(c.code)) << "expected " << c.code << ", got: " << d.summary();
    for (const Diagnostic& x : d) EXPECT_FALSE(x.solutions.empty()) << x.code;
  }
}

TEST(Problem, VarlenAllowsEmptyLongestSequence) {
  Problem p = valid();
  p.layout = Layout::thd;
  p.seqlen_q = 0;
  EXPECT_TRUE(validate_problem(p).ok());
}

TEST(Mask, CausalIsBottomRightAligned) {
  // 2 queries over 5 keys: row 0 sees keys 0..3, row 1 sees 0..4.
  EXPECT_EQ(visible_keys(0, 2, 5, -1, 0).hi, 4);
  EXPECT_EQ(visible_keys(1, 2, 5, -1, 0).hi, 5);
  // 5 queries over 2 keys: rows 0..2 see nothing, row 3 sees key 0.
  const KeyRange r0 = visible_keys(0, 5, 2, -1, 0);
  EXPECT_EQ(r0.hi - r0.lo, 0);
  EXPECT_EQ(visible_keys(3, 5, 2, -1, 0).hi, 1);
}

TEST(Mask, WindowIsCentredOnTheDiagonal) {
  const KeyRange r = visible_keys(10, 20, 20, 3, 2);
  EXPECT_EQ(r.lo, 7);
  EXPECT_EQ(r.hi, 13);
  const KeyRange clipped = visible_keys(0, 20, 20, 3, 2);
  EXPECT_EQ(clipped.lo, 0);
  EXPECT_EQ(clipped.hi, 3);
  const KeyRange open = visible_keys(5, 20, 20, -1, -1);
  EXPECT_EQ(open.lo, 0);
  EXPECT_EQ(open.hi, 20);
}

}  // namespace
}  // namespace attnkit
