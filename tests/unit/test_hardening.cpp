// Issue 20, class by class: each test first builds the input that used to
// crash, hang, read past a buffer or give a wrong answer, then asserts the
// catalogued refusal or the correct result (checked against the reference on
// an equivalent, unremarkable input).
#include <gtest/gtest.h>

#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "attnkit/backends/registry.hpp"
#include "attnkit/backends/reference.hpp"
#include "attnkit/backends/sparse.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/dlpack.hpp"
#include "attnkit/core/host_memory.hpp"
#include "attnkit/core/mask.hpp"
#include "attnkit/select/selector.hpp"
#include "attnkit/sparse/sliding_tile.hpp"
#include "core/text_file.hpp"
#include "testing/backend_runner.hpp"
#include "testing/error_norms.hpp"
#include "testing/guarded_memory.hpp"
#include "testing/parity_cases.hpp"

namespace attnkit::testing {
namespace {

const Backend& backend(const char* name) { return *default_registry().find(name); }
const char* const kCpuBackends[] = {"reference", "cpu_flash"};

HostProblemData make_data(const Problem& p, ProblemDataOptions o = {}) {
  auto d = HostProblemData::create(p, o);
  EXPECT_TRUE(d.ok()) << d.diagnostics().summary();
  return std::move(d.value());
}

// `p` run by `name`, and the reference on the same inputs with `same_mask` (an
// equivalent problem written without the input under test): outputs agree.
void expect_same_result(const char* name, const Problem& p, const Problem& same_mask, ProblemDataOptions o = {}) {
  HostProblemData got = make_data(p, o);
  const Diagnostics ran = run_backend(backend(name), detect_cpu_platform(), got);
  ASSERT_TRUE(ran.ok()) << name << ": " << ran.summary();
  Problem ref = same_mask;
  ref.out_dtype_override = DType::f64;
  HostTensor ref_out = got.make_output(DType::f64);
  ASSERT_TRUE(reference_attention(ref, got.tensors_with_outputs(ref_out.view(), {})).ok());
  const ErrorStats e = compare(got.tensors().out, ref_out.view());
  EXPECT_EQ(e.not_finite, 0) << name << " " << p.summary() << ": " << describe(e);
  EXPECT_LE(e.rel_l2, rel_l2_bound(p)) << name << " " << p.summary() << ": " << describe(e);
}

Problem small(DType t = DType::f32) { return make_test_problem(33, 70, 4, 2, 32, t); }

// ---- 32-bit overflow in index arithmetic -------------------------------------

TEST(Overflow, HugeWindowSidesMeanUnbounded) {
  for (const char* name : kCpuBackends) {
    Problem open = small(), p = small();
    p.mask = MaskKind::sliding_window;
    p.window = {INT_MAX, INT_MAX};
    expect_same_result(name, p, open);
    p.window = {INT_MAX, 0};  // left unbounded, right 0: causal
    Problem causal = small();
    causal.mask = MaskKind::causal;
    expect_same_result(name, p, causal);
    p.window = {3, INT_MAX - 1};
    Problem left_only = small();
    left_only.mask = MaskKind::sliding_window;
    left_only.window = {3, -1};
    expect_same_result(name, p, left_only);
  }
}

// Diagonal offsets (ring attention's shards) place the diagonal anywhere: the
// sides cannot be normalised up front, so visible_keys itself must not overflow.
TEST(Overflow, HugeWindowSidesWithDiagonalOffsets) {
  for (const char* name : kCpuBackends) {
    Problem p = small();
    p.diagonal_offsets = true;
    p.mask = MaskKind::sliding_window;
    HostProblemData data = make_data(p, {.seed = 5});
    HostTensor diagonals(DType::i32, {p.batch});
    diagonals.view().ptr<std::int32_t>()[0] = 40;
    diagonals.view().ptr<std::int32_t>()[1] = -20;
    auto run_with = [&](Window w) {
      Problem q = p;
      q.window = w;
      AttentionTensors t = data.tensors();
      t.diagonal_offsets = diagonals.view();
      auto plan = backend(name).plan(q, detect_cpu_platform());
      EXPECT_TRUE(plan.ok()) << plan.diagnostics().summary();
      std::vector<std::byte> ws((*plan)->workspace_bytes());
      const Diagnostics ran = (*plan)->run(t, ws, nullptr);
      EXPECT_TRUE(ran.ok()) << name << ": " << ran.summary();
      std::vector<float> out(static_cast<std::size_t>(t.out.numel()));
      std::memcpy(out.data(), t.out.data, out.size() * 4);
      return out;
    };
    EXPECT_EQ(run_with({INT_MAX, INT_MAX}), run_with({-1, -1})) << name;
    EXPECT_EQ(run_with({7, INT_MAX}), run_with({7, -1})) << name;
    EXPECT_EQ(run_with({INT_MAX - 1, 2}), run_with({-1, 2})) << name;
    // A diagonal past +-2^30 would overflow i + diagonal: refused.
    diagonals.view().ptr<std::int32_t>()[1] = INT_MIN;
    Problem q = p;
    AttentionTensors t = data.tensors();
    t.diagonal_offsets = diagonals.view();
    EXPECT_TRUE(validate_binding(q, t).has_code("AK1012"));
  }
}

TEST(Overflow, EffectiveWindowKeepsTheArithmeticInRange) {
  Problem p = small();
  p.mask = MaskKind::sliding_window;
  p.window = {INT_MAX, INT_MAX};
  EXPECT_EQ(p.effective_window(), (Window{-1, -1}));
  p.window = {p.seqlen_k - 1, p.seqlen_q - 1};  // the widest sides that still mean something stay
  EXPECT_EQ(p.effective_window(), (Window{p.seqlen_k - 1, p.seqlen_q - 1}));
  // At the length limit with the widest meaningful sides, visible_keys stays in int range.
  const int n = kMaxSeqlen;
  const KeyRange first = visible_keys(0, n, n, n - 1, n - 1), last = visible_keys(n - 1, n, n, n - 1, n - 1);
  EXPECT_EQ(first.lo, 0);
  EXPECT_EQ(first.hi, n);
  EXPECT_EQ(last.lo, 0);
  EXPECT_EQ(last.hi, n);
}

TEST(Overflow, SequenceLengthsAndElementCountsPastTheLimitsAreRefused) {
  Problem p = small();
  p.seqlen_q = kMaxSeqlen + 1;
  EXPECT_TRUE(validate_problem(p).has_code("AK1012"));
  p = small();
  p.batch = 1 << 20, p.seqlen_q = p.seqlen_k = 1 << 20, p.heads_q = p.heads_kv = 64, p.head_dim_qk = p.head_dim_v = 128;
  EXPECT_TRUE(validate_problem(p).has_code("AK1012"));  // 2^53 elements: past 2^48
  p = small();
  p.mask = MaskKind::custom;
  p.batch = INT_MAX, p.seqlen_q = p.seqlen_k = 1 << 20;
  EXPECT_TRUE(validate_problem(p).has_code("AK1012"));
}

TEST(Overflow, NamedArchWithTooManyDigitsIsRefusedNotWrapped) {
  // 4294967386 = 2^32 + 90: 32-bit parsing wrapped it to sm_90.
  for (const char* name : {"cuda:sm4294967386", "cuda:sm0090", "cuda:sm", "cuda:sm9x", "cuda:sm-90"})
    EXPECT_TRUE(parse_platform(name).diagnostics().has_code("AK2112")) << name;
  EXPECT_EQ(parse_platform("cuda:sm90")->sm, 90);
}

TEST(Overflow, ParallelDegreeProductIsExact) {
  // 65536 * 65536 wrapped to 0 in int and matched --sp-degree 0's neighbour checks.
  select::DeploymentConfig c;
  c.model = "wan";
  c.platform = "cuda:sm90";
  c.ring_degree = 65536;
  c.ulysses_degree = 65537;
  c.sp_degree = 65536;
  const select::CheckResult r = select::check_deployment(c);
  ASSERT_TRUE(r.diagnostics.has_code("AK5001")) << r.diagnostics.summary();
  bool quoted = false;
  for (const Diagnostic& d : r.diagnostics) quoted |= d.message.find("4295032832") != std::string::npos;
  EXPECT_TRUE(quoted) << r.diagnostics.summary();
}

// Offsets past 2^31 elements through strides: a batch stride of 2^31 + 64
// elements puts sequence 1 past every 32-bit offset. Only the touched pages of
// the sparse region are backed; a wrapped offset would read zeros (or fault).
TEST(Overflow, OffsetsPast2To31ElementsAreComputedNotWrapped) {
  Problem p = make_test_problem(40, 70, 2, 1, 32, DType::f32);
  p.return_lse = true;
  HostProblemData compact = make_data(p, {.seed = 7});
  const std::int64_t stride0 = (std::int64_t{1} << 31) + 64;  // elements between sequences
  SparseRegion region(static_cast<std::size_t>(2 * stride0) * sizeof(float));
  ASSERT_TRUE(region.ok()) << "no virtual memory for the sparse region";
  const AttentionTensors c = compact.tensors();
  // Each of q, k, v, out gets its own slice of the region, 1/4 of a batch stride apart.
  auto place = [&](const TensorView& src, int slot) {
    TensorView v = src;
    v.data = region.data() + static_cast<std::size_t>(slot) * (stride0 / 4) * sizeof(float);
    v.strides[0] = stride0;
    for (std::int64_t b = 0; b < v.shape[0]; ++b)
      std::memcpy(v.bytes() + b * stride0 * 4, src.bytes() + b * src.strides[0] * 4, src.strides[0] * 4);
    return v;
  };
  AttentionTensors big = c;
  big.q = place(c.q, 0), big.k = place(c.k, 1), big.v = place(c.v, 2), big.out = place(c.out, 3);
  for (const char* name : kCpuBackends) {
    auto plan = backend(name).plan(p, detect_cpu_platform());
    ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
    std::vector<std::byte> ws((*plan)->workspace_bytes());
    ASSERT_TRUE((*plan)->run(big, ws, nullptr).ok()) << name;
    ASSERT_TRUE((*plan)->run(c, ws, nullptr).ok()) << name;
    for (std::int64_t b = 0; b < 2; ++b)
      EXPECT_EQ(std::memcmp(big.out.bytes() + b * stride0 * 4, c.out.bytes() + b * c.out.strides[0] * 4,
                            c.out.strides[0] * 4), 0)
          << name << ": sequence " << b << " differs when it lives past 2^31 elements";
  }
}

// ---- sizes checked before allocating -----------------------------------------

TEST(Allocation, HostDataPastAvailableMemoryIsRefusedBeforeAllocating) {
  Problem p = small();
  p.batch = 4096, p.seqlen_q = p.seqlen_k = 1 << 20, p.heads_q = p.heads_kv = 1, p.head_dim_qk = p.head_dim_v = 8;
  const auto d = HostProblemData::create(p);  // 4096 * 2^20 * 8 * 16 bytes: far past this machine
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(d.diagnostics().has_code("AK1013")) << d.diagnostics().summary();
  EXPECT_TRUE(check_host_allocation("x", -1).has_code("AK1013"));
  EXPECT_TRUE(check_host_allocation("x", 1024).ok());
}

// `attnkit run --batch 2147483647 --seqlen 1 --heads 1 --head-dim 8` ran for
// minutes: the per-sequence length vectors (2 x 8 GiB) were made before the
// size check that then refused the 77 GB of tensors.
TEST(Allocation, HostDataOfAHugeBatchIsRefusedBeforeItsLengthVectors) {
  Problem p = small();
  p.batch = INT32_MAX, p.seqlen_q = p.seqlen_k = 1, p.heads_q = p.heads_kv = 1, p.head_dim_qk = p.head_dim_v = 8;
  const auto start = std::chrono::steady_clock::now();
  const auto d = HostProblemData::create(p);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(d.diagnostics().has_code("AK1013")) << d.diagnostics().summary();
  EXPECT_LT(seconds, 1.0) << "refused after allocating and filling batch-sized vectors";
  p.layout = Layout::thd;  // explicit lengths of the wrong count are refused before anything is made
  EXPECT_TRUE(HostProblemData::create(p, {.q_lens = {1, 1}}).diagnostics().has_code("AK1108"));
}

TEST(Allocation, PlansWhoseWorkspaceCannotExistAreRefused) {
  Problem p = small();
  p.paged_kv = PagedKv{16};
  p.seqlen_k = kMaxSeqlen;  // cpu_flash gathers one sequence per thread: seqlen_k * (dqk + dv) * 4 bytes each
  p.head_dim_qk = p.head_dim_v = 512;
  const auto plan = backend("cpu_flash").plan(p, detect_cpu_platform());
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(plan.diagnostics().has_code("AK1013")) << plan.diagnostics().summary();
}

TEST(Allocation, TextFilesAreReadBoundedAndDirectoriesRefused) {
  EXPECT_FALSE(read_text_file("/dev/zero").text.has_value());  // endless: stops at the limit
  EXPECT_NE(read_text_file("/dev/zero").problem.find("larger than"), std::string::npos);
  EXPECT_NE(read_text_file("/tmp").problem.find("directory"), std::string::npos);
  EXPECT_FALSE(readable_file("/tmp"));
  EXPECT_FALSE(read_text_file("/nonexistent/x.yaml").text.has_value());
  const std::string path = (std::filesystem::temp_directory_path() / "attnkit_hardening_small.yaml").string();
  std::ofstream(path) << "topk: 0.5\n";
  EXPECT_EQ(read_text_file(path).text.value_or(""), "topk: 0.5\n");
  // A FIFO without a writer ends (empty), it does not block the open.
  const std::string fifo = (std::filesystem::temp_directory_path() / "attnkit_hardening_fifo").string();
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(read_text_file(fifo).text.value_or("x"), "");
  std::filesystem::remove(fifo);
}

// OMP_NUM_THREADS=100000 attnkit run: SIGSEGV in GOMP_parallel (libgomp lays a
// team's start data out on the caller's stack). The team size is capped.
TEST(Allocation, AHugeOpenMpDefaultTeamIsCappedNotACrash) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(100000);  // what OMP_NUM_THREADS=100000 sets
  EXPECT_LE(host_threads(), std::max(1024, omp_get_num_procs()));
  for (const char* name : kCpuBackends) expect_same_result(name, small(), small());
  omp_set_num_threads(before);
  EXPECT_EQ(host_threads(), std::clamp(before, 1, std::max(1024, omp_get_num_procs())));
}

// ---- parser failures that escape ---------------------------------------------

select::CheckResult check_config(const std::string& config) {
  select::DeploymentConfig c;
  c.model = "wan";
  c.platform = "cuda:sm90";
  c.attention_backend = "sparge_attn";
  c.attention_backend_config = config;
  return select::check_deployment(c);
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(Parsers, JsonNumbersPastDoubleAreMalformedNotAborts) {
  EXPECT_TRUE(check_config("{\"topk\": 1e400}").diagnostics.has_code("AK3106"));
  EXPECT_TRUE(check_config("{\"topk\": -1e400}").diagnostics.has_code("AK3106"));
  // Past int64, an integer stays a number (a double), and then is out of range.
  const select::CheckResult r = check_config("{\"topk\": 18446744073709551615}");
  EXPECT_TRUE(r.diagnostics.has_code("AK3103")) << r.diagnostics.summary();
}

TEST(Parsers, DeepNestingIsRefusedWithoutRecursingTheStackAway) {
  const std::string deep_json = "{\"topk\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_TRUE(check_config(deep_json).diagnostics.has_code("AK3106"));
  const std::string deep_yaml = temp_file("attnkit_deep.yaml", "topk: " + std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_TRUE(check_config(deep_yaml).diagnostics.has_code("AK3106"));
  // yaml-cpp's own guard (DeepRecursion) stops at about 500 flow levels: 400 must parse
  // without exhausting the stack (the sanitizer build has the largest frames).
  const std::string nested = temp_file("attnkit_nested.yaml", "topk: " + std::string(400, '[') + std::string(400, ']'));
  EXPECT_TRUE(check_config(nested).diagnostics.has_code("AK3102")) << check_config(nested).diagnostics.summary();
  select::DeploymentConfig c;
  c.model = temp_file("attnkit_deep_profile.yaml", "name: x\ncomponents: " + std::string(100000, '['));
  c.platform = "cpu";
  EXPECT_TRUE(select::check_deployment(c).diagnostics.has_code("AK4021"));
}

// --component-attention-backends as a JSON object (issue 14) goes through the
// same bounded parser as the configs.
TEST(Parsers, ComponentBackendsJsonIsBoundedLikeConfigs) {
  for (const std::string& text : {std::string("{\"text_encoder\": 1e400}"),
                                  "{\"text_encoder\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
                                  std::string("{\"text_encoder\": \"sdpa\""), std::string("{\"text_encoder\": [1, 2]}")}) {
    select::DeploymentConfig c;
    c.model = "wan";
    c.platform = "cuda:sm90";
    c.component_attention_backends = text;
    const select::CheckResult r = select::check_deployment(c);
    EXPECT_TRUE(r.diagnostics.has_code("AK3007")) << text.substr(0, 40) << r.diagnostics.summary();
  }
}

TEST(Parsers, NonScalarYamlKeysAreMalformed) {
  for (const char* text : {"? [a, b]\n: 1\n", "? {a: 1}\n: 2\n", "[1, 2]: 3\n"}) {
    const select::CheckResult r = check_config(temp_file("attnkit_key.yaml", text));
    EXPECT_TRUE(r.diagnostics.has_code("AK3106")) << text << ": " << r.diagnostics.summary();
  }
}

// k=v pairs refused a repeated key; JSON kept the last value and YAML (a file)
// the last too, silently: {"topk": 0.5, "topk": 7} was valid.
TEST(Parsers, RepeatedKeysAreMalformedInEveryConfigForm) {
  for (const std::string& config :
       {std::string("topk=0.5,topk=7"), std::string("{\"topk\": 0.5, \"topk\": 7}"),
        std::string("{\"topk\": 7, \"topk\": 0.5}"), temp_file("attnkit_repeated.json", "{\"topk\": 7, \"topk\": 0.5}"),
        temp_file("attnkit_repeated.yaml", "topk: 7\ntopk: 0.5\n")}) {
    const select::CheckResult r = check_config(config);
    EXPECT_TRUE(r.diagnostics.has_code("AK3106")) << config << ": " << r.diagnostics.summary();
    EXPECT_NE(r.diagnostics.summary().find("'topk' is given twice"), std::string::npos) << r.diagnostics.summary();
  }
  // The same key in a nested object is no repeat (that value is refused for its type).
  EXPECT_TRUE(check_config("{\"topk\": 0.5, \"x\": {\"topk\": 1}}").diagnostics.has_code("AK3102"));
  select::DeploymentConfig c;
  c.model = "wan";
  c.platform = "cuda:sm90";
  c.component_attention_backends = "{\"text_encoder\": \"sdpa\", \"text_encoder\": \"fa3\"}";
  EXPECT_TRUE(select::check_deployment(c).diagnostics.has_code("AK3007")) << select::check_deployment(c).diagnostics.summary();
}

TEST(Parsers, HugeLayerRangesAreRefusedNotMaterialised) {
  for (const char* text : {"0-2147483647", "0-99999999999", "65536"})
    EXPECT_FALSE(select::parse_layer_list(text).ok()) << text;
  EXPECT_EQ(select::parse_layer_list("0-3,7").value(), (std::vector<int>{0, 1, 2, 3, 7}));
}

TEST(Parsers, DirectoriesAndEndlessFilesAreUnreadable) {
  EXPECT_TRUE(check_config("/tmp/").diagnostics.has_code("AK3105"));
  EXPECT_TRUE(check_config("/dev/zero").diagnostics.has_code("AK3105"));
  for (const char* model : {"/tmp/", "/dev/zero"}) {
    select::DeploymentConfig c;
    c.model = model;
    c.platform = "cpu";
    EXPECT_TRUE(select::check_deployment(c).diagnostics.has_code("AK4022")) << model;
  }
}

// ---- profiles that `check` called valid but every call refused ----------------

TEST(Profiles, RoleShapesAreValidatedAtLoad) {
  const std::string base = "name: bad\ncomponents:\n  - name: transformer\n    roles:\n      - name: self\n";
  // A field below its minimum is the wrong value (AK4024); fields valid one by
  // one that make no valid Problem together are a malformed role (AK4021).
  // (layers: 0 is valid: a role declared that this checkpoint builds no layer of.)
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"        heads: 0\n", "AK4024"},    {"        heads: -4\n", "AK4024"},
      {"        head_dim: 0\n", "AK4024"}, {"        seqlen: 0\n", "AK4024"},
      {"        kv_heads: 0\n", "AK4024"}, {"        heads: 6\n        kv_heads: 4\n", "AK4021"},
      {"        head_dim: 4096\n", "AK4021"}};
  for (const auto& [role, code] : cases) {
    select::DeploymentConfig c;
    c.model = temp_file("attnkit_bad_role.yaml", base + role);
    c.platform = "cpu";
    const select::CheckResult r = select::check_deployment(c);
    EXPECT_FALSE(r.ok) << role;
    EXPECT_TRUE(r.diagnostics.has_code(code)) << role << r.diagnostics.summary();
  }
}

// Before: a profile whose every role had layers: 0 was INVALID with no
// diagnostic at all; a repeated key kept its first value (yaml-cpp's node[key])
// and a second YAML document was dropped, both silently.
TEST(Profiles, NoLayerRepeatedKeysAndSecondDocumentsAreMalformed) {
  const std::string role = "      - {name: self, layers: 1, heads: 4, head_dim: 64}\n";
  const std::string base = "name: x\ncomponents:\n  - name: t\n    roles:\n" + role;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"name: x\ncomponents:\n  - name: t\n    roles:\n      - {name: self, layers: 0}\n      - {name: cross, layers: 0}\n",
       "no role builds a layer"},
      {"name: x\nname: y\ncomponents:\n  - name: t\n    roles:\n" + role, "key 'name' appears twice"},
      {"name: x\ncomponents:\n  - name: t\n    roles:\n      - {name: self, heads: 4, heads: 6}\n",
       "key 'heads' appears twice"},
      {base + "---\n" + base, "more than one YAML document"}};
  for (const auto& [text, why] : cases) {
    select::DeploymentConfig c;
    c.model = temp_file("attnkit_profile_case.yaml", text);
    c.platform = "cpu";
    const select::CheckResult r = select::check_deployment(c);
    EXPECT_FALSE(r.ok) << text;
    EXPECT_TRUE(r.diagnostics.has_code("AK4021")) << text << r.diagnostics.summary();
    EXPECT_NE(r.diagnostics.summary().find(why), std::string::npos) << r.diagnostics.summary();
  }
  select::DeploymentConfig c;  // still valid: one role of two builds no layer, a trailing '---'
  c.model = temp_file("attnkit_profile_case.yaml", base + "      - {name: cross, layers: 0}\n---\n");
  c.platform = "cpu";
  EXPECT_TRUE(select::check_deployment(c).ok) << select::check_deployment(c).diagnostics.summary();
}

