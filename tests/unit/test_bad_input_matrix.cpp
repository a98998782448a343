// The bad-input matrix through the C++ API: every CPU backend, every scenario
// (BSHD with LSE and sinks, BHSD causal bf16, THD with an empty sequence and a
// window, a paged cache; the gated sparse backends on BSHD video latents with
// a gate), every mutation of a tensor (missing, rank, each
// dimension, every wrong dtype, device, stride, overlap, NaN/Inf) or of the
// Problem (each size at 0, -1, past the limits; windows; scales). Index tensors
// are copied to the end of a guarded page before every run, so a read past one
// faults. Each outcome must be a catalogued refusal naming the expected code,
// or (the valid variants at the end) the reference's result on a plain copy.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/backends/registry.hpp"
#include "attnkit/backends/reference.hpp"
#include "testing/error_norms.hpp"
#include "testing/guarded_memory.hpp"
#include "testing/parity_cases.hpp"

namespace attnkit::testing {
namespace {

struct Scenario {
  std::string name;
  Problem p;
  ProblemDataOptions o;
};

std::vector<Scenario> scenarios() {
  std::vector<Scenario> out;
  Problem a = make_test_problem(17, 33, 4, 2, 32, DType::f32);
  a.return_lse = a.has_sinks = true;
  out.push_back({"bshd_f32_lse_sinks", a, {}});
  Problem b = make_test_problem(20, 20, 4, 4, 64, DType::bf16, MaskKind::causal);
  b.layout = Layout::bhsd;
  out.push_back({"bhsd_bf16_causal", b, {}});
  Problem c = make_test_problem(9, 12, 2, 1, 16, DType::f16, MaskKind::sliding_window);
  c.layout = Layout::thd;
  c.batch = 3;
  c.window = {4, 2};
  c.return_lse = true;
  out.push_back({"thd_f16_window", c, {.q_lens = {4, 0, 9}, .k_lens = {12, 3, 5}}});
  Problem d = make_test_problem(1, 40, 4, 2, 16, DType::f32, MaskKind::causal);
  d.paged_kv = PagedKv{16};
  out.push_back({"paged_f32_decode", d, {}});
  return out;
}

// The gated backends' call: BSHD video latents of 4 x 4 x 8 tokens (two
// 4x4x4 cubes), GQA, with the gate.
std::vector<Scenario> gated_scenarios() {
  Problem g = make_test_problem(128, 128, 4, 2, 64, DType::f32);
  g.video = VideoGrid{4, 4, 8};
  g.has_gate = true;
  return {{"bshd_f32_video_gate", g, {}}};
}

// The tensors of one case: the scenario's data, index tensors moved to guard pages.
struct Bound {
  HostProblemData data;
  AttentionTensors t;
  std::vector<std::unique_ptr<GuardedBuffer>> guards;

