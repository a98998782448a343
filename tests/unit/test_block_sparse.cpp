// The block-sparse descriptor: index math, the dense-mask helpers, list
// validation (AK1115) and the binding's size checks.
#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/backends/reference.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/host_tensor.hpp"

namespace attnkit {
namespace {

Problem sparse_problem(int bs_batch, int bs_heads) {
  Problem p;
  p.batch = 2;
  p.seqlen_q = 70;  // 3 query blocks of 32, the last one partial
  p.seqlen_k = 50;  // 4 key blocks of 16, the last one partial
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim_qk = p.head_dim_v = 8;
  p.dtype = DType::f32;
  p.block_sparse = BlockSparse{32, 16, bs_batch, bs_heads};
  return p;
}

TEST(BlockSparse, RowsFollowTheDescriptor) {
  const Problem p = sparse_problem(2, 4);
  const BlockSparseShape s = block_sparse_shape(p);
  EXPECT_EQ(s.num_q_blocks, 3);
  EXPECT_EQ(s.num_k_blocks, 4);
  EXPECT_EQ(s.rows, 2 * 4 * 3);
  // r = (b_m * heads + h_m) * num_q_blocks + qb
  EXPECT_EQ(block_sparse_row(2, 4, 3, 1, 2, 1), (1 * 4 + 2) * 3 + 1);
  EXPECT_EQ(block_sparse_row(1, 4, 3, 1, 2, 1), (0 * 4 + 2) * 3 + 1);  // shared by the sequences
  EXPECT_EQ(block_sparse_row(2, 1, 3, 1, 2, 1), (1 * 1 + 0) * 3 + 1);  // shared by the heads
  EXPECT_EQ(block_sparse_row(1, 1, 3, 1, 2, 2), 2);
  EXPECT_EQ(num_blocks(0, 16), 0);
  EXPECT_EQ(num_blocks(17, 16), 2);
}

TEST(BlockSparse, ListLookupsClampBadRanges) {
  const std::int32_t offsets[] = {0, 3, 2, 99};  // row 1 decreases, row 2 runs past nnz
  const std::int32_t indices[] = {1, 4, 7};
  const BlockListRange r0 = block_list_range(offsets, 0, 3);
  EXPECT_EQ(r0.begin, 0);
  EXPECT_EQ(r0.end, 3);
  EXPECT_TRUE(block_listed(indices, r0, 4));
  EXPECT_FALSE(block_listed(indices, r0, 5));
  const BlockListRange r1 = block_list_range(offsets, 1, 3);
  EXPECT_EQ(r1.end, r1.begin);  // empty, not negative
  const BlockListRange r2 = block_list_range(offsets, 2, 3);
  EXPECT_EQ(r2.end, 3);  // clamped to nnz
  EXPECT_TRUE(block_listed(indices, r2, 7));
}

TEST(BlockSparse, DenseMaskRoundTrips) {
  const Problem p = sparse_problem(1, 4);
  HostTensor mask(DType::u8, {1, 4, 3, 4});
  auto* m = mask.view().ptr<std::uint8_t>();
  for (int i = 0; i < 48; ++i) m[i] = (i * 7 % 5) < 2 ? 1 : 0;
  for (int kb = 0; kb < 4; ++kb) m[1 * 12 + 2 * 4 + kb] = 0;  // head 1, query block 2: an empty row
  auto lists = block_sparse_from_mask(p, mask.view());
  ASSERT_TRUE(lists.ok()) << lists.diagnostics().summary();
  EXPECT_EQ(lists->offsets.size(), 13u);
  EXPECT_EQ(lists->offsets[1 * 3 + 2], lists->offsets[1 * 3 + 3]);
  EXPECT_TRUE(validate_block_sparse_lists(p, lists->offsets_view(), lists->indices_view()).empty());
  auto back = block_sparse_dense_mask(p, lists->offsets_view(), lists->indices_view());
  ASSERT_TRUE(back.ok());
  for (int i = 0; i < 48; ++i) EXPECT_EQ(back->view().ptr<std::uint8_t>()[i], m[i]) << i;
  int kept = 0;
  for (int i = 0; i < 48; ++i) kept += m[i];
  EXPECT_DOUBLE_EQ(block_sparse_density(p, *lists), kept / 48.0);
  // A mask of the wrong shape says what it expected.
  HostTensor wrong(DType::u8, {2, 4, 3, 4});
  auto refused = block_sparse_from_mask(p, wrong.view());
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.diagnostics().has_code("AK1103"));
}

TEST(BlockSparse, FlopsCountListedBlocksClippedToTheSequence) {
  Problem p = sparse_problem(1, 1);
  BlockSparseLists all;
  all.offsets = {0, 4, 8, 12};
  all.indices = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  EXPECT_DOUBLE_EQ(block_sparse_flops(p, all), p.flops());  // every block listed: the dense count
  BlockSparseLists last;
  last.offsets = {0, 0, 0, 1};
  last.indices = {3};  // rows 64..69 x keys 48..49
  EXPECT_DOUBLE_EQ(block_sparse_flops(p, last), 2.0 * 2 * 4 * (6 * 2) * 16);
}

TEST(BlockSparse, HostListsAreValidated) {
  const Problem p = sparse_problem(1, 1);  // 3 rows, key blocks 0..3
  struct Bad {
    std::vector<std::int32_t> offsets, indices;
    const char* says;
  };
  const Bad cases[] = {
      {{1, 1, 2, 2}, {0, 1}, "not 0"},
      {{0, 2, 1, 2}, {0, 1}, "decreases"},
      {{0, 2, 2, 2}, {1, 1}, "strictly ascending"},
      {{0, 2, 2, 2}, {2, 1}, "strictly ascending"},
      {{0, 1, 1, 1}, {4}, "not a key block below 4"},
      {{0, 1, 1, 1}, {-1}, "not a key block"},
      {{0, 1, 1, 1}, {0, 1}, "ends at 1"},
  };
  for (const Bad& c : cases) {
    BlockSparseLists l{c.offsets, c.indices};
    const Diagnostics why = validate_block_sparse_lists(p, l.offsets_view(), l.indices_view());
    ASSERT_TRUE(why.has_code("AK1115")) << c.says;
    EXPECT_NE(why.items()[0].message.find(c.says), std::string::npos) << why.summary();
  }
}

TEST(BlockSparse, BindingChecksSizesAndContents) {
  const Problem p = sparse_problem(2, 4);
  ProblemDataOptions o;
  o.empty_block_rows = 0.3;
  auto d = HostProblemData::create(p, o);
  ASSERT_TRUE(d.ok());
  AttentionTensors t = d->tensors();
  EXPECT_TRUE(validate_binding(p, t).empty()) << validate_binding(p, t).summary();
  AttentionTensors missing = t;
  missing.block_offsets = {};
  EXPECT_TRUE(validate_binding(p, missing).has_code("AK1101"));
  AttentionTensors short_offsets = t;
  short_offsets.block_offsets.shape[0] -= 1;
  EXPECT_TRUE(validate_binding(p, short_offsets).has_code("AK1103"));
  AttentionTensors strided = t;
  strided.block_indices.strides[0] = 2;
  strided.block_indices.shape[0] /= 2;
  EXPECT_TRUE(validate_binding(p, strided).has_code("AK1106"));
  AttentionTensors wide = t;
  wide.block_offsets.dtype = DType::u8;
  EXPECT_TRUE(validate_binding(p, wide).has_code("AK1104"));
  // Contents: a host list out of range.
  std::vector<std::int32_t> offsets(t.block_offsets.ptr<std::int32_t>(),
                                    t.block_offsets.ptr<std::int32_t>() + t.block_offsets.numel());
  std::vector<std::int32_t> indices(t.block_indices.ptr<std::int32_t>(),
                                    t.block_indices.ptr<std::int32_t>() + t.block_indices.numel());
  ASSERT_FALSE(indices.empty());
  indices.back() = 4;
  BlockSparseLists bad{offsets, indices};
  AttentionTensors t_bad = t;
  bad.bind(t_bad);
  EXPECT_TRUE(validate_binding(p, t_bad).has_code("AK1115"));
  // Device lists: sizes only (the kernels clamp), so no contents diagnostic.
  AttentionTensors on_device = t_bad;
  for (TensorView* v : {&on_device.q, &on_device.k, &on_device.v, &on_device.out, &on_device.block_offsets,
                        &on_device.block_indices})
    v->device = {DeviceKind::cuda, 0};
  EXPECT_TRUE(validate_binding(p, on_device, {DeviceKind::cuda, 0}).empty())
      << validate_binding(p, on_device, {DeviceKind::cuda, 0}).summary();
}

// The lists change the result (not a no-op) and an all-listed layout equals dense.
TEST(BlockSparse, ReferenceHonoursTheLists) {
  Problem p = sparse_problem(1, 1);
  p.block_sparse.reset();
  auto dense = HostProblemData::create(p);
  ASSERT_TRUE(dense.ok());
  ASSERT_TRUE(reference_attention(p, dense->tensors()).ok());
  Problem s = sparse_problem(1, 1);
  BlockSparseLists all{{0, 4, 8, 12}, {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}};
  BlockSparseLists half{{0, 2, 2, 4}, {0, 1, 2, 3}};  // query block 1 sees nothing
  HostTensor out_all = dense->make_output(DType::f32), out_half = dense->make_output(DType::f32);
  HostTensor lse = dense->make_lse();
  s.return_lse = true;
  AttentionTensors t = dense->tensors_with_outputs(out_all.view(), lse.view());
  all.bind(t);
  ASSERT_TRUE(reference_attention(s, t).ok());
  const TensorView& o_dense = dense->tensors().out;
  for (std::int64_t i = 0; i < o_dense.numel(); ++i)
    EXPECT_NEAR(out_all.view().ptr<float>()[i], o_dense.ptr<float>()[i], 1e-6) << i;
  t = dense->tensors_with_outputs(out_half.view(), lse.view());
  half.bind(t);
  ASSERT_TRUE(reference_attention(s, t).ok());
  // Query 40 (block 1, empty list) of sequence 0, head 0: output 0, LSE -inf.
  const std::int64_t row = 40 * out_half.view().strides[1];
  for (int c = 0; c < 8; ++c) EXPECT_EQ(out_half.view().ptr<float>()[row + c], 0.0f);
  EXPECT_EQ(lse.view().ptr<float>()[40], -INFINITY);
  // Query 0 (block 0, key blocks 0 and 1 only) differs from dense.
  bool differs = false;
  for (int c = 0; c < 8; ++c) differs |= std::abs(out_half.view().ptr<float>()[c] - o_dense.ptr<float>()[c]) > 1e-4;
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace attnkit