// yaml-cpp 0.7's LoadAll never returns on a profile that starts " ," (it yields
// empty documents forever; fuzz_profile found it): the look past the first
// document is bounded, and the text is refused.
TEST(Profiles, TextThatNeverEndsItsDocumentsIsRefusedNotAHang) {
  const std::string text = " ,# Wan-like video DiT\nname: wan\nkind: video DiT\nrules:\n  sparse_rejects_ring: true\ncomponents:";
  select::DeploymentConfig c;
  c.model = temp_file("attnkit_profile_case.yaml", text);
  c.platform = "cpu";
  const select::CheckResult r = select::check_deployment(c);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.diagnostics.has_code("AK4021")) << r.diagnostics.summary();
}

// YAML aliases repeat one list of roles in every component that names it: 108 KB
// of profile made 2000 x 2000 roles and `check` ran 78 s (a 1 MiB one: hours).
TEST(Profiles, AliasedRoleListsCannotMultiplyTheWork) {
  std::string roles;
  for (int i = 0; i < 2000; ++i) roles += (i ? ", " : "") + std::string("{name: r") + std::to_string(i) + ", layers: 1}";
  std::string text = "name: x\ncomponents:\n  - {name: c0, roles: &r [" + roles + "]}\n";
  for (int i = 1; i < 2000; ++i) text += "  - {name: c" + std::to_string(i) + ", roles: *r}\n";
  select::DeploymentConfig c;
  c.model = temp_file("attnkit_alias_roles.yaml", text);
  c.platform = "cpu";
  const auto start = std::chrono::steady_clock::now();
  const select::CheckResult r = select::check_deployment(c);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  EXPECT_TRUE(r.diagnostics.has_code("AK4021")) << r.diagnostics.summary();
  EXPECT_NE(r.diagnostics.summary().find("at most 64"), std::string::npos) << r.diagnostics.summary();
  // The components alone, each of one aliased role: bounded too.
  text = "name: x\ncomponents:\n  - {name: c0, roles: &r [{name: self}]}\n";
  for (int i = 1; i < 65; ++i) text += "  - {name: c" + std::to_string(i) + ", roles: *r}\n";
  c.model = temp_file("attnkit_alias_roles.yaml", text);
  EXPECT_TRUE(select::check_deployment(c).diagnostics.has_code("AK4021"));
}