  // Moves `v` (bytes read as its dtype, as many as its shape says) to the end of a guarded page.
  void guard(TensorView& v) {
    if (v.data == nullptr) return;
    const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(v.numel(), 0)) * dtype_size(v.dtype);
    guards.push_back(std::make_unique<GuardedBuffer>(std::max<std::size_t>(bytes, 1)));
    GuardedBuffer& g = *guards.back();
    std::memset(g.data(), 0, g.size());
    const std::size_t source = static_cast<std::size_t>(std::max<std::int64_t>(v.span_bytes(), 0));
    if (v.is_contiguous()) std::memcpy(g.data() + (g.size() - bytes), v.data, std::min(bytes, source));
    TensorView moved = make_view(g.data() + (g.size() - bytes), v.dtype, {});
    moved.rank = v.rank;
    std::int64_t stride = 1;
    for (int d = v.rank - 1; d >= 0; --d) {
      moved.shape[d] = v.shape[d];
      moved.strides[d] = stride;
      stride *= std::max<std::int64_t>(v.shape[d], 1);
    }
    moved.device = v.device;
    v = moved;
  }
};

using Mutation = std::function<void(Problem&, AttentionTensors&)>;

struct Case {
  std::string name;
  Mutation mutate;
  std::vector<std::string> codes;  // the refusal names one of these
};

// Each tensor the scenario binds, by name.
std::vector<std::pair<std::string, TensorView AttentionTensors::*>> bound_tensors(const Problem& p) {
  std::vector<std::pair<std::string, TensorView AttentionTensors::*>> out = {
      {"q", &AttentionTensors::q}, {"k", &AttentionTensors::k}, {"v", &AttentionTensors::v}, {"out", &AttentionTensors::out}};
  if (p.return_lse) out.push_back({"lse", &AttentionTensors::lse});
  if (p.has_sinks) out.push_back({"sinks", &AttentionTensors::sinks});
  if (p.has_gate) out.push_back({"gate", &AttentionTensors::gate});
  if (p.layout == Layout::thd) out.push_back({"cu_seqlens_q", &AttentionTensors::cu_seqlens_q});
  if (p.layout == Layout::thd && !p.paged_kv) out.push_back({"cu_seqlens_k", &AttentionTensors::cu_seqlens_k});
  if (p.paged_kv) {
    out.push_back({"block_table", &AttentionTensors::block_table});
    out.push_back({"seqlens_k", &AttentionTensors::seqlens_k});
  }
  return out;
}

bool is_index(const std::string& name) {
  return name == "cu_seqlens_q" || name == "cu_seqlens_k" || name == "block_table" || name == "seqlens_k";
}

std::vector<Case> cases_for(const Scenario& s) {
  std::vector<Case> out;
  const Problem& base = s.p;
  for (const auto& [name, member] : bound_tensors(base)) {
    auto m = member;
    const std::string n = name;
    out.push_back({n + "_missing", [m](Problem&, AttentionTensors& t) { t.*m = TensorView{}; }, {"AK1101", "AK1102"}});
    out.push_back({n + "_rank_plus_1", [m](Problem&, AttentionTensors& t) {
                     TensorView& v = t.*m;
                     v.shape[v.rank] = 1, v.strides[v.rank] = 1, ++v.rank;
                   }, {"AK1102"}});
    out.push_back({n + "_rank_minus_1", [m](Problem&, AttentionTensors& t) { --(t.*m).rank; }, {"AK1102"}});
    for (int d = 0; d < 4; ++d) {
      for (const std::int64_t delta : {std::int64_t{1}, std::int64_t{-1}}) {
        out.push_back({n + "_dim" + std::to_string(d) + (delta > 0 ? "_plus_1" : "_minus_1"),
                       [m, d, delta](Problem&, AttentionTensors& t) {
                         TensorView& v = t.*m;
                         if (d < v.rank) v.shape[d] += delta;
                         else v.rank = -1;  // no such dim: make it a rank error instead
                       },
                       // A shorter packed/paged dim or index tensor can also read as wrong values;
                       // a block table may have any number of columns.
                       n == "block_table" && d == 1 && delta > 0
                           ? std::vector<std::string>{"__same__"}
                           : std::vector<std::string>{"AK1103", "AK1102", "AK1108", "AK1111"}});
      }
      out.push_back({n + "_dim" + std::to_string(d) + "_negative", [m, d](Problem&, AttentionTensors& t) {
                       TensorView& v = t.*m;
                       if (d < v.rank) v.shape[d] = -5;
                       else v.rank = -1;
                     }, {"AK1103", "AK1102"}});
    }
    const DType right = n == "q"                ? base.dtype
                        : n == "k" || n == "v"  ? base.k_dtype()
                        : n == "out"            ? base.out_dtype()
                        : is_index(n)           ? DType::i32
                                                : DType::f32;  // lse, sinks, gate
    for (DType wrong : kAllDTypes)
      if (wrong != right)
        out.push_back({n + "_as_" + std::string(dtype_name(wrong)), [m, wrong](Problem&, AttentionTensors& t) {
                         (t.*m).dtype = wrong;
                       }, {"AK1104"}});
    out.push_back({n + "_on_cuda", [m](Problem&, AttentionTensors& t) { (t.*m).device = {DeviceKind::cuda, 0}; }, {"AK1105"}});
    if (!is_index(n) && n != "sinks") {
      out.push_back({n + "_head_dim_stride_2", [m](Problem&, AttentionTensors& t) {
                       TensorView& v = t.*m;
                       v.strides[v.rank - 1] = 2;
                       v.shape[v.rank - 1] /= 2;  // stays inside the buffer
                     }, {"AK1106", "AK1103"}});
    }
    if (n == "out" || n == "lse") {
      out.push_back({n + "_broadcast", [m](Problem&, AttentionTensors& t) { (t.*m).strides[0] = 0; }, {"AK1113"}});
      out.push_back({n + "_overlapping", [m](Problem&, AttentionTensors& t) {
                       TensorView& v = t.*m;
                       v.strides[v.rank - 2] = 1;
                     }, {"AK1113"}});
    }
    if (n == "q" || n == "k" || n == "v" || n == "sinks" || n == "gate")
      for (const float bad : {NAN, INFINITY, -INFINITY})
        out.push_back({n + "_holds_" + (std::isnan(bad) ? std::string("nan") : bad > 0 ? "inf" : "minus_inf"),
                       [m, bad, n](Problem& p, AttentionTensors& t) {
                         TensorView& v = t.*m;
                         // The last element a call reads (the first row of the last sequence/page is read too).
                         std::int64_t off = 0;
                         if (p.paged_kv && n != "q") {
                           const auto* table = t.block_table.ptr<const std::int32_t>();
                           off = table[0] * v.strides[0];  // key 0 of sequence 0
                         }
                         store_from_double(v.data, v.dtype, off, bad);
                       }, {"AK1109"}});
  }
  // Index values that lie.
  if (base.layout == Layout::thd) {
    out.push_back({"cu_seqlens_q_not_from_0", [](Problem&, AttentionTensors& t) { t.cu_seqlens_q.ptr<std::int32_t>()[0] = 1; }, {"AK1108"}});
    out.push_back({"cu_seqlens_q_decreasing", [](Problem&, AttentionTensors& t) { t.cu_seqlens_q.ptr<std::int32_t>()[2] = 1; }, {"AK1108"}});
    out.push_back({"cu_seqlens_k_past_tokens", [](Problem&, AttentionTensors& t) {
                     t.cu_seqlens_k.ptr<std::int32_t>()[t.cu_seqlens_k.shape[0] - 1] += 1;
                   }, {"AK1108"}});
    out.push_back({"cu_seqlens_q_int_max", [](Problem&, AttentionTensors& t) {
                     t.cu_seqlens_q.ptr<std::int32_t>()[t.cu_seqlens_q.shape[0] - 1] = INT_MAX;
                   }, {"AK1108"}});
    out.push_back({"max_seqlen_q_lies", [](Problem& p, AttentionTensors&) { p.seqlen_q = 3; }, {"AK1108"}});
    out.push_back({"max_seqlen_k_lies", [](Problem& p, AttentionTensors&) { p.seqlen_k = 2; }, {"AK1108"}});
  }
  if (base.paged_kv) {
    out.push_back({"block_table_past_pages", [](Problem&, AttentionTensors& t) { t.block_table.ptr<std::int32_t>()[0] = 1 << 30; }, {"AK1111"}});
    out.push_back({"block_table_negative", [](Problem&, AttentionTensors& t) { t.block_table.ptr<std::int32_t>()[0] = -1; }, {"AK1111"}});
    out.push_back({"seqlens_k_negative", [](Problem&, AttentionTensors& t) { t.seqlens_k.ptr<std::int32_t>()[0] = -1; }, {"AK1111"}});
    out.push_back({"seqlens_k_past_table", [](Problem&, AttentionTensors& t) { t.seqlens_k.ptr<std::int32_t>()[1] = INT_MAX; }, {"AK1111"}});
    out.push_back({"seqlen_k_lies", [](Problem& p, AttentionTensors&) { p.seqlen_k = 8; }, {"AK1111"}});
  }
  // The Problem's own fields.
  using Field = int Problem::*;
  const std::pair<const char*, Field> sizes[] = {{"batch", &Problem::batch},         {"seqlen_q", &Problem::seqlen_q},
                                                 {"seqlen_k", &Problem::seqlen_k},   {"heads_q", &Problem::heads_q},
                                                 {"heads_kv", &Problem::heads_kv},   {"head_dim_qk", &Problem::head_dim_qk},
                                                 {"head_dim_v", &Problem::head_dim_v}};
  for (const auto& [field, member] : sizes)
    for (const int value : {0, -1, INT_MIN, INT_MAX, kMaxSeqlen + 1}) {
      auto mm = member;
      out.push_back({std::string(field) + "_" + (value == INT_MIN ? "int_min" : value == INT_MAX ? "int_max" : value == -1 ? "minus_1" : value == 0 ? "0" : "past_limit"),
                     [mm, value](Problem& p, AttentionTensors&) { p.*mm = value; },
                     // Any validation code: sizes, ratios, limits, or the binding that no longer matches;
                     // a plan whose host workspace would not fit (the gated backends hold fp32 partials).
                     {"AK1001", "AK1002", "AK1003", "AK1012", "AK1013", "AK1103", "AK1108", "AK1111"}});
    }
  for (const Window w : {Window{-2, 0}, Window{0, -7}, Window{INT_MIN, INT_MIN}})
    out.push_back({"window_" + std::to_string(w.left) + "_" + std::to_string(w.right), [w](Problem& p, AttentionTensors&) {
                     p.mask = MaskKind::sliding_window;
                     p.window = w;
                   }, {"AK1004"}});
  for (const float x : {0.0f, -1.0f, 1e-30f, 1e30f, NAN, INFINITY})
    out.push_back({"scale_" + std::to_string(x), [x](Problem& p, AttentionTensors&) { p.scale = x; }, {"AK1006"}});
  for (const float x : {-1.0f, 1e-30f, 1e30f, NAN, INFINITY})
    out.push_back({"softcap_" + std::to_string(x), [x](Problem& p, AttentionTensors&) { p.softcap = x; }, {"AK1005"}});
  out.push_back({"page_size_0", [](Problem& p, AttentionTensors&) { p.paged_kv = PagedKv{0}; }, {"AK1009", "AK1103", "AK1101"}});
  return out;
}

struct Outcome {
  int refused = 0, ran = 0, failures = 0;
};

// Runs `c` of `s` on `backend`; EXPECTs the catalogued refusal `c` names.
void run_case(const Backend& backend, const Scenario& s, const Case& c, Outcome& tally) {
  auto created = HostProblemData::create(s.p, s.o);
  ASSERT_TRUE(created.ok()) << created.diagnostics().summary();
  Bound b{std::move(*created), {}, {}};
  b.t = b.data.tensors();
  Problem p = s.p;
  c.mutate(p, b.t);
  for (TensorView* index : {&b.t.cu_seqlens_q, &b.t.cu_seqlens_k, &b.t.block_table, &b.t.seqlens_k}) b.guard(*index);
  Diagnostics why;
  auto plan = backend.plan(p, detect_cpu_platform());
  if (!plan) {
    why = plan.diagnostics();
  } else {
    std::vector<std::byte> ws((*plan)->workspace_bytes());
    why = (*plan)->run(b.t, ws, nullptr);
  }
  const std::string label = std::string(backend.name()) + "/" + s.name + "/" + c.name;
  if (why.ok()) {
    // Only a mutation that leaves the call valid may run ("__same__": a dtype
    // or size equal to the scenario's own, or a field the scenario ignores).
    ++tally.ran;
    const bool allowed = std::find(c.codes.begin(), c.codes.end(), "__same__") != c.codes.end();
    EXPECT_TRUE(allowed) << label << ": ran, expected one of the refusals";
    if (!allowed) ++tally.failures;
    return;
  }
  ++tally.refused;
  bool named = false;
  for (const Diagnostic& d : why) {
    EXPECT_NE(d.code, "AK0000") << label;
    EXPECT_NE(d.code, "AK0003") << label;
    EXPECT_NE(find_catalog_entry(d.code), nullptr) << label << ": " << d.code;
    EXPECT_FALSE(d.solutions.empty()) << label << ": " << d.code;
    named |= std::find(c.codes.begin(), c.codes.end(), d.code) != c.codes.end();
  }
  EXPECT_TRUE(named) << label << ": got " << why.summary();
  if (!named) ++tally.failures;
}

TEST(BadInputMatrix, EveryMutationOfEveryScenarioIsRefusedWithItsCode) {
  Outcome tally;
  int tried = 0;
  const std::pair<std::vector<const char*>, std::vector<Scenario>> groups[] = {
      {{"reference", "cpu_flash"}, scenarios()},
      {{"video_sparse_attn_h3", "hybrid_window_attn_h3"}, gated_scenarios()}};
  for (const auto& [backends, group] : groups)
    for (const char* name : backends) {
      const Backend& backend = *default_registry().find(name);
      for (const Scenario& s : group)
        for (const Case& c : cases_for(s)) {
          run_case(backend, s, c, tally);
          ++tried;
        }
    }
  std::printf("bad-input matrix (C++ API): %d inputs, %d refused with a catalogued code, %d ran (valid variants), "
              "%d unexpected\n", tried, tally.refused, tally.ran, tally.failures);
  EXPECT_GT(tried, 500);
  EXPECT_EQ(tally.failures, 0);
}

// Valid variants: the call must run and agree with the reference on a plain
// contiguous copy of the same values.
TEST(BadInputMatrix, ValidButUnusualBindingsGiveTheReferenceResult) {
  const Problem p = make_test_problem(17, 33, 4, 2, 32, DType::f32);
  auto made = HostProblemData::create(p, {.seed = 11});
  ASSERT_TRUE(made.ok());
  HostProblemData& data = *made;
  const AttentionTensors plain = data.tensors();
  // References on the plain tensors.
  Problem ref_p = p;
  ref_p.out_dtype_override = DType::f64;
  HostTensor ref_out = data.make_output(DType::f64);
  ASSERT_TRUE(reference_attention(ref_p, data.tensors_with_outputs(ref_out.view(), {})).ok());

  // k and v reversed along the sequence (negative strides) and q's seq rows
  // spread (a row stride of twice the plain one) over a larger buffer.
  HostTensor k_rev(DType::f32, {p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk});
  HostTensor v_rev(DType::f32, {p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v});
  HostTensor q_wide(DType::f32, {p.batch, p.seqlen_q, 2 * p.heads_q, p.head_dim_qk});
  auto reversed = [&](const TensorView& src, HostTensor& dst) {
    const std::int64_t row = src.strides[1];
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t j = 0; j < p.seqlen_k; ++j)
        std::memcpy(dst.view().ptr<float>() + b * src.strides[0] + (p.seqlen_k - 1 - j) * row,
                    src.ptr<float>() + b * src.strides[0] + j * row, row * 4);
    TensorView v = src;
    v.data = dst.view().ptr<float>() + (p.seqlen_k - 1) * row;
    v.strides[1] = -row;
    return v;
  };
  AttentionTensors odd = plain;
  odd.k = reversed(plain.k, k_rev);
  odd.v = reversed(plain.v, v_rev);
  for (std::int64_t i = 0; i < plain.q.numel() / p.head_dim_qk; ++i)
    std::memcpy(q_wide.view().ptr<float>() + 2 * i * p.head_dim_qk, plain.q.ptr<float>() + i * p.head_dim_qk, p.head_dim_qk * 4);
  odd.q.data = q_wide.view().data;
  for (int d = 0; d < 3; ++d) odd.q.strides[d] *= 2;
  for (const char* name : {"reference", "cpu_flash"}) {
    auto plan = default_registry().find(name)->plan(p, detect_cpu_platform());
    ASSERT_TRUE(plan.ok());
    std::vector<std::byte> ws((*plan)->workspace_bytes());
    const Diagnostics ran = (*plan)->run(odd, ws, nullptr);
    ASSERT_TRUE(ran.ok()) << name << ": " << ran.summary();
    const ErrorStats e = compare(odd.out, ref_out.view());
    EXPECT_EQ(e.not_finite, 0) << name;
    EXPECT_LE(e.rel_l2, rel_l2_bound(DType::f32)) << name << ": " << describe(e);
  }
}

}  // namespace
}  // namespace attnkit::testing
