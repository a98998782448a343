// The host-side logic the CUDA kernels apply to device-resident metadata
// (src/kernels/cuda/params.hpp; issue 20): sequence_span() and cache_page()
// clamp every offset, length and page into the tensors whatever the values,
// and metadata_share_ok() flags exactly what the host's binding checks refuse
// (AK1108 / AK1111), so a call that lies on the GPU is NaN where the same call
// on the host is refused. Checked on the CPU: the functions are host-callable.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "kernels/cuda/params.hpp"

namespace attnkit::cuda {
namespace {

Problem varlen(int sq, int sk, int batch) {
  Problem p;
  p.layout = Layout::thd;
  p.batch = batch;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.heads_q = p.heads_kv = 2;
  p.head_dim_qk = p.head_dim_v = 64;
  p.dtype = DType::bf16;
  return p;
}

// Whether the whole call passes, as the CTA's OR of its threads' shares does.
bool call_ok(const AttnParams& a, int threads) {
  bool ok = true;
  for (int t = 0; t < threads; ++t) ok = ok && metadata_share_ok(a, t, threads);
  return ok;
}

// Every span lies inside the packed rows, whatever cu_seqlens says.
void expect_spans_inside(const AttnParams& a) {
  for (int b = 0; b < a.batch; ++b) {
    const DeviceSpan s = sequence_span(a, b);
    EXPECT_GE(s.q_offset, 0) << b;
    EXPECT_GE(s.q_len, 0) << b;
    EXPECT_LE(s.q_offset + s.q_len, a.rows_q) << b;
    EXPECT_GE(s.k_offset, 0) << b;
    EXPECT_GE(s.k_len, 0) << b;
    if (a.page_size == 0) EXPECT_LE(s.k_offset + s.k_len, a.rows_k) << b;
    if (a.page_size > 0) EXPECT_LE(s.k_len, cache_capacity(a)) << b;
  }
}

TEST(DeviceMetadata, HonestVarlenPassesAndSpansAreTheSequences) {
  auto data = HostProblemData::create(varlen(300, 310, 3), {.seed = 1, .q_lens = {100, 300, 0}, .k_lens = {5, 310, 7}});
  ASSERT_TRUE(data.ok()) << data.diagnostics().summary();
  const AttnParams a = make_attn_params(data->problem(), data->tensors());
  for (int threads : {1, 2, 128}) EXPECT_TRUE(call_ok(a, threads)) << threads;
  const DeviceSpan s = sequence_span(a, 1);
  EXPECT_EQ(s.q_offset, 100);
  EXPECT_EQ(s.q_len, 300);
  EXPECT_EQ(s.k_offset, 5);
  EXPECT_EQ(s.k_len, 310);
}

// Each lie the host refuses (AK1108) fails the device check, and every span
// stays inside the rows.
TEST(DeviceMetadata, LyingCuSeqlensFailTheCheckAndClamp) {
  const Problem p = varlen(300, 300, 3);
  auto data = HostProblemData::create(p, {.seed = 2, .q_lens = {100, 300, 50}, .k_lens = {100, 300, 50}});
  ASSERT_TRUE(data.ok());
  const std::int64_t rows = data->total_q();  // 450
  struct Lie {
    const char* what;
    std::vector<std::int32_t> cu_q;
    int seqlen_q;
  };
  const std::vector<Lie> lies = {
      {"a sequence longer than seqlen_q (max_seqlen_q = 128)", {0, 100, 400, 450}, 128},
      {"past the packed rows", {0, 100, 400, static_cast<std::int32_t>(rows) + 50}, 300},
      {"decreasing", {0, 100, 60, 450}, 300},
      {"negative", {0, -40, 400, 450}, 300},
      {"not starting at 0", {7, 100, 400, 450}, 300},
      {"far past int32 rows", {0, 100, 400, 2147483647}, 300},
  };
  for (const Lie& lie : lies) {
    AttentionTensors t = data->tensors();
    std::vector<std::int32_t> cu = lie.cu_q;
    t.cu_seqlens_q.data = cu.data();
    Problem planned = p;
    planned.seqlen_q = lie.seqlen_q;
    const AttnParams a = make_attn_params(planned, t);
    EXPECT_FALSE(call_ok(a, 128)) << lie.what;
    EXPECT_FALSE(call_ok(a, 1)) << lie.what;
    expect_spans_inside(a);
    // The host refuses the same binding.
    EXPECT_FALSE(validate_binding(planned, t).ok()) << lie.what;
  }
}

TEST(DeviceMetadata, LyingPagedCacheFailsTheCheckAndClamps) {
  Problem p = varlen(64, 500, 3);
  p.layout = Layout::bshd;
  p.paged_kv = PagedKv{16};
  auto data = HostProblemData::create(p, {.seed = 3, .k_lens = {500, 100, 37}});
  ASSERT_TRUE(data.ok()) << data.diagnostics().summary();
  const AttentionTensors honest = data->tensors();
  const AttnParams good = make_attn_params(p, honest);
  EXPECT_TRUE(call_ok(good, 128));
  const std::int64_t capacity = cache_capacity(good);
  EXPECT_EQ(capacity, 32 * 16);  // ceil(500 / 16) columns
  for (std::int32_t lie : {static_cast<std::int32_t>(capacity) + 16, -1, 501}) {
    AttentionTensors t = honest;
    std::vector<std::int32_t> lens = {500, lie, 37};
    t.seqlens_k.data = lens.data();
    const AttnParams a = make_attn_params(p, t);
    EXPECT_FALSE(call_ok(a, 128)) << lie;  // 501: within the table, past seqlen_k
    expect_spans_inside(a);
    EXPECT_FALSE(validate_binding(p, t).ok()) << lie;
  }
  // Pages: clamped into the cache and flagged; honest entries pass unchanged.
  std::vector<std::int32_t> table(static_cast<std::size_t>(honest.block_table.numel()));
  std::copy_n(honest.block_table.ptr<const std::int32_t>(), table.size(), table.begin());
  const std::int64_t cols = honest.block_table.shape[1];
  table[1 * cols + 0] = good.num_pages + 7;
  table[1 * cols + 1] = -3;
  AttentionTensors t = honest;
  t.block_table.data = table.data();
  const AttnParams a = make_attn_params(p, t);
  bool bad = false;
  EXPECT_EQ(cache_page(a, 0, 3, bad), table[3]);
  EXPECT_FALSE(bad);
  EXPECT_EQ(cache_page(a, 1, 0, bad), a.num_pages - 1);
  EXPECT_TRUE(bad);
  bad = false;
  EXPECT_EQ(cache_page(a, 1, 1, bad), 0);
  EXPECT_TRUE(bad);
  EXPECT_TRUE(page_outside(a, -1));
  EXPECT_TRUE(page_outside(a, a.num_pages));
  EXPECT_FALSE(page_outside(a, a.num_pages - 1));
  EXPECT_FALSE(validate_binding(p, t).ok());
}

}  // namespace
}  // namespace attnkit::cuda