// ---- index tensors of the wrong dtype or size, at the end of a guarded page ----
// Reading one element past an index tensor faults; validation must refuse
// without reading (wrong dtype / length) or read exactly what is there.

struct VarlenGuarded {
  HostProblemData data;
  AttentionTensors t;
  GuardedBuffer cu_q{64}, cu_k{64};
};

Problem varlen_problem() {
  Problem p = make_test_problem(9, 12, 2, 1, 16, DType::f32);
  p.layout = Layout::thd;
  p.batch = 3;
  return p;
}

TEST(IndexTensors, WrongDtypeCuSeqlensAreRefusedBeforeAnyRead) {
  const Problem p = varlen_problem();
  HostProblemData data = make_data(p, {.q_lens = {4, 0, 9}, .k_lens = {12, 3, 5}});
  for (DType wrong : {DType::u8, DType::i8, DType::f16, DType::bf16}) {
    GuardedBuffer buf(4 * dtype_size(wrong));
    AttentionTensors t = data.tensors();
    t.cu_seqlens_q = guarded_view(buf, wrong, {4});
    std::memset(buf.data(), 0, buf.size());
    const Diagnostics d = validate_binding(p, t);
    EXPECT_TRUE(d.has_code("AK1104")) << dtype_name(wrong) << ": " << d.summary();
    EXPECT_FALSE(d.has_code("AK1108")) << "values of a wrong-dtype tensor were read";
  }
}

TEST(IndexTensors, ShortIndexTensorsAreRefusedBeforeAnyRead) {
  const Problem p = varlen_problem();
  HostProblemData data = make_data(p, {.q_lens = {4, 0, 9}, .k_lens = {12, 3, 5}});
  for (std::int64_t n : {0, 1, 2, 3}) {  // batch + 1 = 4 needed
    GuardedBuffer buf(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * 4);
    std::memset(buf.data(), 0, buf.size());
    AttentionTensors t = data.tensors();
    t.cu_seqlens_k = guarded_view(buf, DType::i32, {n});
    EXPECT_TRUE(validate_binding(p, t).has_code("AK1103")) << n;
  }
}

TEST(IndexTensors, ExactIndexTensorsAtAGuardPageRunOnEveryCpuBackend) {
  Problem p = varlen_problem();
  HostProblemData data = make_data(p, {.q_lens = {4, 0, 9}, .k_lens = {12, 3, 5}});
  GuardedBuffer cu_q(16), cu_k(16);
  AttentionTensors t = data.tensors();
  t.cu_seqlens_q = guarded_view(cu_q, DType::i32, {4});
  t.cu_seqlens_k = guarded_view(cu_k, DType::i32, {4});
  std::memcpy(cu_q.data(), data.tensors().cu_seqlens_q.data, 16);
  std::memcpy(cu_k.data(), data.tensors().cu_seqlens_k.data, 16);
  for (const char* name : kCpuBackends) {
    auto plan = backend(name).plan(p, detect_cpu_platform());
    ASSERT_TRUE(plan.ok());
    std::vector<std::byte> ws((*plan)->workspace_bytes());
    EXPECT_TRUE((*plan)->run(t, ws, nullptr).ok()) << name;
  }
}

TEST(IndexTensors, PagedTablesOfTheWrongDtypeOrSizeAtAGuardPage) {
  Problem p = make_test_problem(1, 40, 4, 2, 16, DType::f32);
  p.paged_kv = PagedKv{16};
  HostProblemData data = make_data(p);
  const AttentionTensors good = data.tensors();
  const std::int64_t B = p.batch, max_pages = good.block_table.shape[1];
  {
    GuardedBuffer buf(static_cast<std::size_t>(B * max_pages));  // one byte per entry
    AttentionTensors t = good;
    t.block_table = guarded_view(buf, DType::u8, {B, max_pages});
    std::memset(buf.data(), 0, buf.size());
    EXPECT_TRUE(validate_binding(p, t).has_code("AK1104"));
  }
  {
    GuardedBuffer buf(static_cast<std::size_t>(B));
    AttentionTensors t = good;
    t.seqlens_k = guarded_view(buf, DType::u8, {B});
    std::memset(buf.data(), 40, buf.size());
    EXPECT_TRUE(validate_binding(p, t).has_code("AK1104"));
  }
  {
    GuardedBuffer buf(static_cast<std::size_t>(B) * 4);  // exact int32 tensors read in bounds
    AttentionTensors t = good;
    t.seqlens_k = guarded_view(buf, DType::i32, {B});
    std::memcpy(buf.data(), good.seqlens_k.data, buf.size());
    for (const char* name : kCpuBackends) {
      auto plan = backend(name).plan(p, detect_cpu_platform());
      std::vector<std::byte> ws((*plan)->workspace_bytes());
      EXPECT_TRUE((*plan)->run(t, ws, nullptr).ok()) << name;
    }
  }
}

TEST(IndexTensors, NegativeShapesAndRanksFromDlpackAreRefused) {
  std::int64_t shape[2] = {4, -1};
  float x = 0;
  DLTensor t{};
  t.data = &x;
  t.device = {kDLCPU, 0};
  t.dtype = {kDLFloat, 32, 1};
  t.ndim = -3;
  EXPECT_TRUE(from_dlpack(t, "q").diagnostics().has_code("AK1102"));
  t.ndim = 2;
  t.shape = nullptr;
  EXPECT_TRUE(from_dlpack(t, "q").diagnostics().has_code("AK1103"));
  t.shape = shape;
  const auto v = from_dlpack(t, "cu_seqlens_q");
  ASSERT_TRUE(v.ok());  // imported as-is, refused at binding
  Problem p = varlen_problem();
  HostProblemData data = make_data(p, {.q_lens = {4, 0, 9}, .k_lens = {12, 3, 5}});
  AttentionTensors bound = data.tensors();
  bound.cu_seqlens_q = *v;
  bound.cu_seqlens_q.rank = 1;
  bound.cu_seqlens_q.shape[0] = -1;
  EXPECT_TRUE(validate_binding(p, bound).has_code("AK1103"));
  t.dtype = {kDLInt, 64, 1};
  const Diagnostics d = from_dlpack(t, "cu_seqlens_q").diagnostics();
  ASSERT_TRUE(d.has_code("AK1104"));
  EXPECT_NE(d.begin()->message.find("'cu_seqlens_q' has dtype int64"), std::string::npos) << d.summary();
}

// ---- metadata that lies --------------------------------------------------------

TEST(Metadata, MaxSeqlenBelowTheRealLengthsIsRefused) {
  Problem p = varlen_problem();
  HostProblemData data = make_data(p, {.q_lens = {4, 0, 9}, .k_lens = {12, 3, 5}});
  Problem lying = p;
  lying.seqlen_q = 5;  // sequence 2 has 9 queries: rows 5..8 were never written
  for (const char* name : kCpuBackends) {
    auto plan = backend(name).plan(lying, detect_cpu_platform());
    ASSERT_TRUE(plan.ok());
    std::vector<std::byte> ws((*plan)->workspace_bytes());
    const Diagnostics d = (*plan)->run(data.tensors(), ws, nullptr);
    EXPECT_TRUE(d.has_code("AK1108")) << name << ": " << d.summary();
  }
  lying = p;
  lying.seqlen_k = 4;
  EXPECT_TRUE(validate_binding(lying, data.tensors()).has_code("AK1108"));
}

TEST(Metadata, CachedLengthsPastSeqlenKAreRefused) {
  Problem p = make_test_problem(1, 64, 4, 2, 16, DType::f32);
  p.paged_kv = PagedKv{16};
  HostProblemData data = make_data(p);
  Problem lying = p;
  lying.seqlen_k = 20;  // seqlens_k = 64: cpu_flash's per-thread gather buffer holds 20 rows
  auto plan = backend("cpu_flash").plan(lying, detect_cpu_platform());
  ASSERT_TRUE(plan.ok());
  std::vector<std::byte> ws((*plan)->workspace_bytes());
  const Diagnostics d = (*plan)->run(data.tensors(), ws, nullptr);
  EXPECT_TRUE(d.has_code("AK1111")) << d.summary();
}

TEST(Metadata, NonFiniteValuesInTheReadPagesAreRefused) {
  Problem p = make_test_problem(1, 40, 4, 2, 16, DType::f32);
  p.paged_kv = PagedKv{16};
  for (const bool in_v : {false, true}) {
    HostProblemData data = make_data(p);
    const AttentionTensors t = data.tensors();
    const TensorView& kv = in_v ? t.v : t.k;
    // Sequence 1's key 33 (page block_table[1, 2], slot 1), kv head 1, dim 5.
    const std::int32_t page = t.block_table.ptr<std::int32_t>()[1 * t.block_table.strides[0] + 2];
    kv.ptr<float>()[page * kv.strides[0] + 1 * kv.strides[1] + 1 * kv.strides[2] + 5] = INFINITY;
    for (const char* name : kCpuBackends) {
      const Diagnostics d = run_backend(backend(name), detect_cpu_platform(), data);
      EXPECT_TRUE(d.has_code("AK1109")) << name << (in_v ? " v: " : " k: ") << d.summary();
    }
  }
  // NaN in an unread slot (keys 40..47 of a sequence's third page) and in the
  // spare pages no table names is fine: those are never read.
  HostProblemData data = make_data(p);
  const AttentionTensors t = data.tensors();
  const auto* table = t.block_table.ptr<std::int32_t>();
  std::vector<bool> named(static_cast<std::size_t>(t.k.shape[0]), false);
  for (std::int64_t i = 0; i < t.block_table.numel(); ++i)
    if (table[i] >= 0) named[static_cast<std::size_t>(table[i])] = true;
  for (std::int64_t page = 0; page < t.k.shape[0]; ++page)
    for (std::int64_t slot = 0; slot < p.paged_kv->page_size; ++slot) {
      const bool unread = !named[static_cast<std::size_t>(page)] || (page == table[2] && slot >= 8);
      if (unread) t.k.ptr<float>()[page * t.k.strides[0] + slot * t.k.strides[1]] = NAN;
      if (unread) t.v.ptr<float>()[page * t.v.strides[0] + slot * t.v.strides[1]] = NAN;
    }
  for (const char* name : kCpuBackends)
    EXPECT_TRUE(run_backend(backend(name), detect_cpu_platform(), data).ok()) << name;
}

// ---- silently accepted values ----------------------------------------------------

TEST(Values, ExtremeScaleAndSoftcapAreRefused) {
  for (float x : {1e-30f, 1e30f, 1e-7f, 2e6f, -1.0f, NAN, INFINITY}) {
    Problem p = small();
    p.scale = x;
    EXPECT_TRUE(validate_problem(p).has_code("AK1006")) << x;
    p = small();
    p.softcap = x;
    EXPECT_TRUE(validate_problem(p).has_code("AK1005")) << x;
  }
  Problem p = small();
  p.scale = 1e-6f;
  p.softcap = 1e6f;
  EXPECT_TRUE(validate_problem(p).ok());
}

TEST(Values, ScoresThatOverflowFp32AreRefusedNotReturned) {
  Problem p = make_test_problem(8, 8, 1, 1, 16, DType::f32);
  p.batch = 1;
  HostProblemData data = make_data(p);
  const AttentionTensors t = data.tensors();
  for (std::int64_t i = 0; i < t.q.numel(); ++i) t.q.ptr<float>()[i] = (i % 2 ? 1e20f : -1e20f);
  for (std::int64_t i = 0; i < t.k.numel(); ++i) t.k.ptr<float>()[i] = 1e20f;  // q.k: +-1e40 partial sums
  const Diagnostics d = run_backend(backend("cpu_flash"), detect_cpu_platform(), data);
  EXPECT_TRUE(d.has_code("AK1114")) << d.summary() << " out[0] = " << data.tensors().out.ptr<float>()[0];
  EXPECT_TRUE(run_backend(backend("reference"), detect_cpu_platform(), data).ok());  // fp64: exact
}

TEST(Values, OutputsThatOverlapThemselvesAreRefused) {
  Problem p = small();
  HostProblemData data = make_data(p);
  AttentionTensors t = data.tensors();
  t.out.strides[1] = 0;  // every query row writes the same memory
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1113"));
  t = data.tensors();
  t.out.strides[2] = 1;  // heads overlap the head dim
  EXPECT_TRUE(validate_binding(p, t).has_code("AK1113"));
  t = data.tensors();
  t.q.strides[1] = 0;  // inputs may be broadcast
  EXPECT_FALSE(validate_binding(p, t).has_code("AK1113"));
}

TEST(Values, StridedSinksAreValidAndRead) {
  Problem p = small();
  p.has_sinks = true;
  for (const char* name : kCpuBackends) {
    HostProblemData data = make_data(p, {.seed = 3});
    HostTensor spread(DType::f32, {p.heads_q * 3});
    AttentionTensors t = data.tensors();
    for (int h = 0; h < p.heads_q; ++h) spread.view().ptr<float>()[3 * h] = t.sinks.ptr<float>()[h];
    TensorView strided = t.sinks;
    strided.data = spread.view().data;
    strided.strides[0] = 3;
    t.sinks = strided;
    auto plan = backend(name).plan(p, detect_cpu_platform());
    std::vector<std::byte> ws((*plan)->workspace_bytes());
    ASSERT_TRUE((*plan)->run(t, ws, nullptr).ok()) << name;
    HostTensor with_strided = data.make_output(p.out_dtype());
    std::memcpy(with_strided.view().data, t.out.data, t.out.numel() * 4);
    ASSERT_TRUE((*plan)->run(data.tensors(), ws, nullptr).ok());
    EXPECT_EQ(std::memcmp(with_strided.view().data, data.tensors().out.data, t.out.numel() * 4), 0) << name;
  }
}

// ---- refusals with a code ---------------------------------------------------------

TEST(Codes, ExplainOfATypoNamesTheNearestCode) {
  const auto e = lookup_catalog_entry("AK1O02");
  ASSERT_FALSE(e.ok());
  ASSERT_TRUE(e.diagnostics().has_code("AK0001"));
  EXPECT_NE(e.diagnostics().begin()->message.find("AK1002"), std::string::npos);
  EXPECT_FALSE(lookup_catalog_entry(std::string(100000, 'x')).ok());
  EXPECT_EQ((*lookup_catalog_entry(" ak1002 "))->code, "AK1002");
}

// explain by text on a text far longer than any message: words only, the
// template match (std::regex, recursive per character) is not tried.
TEST(Codes, ExplainOfAHugeTextEndsAndRanksByWords) {
  const Result<Explanation> r = explain_text("internal error: " + std::string(200000, 'x'));
  ASSERT_TRUE(r.ok()) << r.diagnostics().summary();
  EXPECT_EQ(r->matches.front().entry->code, "AK0003");
  EXPECT_TRUE(explain_text(std::string(200000, ' ') + "?").diagnostics().has_code("AK0004"));
}

// ---- the sparse backends' inputs (issue 19) -------------------------------------

TEST(Sparse, VideoGridsWhoseTokensPassInt64AreRefusedNotWrapped) {
  Problem p = make_test_problem(64, 64, 2, 2, 32, DType::f32);
  p.video = VideoGrid{INT_MAX, INT_MAX, INT_MAX};  // 2^93 tokens: an int64 product would overflow
  EXPECT_TRUE(validate_problem(p).has_code("AK1016"));
  p.video = VideoGrid{2, 4, 8};
  EXPECT_TRUE(validate_problem(p).ok()) << validate_problem(p).summary();
}

TEST(Sparse, BlockListHelpersReadHostMemoryOnlyAndCheckTheDenseMaskFirst) {
  Problem p;
  p.seqlen_q = 16;
  p.seqlen_k = 1 << 30;  // 2^26 key blocks
  p.batch = 1024;
  p.block_sparse = BlockSparse{16, 16, 1024, 1};
  ASSERT_TRUE(validate_problem(p).ok()) << validate_problem(p).summary();
  std::vector<std::int32_t> offsets(1025, 0);  // every list empty
  TensorView off = make_view(offsets.data(), DType::i32, {1025});
  TensorView idx = make_view(offsets.data(), DType::i32, {0});
  // 1024 x 2^26 bytes of dense mask: refused before allocating.
  EXPECT_TRUE(block_sparse_dense_mask(p, off, idx).diagnostics().has_code("AK1013"));
  off.device = Device{DeviceKind::cuda, 0};
  EXPECT_TRUE(block_sparse_dense_mask(p, off, idx).diagnostics().has_code("AK1105"));
  Problem small = p;
  small.seqlen_k = 32;
  std::vector<std::uint8_t> mask(1024 * 2, 1);
  TensorView m = make_view(mask.data(), DType::u8, {1024, 1, 1, 2});
  ASSERT_TRUE(block_sparse_from_mask(small, m).ok());
  m.device = Device{DeviceKind::cuda, 0};
  EXPECT_TRUE(block_sparse_from_mask(small, m).diagnostics().has_code("AK1105"));
}

TEST(Sparse, MaskStrategyFilesAreBoundedAndTheirIntegersExact) {
  EXPECT_TRUE(sparse::load_mask_strategy("/dev/zero").diagnostics().has_code("AK3105"));
  EXPECT_TRUE(sparse::load_mask_strategy("/tmp").diagnostics().has_code("AK3105"));
  for (const std::string& bad :
       {std::string(R"({"3_1_0": [4294967299, 3, 3]})"),  // past int32: would wrap to a window of 3
        std::string(R"({"3_1_0": [18446744073709551615, 3, 3]})"), std::string(R"({"99999999999_1_0": [3, 3, 3]})"),
        std::string(R"({"3_1_0": [1e400, 3, 3]})"), std::string(R"({"3_1_+0": [3, 3, 3]})"),
        std::string(R"({"3_1_0": )") + std::string(100000, '[') + std::string(100000, ']') + "}"}) {
    const auto r = sparse::parse_mask_strategy(bad, "m.json");
    EXPECT_TRUE(r.diagnostics().has_code("AK3108")) << bad.substr(0, 48) << r.diagnostics().summary();
  }
  EXPECT_TRUE(sparse::parse_mask_strategy(R"({"3_1_0": [2147483647, 1, 1]})", "m.json").ok());
}

TEST(Sparse, SlidingTileCountsAndTilesStayInts) {
  Problem p = make_test_problem(4 * 8 * 8, 4 * 8 * 8, 2, 2, 32, DType::f32);
  p.video = VideoGrid{4, 8, 8};
  const std::string mask = temp_file("attnkit_sta_mask.json", R"({"2_0_0": [1, 1, 1], "2_0_1": [1, 1, 1]})");
  const auto backend = make_sliding_tile_backend();
  const Platform cpu = detect_cpu_platform();
  auto config = [&](const char* key, select::ConfigValue value) {
    select::BackendConfig c{{"mask_strategy_file_path", mask}, {"tile_size", std::string("2,4,4")}};
    c[key] = std::move(value);
    return c;
  };
  ASSERT_TRUE(backend->plan_configured(p, cpu, config("skip_time_steps", std::int64_t{2})).ok());
  // 2^32 + 2 would be a skip of 2 steps as an int; 2048-token-side tiles overflow an int's tile tokens.
  EXPECT_TRUE(backend->plan_configured(p, cpu, config("skip_time_steps", std::int64_t{(1LL << 32) + 2}))
                  .diagnostics()
                  .has_code("AK3103"));
  EXPECT_TRUE(backend->plan_configured(p, cpu, config("tile_size", std::string("2048,2048,2048")))
                  .diagnostics()
                  .has_code("AK3103"));
  EXPECT_TRUE(backend->plan_configured(p, cpu, config("tile_size", std::string("4294967298,4,4")))
                  .diagnostics()
                  .has_code("AK3103"));
}

TEST(Sparse, SlidingTileListsPastInt32OffsetsAreRefusedBeforeBuilding) {
  // 46341 tiles of 16 tokens: one head's lists could hold 46341^2 > 2^31 - 1 blocks.
  Problem p = make_test_problem(46341 * 16, 46341 * 16, 1, 1, 32, DType::f32);
  p.video = VideoGrid{1, 4, 4 * 46341};
  const std::string mask = temp_file("attnkit_sta_big.json", R"({"2_0_0": [1, 1, 1]})");
  const select::BackendConfig c{{"mask_strategy_file_path", mask}, {"tile_size", std::string("1,4,4")},
                                {"skip_time_steps", std::int64_t{0}}};
  const auto plan = make_sliding_tile_backend()->plan_configured(p, detect_cpu_platform(), c);
  EXPECT_TRUE(plan.diagnostics().has_code("AK1012")) << plan.diagnostics().summary();
}

}  // namespace
}  // namespace attnkit::testing
