// The cudnn backend without a GPU: its registration, the cuDNN release a
// platform reports, the support rules `check` applies to named platforms, the
// graph specs (dims, strides, masks) it would build, and -- where libcudnn
// loads, as in CI -- that the rules agree with the cuDNN frontend's own
// validation of those graphs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "attnkit/backends/cudnn.hpp"
#include "attnkit/backends/registry.hpp"
#include "backends/cudnn/graph.hpp"
#include "backends/cudnn/plan_cache.hpp"
#include "backends/cudnn/support.hpp"
#include "platform/cudnn_library.hpp"
#include "testing/parity_cases.hpp"

namespace attnkit {
namespace {

using testing::make_test_problem;

const Backend& cudnn_backend() {
  const Backend* b = default_registry().find("cudnn");
  EXPECT_NE(b, nullptr);
  return *b;
}

Platform named(const char* name) { return parse_platform(name).value(); }

std::string codes(const Diagnostics& d) {
  std::string out;
  for (const Diagnostic& x : d) out += (out.empty() ? "" : " ") + x.code;
  return out;
}

bool mentions(const Diagnostics& d, const std::string& text) {
  for (const Diagnostic& x : d)
    if (x.message.find(text) != std::string::npos) return true;
  return false;
}

TEST(CudnnBackend, RegisteredAsARealBackend) {
  const Backend& b = cudnn_backend();
  EXPECT_EQ(b.name(), "cudnn");
  EXPECT_EQ(b.capabilities().built, cudnn::frontend_compiled());
  EXPECT_EQ(b.capabilities().required_library, "cudnn");
  EXPECT_NE(std::string(b.description()).find("cuDNN"), std::string::npos);
}

TEST(CudnnPlatform, NamedPlatformsAssumeAReleaseAndSayWhich) {
  const Platform sm90 = named("cuda:sm90");
  EXPECT_TRUE(sm90.has_cudnn);
  EXPECT_EQ(sm90.cudnn_version, kNamedPlatformCudnnVersion);
  EXPECT_EQ(cudnn_version_string(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_string(90501), "9.5.1");
  EXPECT_EQ(cudnn_description(sm90), "9.19.0 (assumed for a named platform)");
  EXPECT_EQ(named("cpu").cudnn_version, 0);
}

// The loader either finds a cuDNN 9 or says everywhere it looked.
TEST(CudnnPlatform, LibraryLoadsOrExplainsWhereItLooked) {
  const auto& lib = cudnn_library();
  if (lib) {
    EXPECT_GE(lib.value().version, 90000);
    EXPECT_LT(lib.value().version, 100000);
    EXPECT_FALSE(lib.value().path.empty());
    EXPECT_NE(lib.value().handle, nullptr);
  } else {
    ASSERT_TRUE(lib.diagnostics().has_code("AK2110"));
    EXPECT_TRUE(mentions(lib.diagnostics(), "libcudnn.so.9")) << lib.diagnostics().summary();
    EXPECT_TRUE(mentions(lib.diagnostics(), "already loaded")) << lib.diagnostics().summary();
  }
}

TEST(CudnnCheck, DenseHalfProblemsPassOnNamedPlatforms) {
  for (const char* platform : {"cuda:sm80", "cuda:sm90", "cuda:sm100"})
    for (DType t : {DType::bf16, DType::f16})
      for (MaskKind m : {MaskKind::none, MaskKind::causal}) {
        const Problem p = make_test_problem(4096, 4096, 16, 4, 128, t, m);
        const Diagnostics why = cudnn_backend().check(p, named(platform));
        EXPECT_TRUE(why.empty()) << platform << " " << p.summary() << ": " << why.summary();
      }
}

TEST(CudnnCheck, RefusalsAreCodedReasons) {
  const Platform sm90 = named("cuda:sm90");
  auto check = [&](const Problem& p) { return cudnn_backend().check(p, sm90); };
  Problem p = make_test_problem(128, 128, 4, 4, 60, DType::bf16);
  EXPECT_EQ(codes(check(p)), "AK2113");
  EXPECT_TRUE(mentions(check(p), "multiples of 8")) << check(p).summary();
  EXPECT_TRUE(mentions(check(p), "cuDNN 9.19.0")) << check(p).summary();

  p = make_test_problem(128, 128, 4, 4, 64, DType::f32);
  EXPECT_TRUE(check(p).has_code("AK2104"));
  p = make_test_problem(128, 128, 4, 4, 64, DType::bf16);
  p.softcap = 30.0f;
  EXPECT_TRUE(check(p).has_code("AK2109"));
  p = make_test_problem(128, 128, 4, 4, 64, DType::bf16);
  p.block_sparse = BlockSparse{64, 64};
  EXPECT_TRUE(check(p).has_code("AK2109"));
  p = make_test_problem(128, 128, 4, 4, 64, DType::bf16);
  p.kv_dtype = DType::f16;
  EXPECT_TRUE(check(p).has_code("AK2104"));
  // Sinks: supported, except on cuDNN's decode path.
  p = make_test_problem(128, 128, 4, 4, 64, DType::bf16);
  p.has_sinks = true;
  EXPECT_TRUE(check(p).empty()) << check(p).summary();
  p.seqlen_q = 1;
  EXPECT_TRUE(mentions(check(p), "sink")) << check(p).summary();
  // fp8: Hopper writes fp8 outputs only; Blackwell writes bf16.
  p = make_test_problem(256, 256, 4, 4, 128, DType::f8e4m3, MaskKind::causal);
  EXPECT_TRUE(mentions(check(p), "Hopper")) << check(p).summary();
  EXPECT_TRUE(cudnn_backend().check(p, named("cuda:sm100")).empty())
      << cudnn_backend().check(p, named("cuda:sm100")).summary();
  p.head_dim_qk = p.head_dim_v = 256;
  EXPECT_TRUE(cudnn_backend().check(p, named("cuda:sm100")).has_code("AK2113"));
}

TEST(CudnnCheck, ReleaseDependentRules) {
  Problem thd = make_test_problem(512, 512, 4, 2, 64, DType::bf16, MaskKind::causal);
  thd.layout = Layout::thd;
  EXPECT_TRUE(cudnn::support_reasons(thd, 90, 91900).empty());
  EXPECT_TRUE(cudnn::support_reasons(thd, 80, 91800).has_code("AK2113"));  // THD below sm_90 needs 9.18.1
  EXPECT_TRUE(cudnn::support_reasons(thd, 80, 91801).empty());
  Problem sinks = make_test_problem(64, 64, 4, 4, 64, DType::f16);
  sinks.has_sinks = true;
  EXPECT_TRUE(cudnn::support_reasons(sinks, 90, 91200).has_code("AK2113"));
  EXPECT_TRUE(cudnn::support_reasons(sinks, 90, 91300).empty());
  const Problem any = make_test_problem(64, 64, 4, 4, 64, DType::f16);
  EXPECT_TRUE(cudnn::support_reasons(any, 90, 91000).has_code("AK2113"));  // 9.10.0's known bugs
  EXPECT_TRUE(cudnn::support_reasons(any, 90, 0).empty());                 // unknown release: no release rules
}

// A plan for a named platform validates and refuses to run there.
TEST(CudnnPlan, NamedPlatformPlansDoNotRun) {
  const Problem p = make_test_problem(64, 64, 4, 4, 64, DType::bf16, MaskKind::causal);
  auto plan = cudnn_backend().plan(p, named("cuda:sm90"));
  if (!cudnn::frontend_compiled()) {
    ASSERT_FALSE(plan.ok());
    EXPECT_TRUE(plan.diagnostics().has_code("AK2111")) << plan.diagnostics().summary();
    return;
  }
  ASSERT_TRUE(plan.ok()) << plan.diagnostics().summary();
  EXPECT_EQ((*plan)->workspace_bytes(), 0u);
  AttentionTensors t;  // never reached: the binding is refused first
  EXPECT_FALSE((*plan)->run(t, {}, nullptr).ok());
}

// ---- graph specs

TEST(CudnnSpec, LayoutsBecomeCudnnDimsAndStrides) {
  Problem p = make_test_problem(100, 150, 8, 2, 64, DType::bf16);
  cudnn::GraphSpec s = cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, 90, true);
  // BSHD [b, s, h, d] -> cuDNN (b, h, s, d) with strides (s*h*d, d, h*d, 1).
  EXPECT_EQ(s.q.dim, (std::array<std::int64_t, 4>{2, 8, 100, 64}));
  EXPECT_EQ(s.q.stride, (std::array<std::int64_t, 4>{100 * 8 * 64, 64, 8 * 64, 1}));
  EXPECT_EQ(s.k.stride, (std::array<std::int64_t, 4>{150 * 2 * 64, 64, 2 * 64, 1}));
  EXPECT_FALSE(s.padded);
  p.layout = Layout::bhsd;
  s = cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, 90, true);
  EXPECT_EQ(s.q.stride, (std::array<std::int64_t, 4>{8 * 100 * 64, 100 * 64, 64, 1}));
  p.layout = Layout::thd;
  p.return_lse = true;
  s = cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, 90, true);
  EXPECT_TRUE(s.ragged && s.padded && s.stats_ragged);
  EXPECT_EQ(s.q.stride[1], 64);                                                     // head
  EXPECT_EQ(s.q.stride[2], 8 * 64);                                                 // token
  EXPECT_EQ(s.q.dim, (std::array<std::int64_t, 4>{2, 8, 128, 64}));                 // longest length bucketed
  EXPECT_EQ(s.stats_dims.stride, (std::array<std::int64_t, 4>{128 * 8, 1, 8, 1}));  // [total_q, h]
  EXPECT_FALSE(s.offsets_int64);
}

TEST(CudnnSpec, MasksAlignTopLeftOnlyWhereThatIsTheSameMask) {
  Problem p = make_test_problem(128, 128, 4, 4, 64, DType::bf16, MaskKind::causal);
  cudnn::GraphSpec s = cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, 90, true);
  EXPECT_TRUE(s.top_left);  // sq == sk: bottom-right and top-left coincide (PyTorch's graph)
  EXPECT_EQ(s.window_left, -1);
  EXPECT_EQ(s.window_right, 0);
  p.seqlen_q = 100;
  s = cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, 90, true);
  EXPECT_FALSE(s.top_left);
  EXPECT_FALSE(s.padded);
  p.seqlen_q = 200;  // more queries than keys: rows without keys, lengths through the padding mask
  s = cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, 90, true);
  EXPECT_TRUE(s.padded);
  EXPECT_FALSE(s.top_left);
}

TEST(CudnnSpec, StridesArePartOfTheKey) {
  const Problem p = make_test_problem(64, 64, 4, 4, 64, DType::bf16);
  cudnn::BindingShape b = cudnn::canonical_binding(p);
  const auto k1 = cudnn::make_graph_spec(p, b, 0, 90, true).key();
  b.q = {4 * 64 * 64, 64, 4 * 64, 1};  // a BSHD view of BHSD memory
  const auto k2 = cudnn::make_graph_spec(p, b, 0, 90, true).key();
  EXPECT_NE(k1, k2);
  EXPECT_EQ(k1, cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, 90, true).key());
  EXPECT_NE(k1, cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 1, 90, true).key());  // device
}

TEST(CudnnSpec, PagedCachesUseContainerDims) {
  Problem p = make_test_problem(20, 300, 8, 2, 128, DType::bf16, MaskKind::causal);
  p.paged_kv = PagedKv{16};
  const cudnn::GraphSpec s = cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, 90, true);
  EXPECT_TRUE(s.paged && s.padded);
  EXPECT_EQ(s.max_pages, 32);                                             // ceil(300 / 16) = 19 table columns, bucketed
  EXPECT_EQ(s.k.dim, (std::array<std::int64_t, 4>{2 * 19, 2, 16, 128}));  // (pages, h, page, d): the real cache
  EXPECT_EQ(s.k.stride, (std::array<std::int64_t, 4>{16 * 2 * 128, 128, 2 * 128, 1}));
  EXPECT_EQ(s.seqlen_k(), 32 * 16);
}

// Packed calls whose batch or longest sequence differ a little share a graph:
// cuDNN reads the real lengths from seq_q / seq_kv.
TEST(CudnnSpec, PackedCallsShareBucketedGraphs) {
  Problem a = make_test_problem(100, 150, 8, 2, 64, DType::bf16, MaskKind::causal);
  a.layout = Layout::thd;
  a.batch = 3;
  Problem b = a;
  b.seqlen_q = 120;
  b.seqlen_k = 250;
  b.batch = 4;
  const cudnn::GraphDims dims = cudnn::graph_dims(b);
  EXPECT_EQ(dims.batch, 4);
  EXPECT_EQ(dims.seqlen_q, 128);
  EXPECT_EQ(dims.seqlen_k, 256);
  auto key = [](const Problem& p) { return cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, 90, true).key(); };
  EXPECT_EQ(key(a), key(b));
  b.seqlen_q = 129;
  EXPECT_NE(key(a), key(b));
  const Problem dense = make_test_problem(100, 150, 8, 2, 64, DType::bf16);
  EXPECT_EQ(cudnn::graph_dims(dense).seqlen_q, 100);  // dense tensors: the dims are the tensors'
}

// The frontend's validation runs here (no device: the spec names the SM) and
// its refusals arrive as AK2113 with cuDNN's words.
TEST(CudnnSpec, FrontendValidationRefusesWithItsReason) {
  if (!cudnn::frontend_compiled()) GTEST_SKIP() << "built without the cuDNN frontend";
  if (!cudnn_library()) GTEST_SKIP() << "no libcudnn here: " << cudnn_library().diagnostics().summary();
  Problem p = make_test_problem(128, 128, 4, 2, 64, DType::bf16, MaskKind::causal);
  EXPECT_TRUE(cudnn::validate_spec(cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, 90, true)).ok());
  p.head_dim_qk = p.head_dim_v = 60;
  const Diagnostics odd = cudnn::validate_spec(cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, 90, true));
  EXPECT_TRUE(odd.has_code("AK2113")) << odd.summary();
  EXPECT_TRUE(mentions(odd, "multiple of 8")) << odd.summary();
  Problem fp8 = make_test_problem(128, 128, 4, 4, 128, DType::f8e4m3);
  const Diagnostics hopper =
      cudnn::validate_spec(cudnn::make_graph_spec(fp8, cudnn::canonical_binding(fp8), 0, 90, true));
  EXPECT_TRUE(hopper.has_code("AK2113")) << hopper.summary();
  EXPECT_TRUE(cudnn::validate_spec(cudnn::make_graph_spec(fp8, cudnn::canonical_binding(fp8), 0, 100, true)).ok());
}

// The named-platform rules against the cuDNN frontend's own validation of the
// same graphs, for the loaded cuDNN release: one answer, two places. Runs
// wherever libcudnn loads (CI); the frontend validates without a device.
TEST(CudnnSpec, SupportRulesAgreeWithTheFrontendValidation) {
  if (!cudnn::frontend_compiled()) GTEST_SKIP() << "built without the cuDNN frontend";
  const auto& lib = cudnn_library();
  if (!lib) GTEST_SKIP() << "no libcudnn here: " << lib.diagnostics().summary();
  const int version = lib.value().version;
  std::vector<Problem> problems;
  for (const testing::ParityCase& c : testing::parity_cases()) problems.push_back(c.problem);
  for (DType t : {DType::f16, DType::bf16}) {
    Problem p = make_test_problem(333, 300, 8, 2, 128, t, MaskKind::causal);
    problems.push_back(p);  // more queries than keys
    p.mask = MaskKind::sliding_window;
    p.window = {64, -1};
    problems.push_back(p);
    p.window = {-1, 7};
    problems.push_back(p);
    p.layout = Layout::thd;
    p.return_lse = true;
    p.has_sinks = true;
    problems.push_back(p);
    Problem q = make_test_problem(4, 500, 8, 1, 256, t, MaskKind::causal);
    q.paged_kv = PagedKv{32};
    problems.push_back(q);
  }
  Problem fp8 = make_test_problem(256, 256, 4, 4, 128, DType::f8e4m3, MaskKind::causal);
  problems.push_back(fp8);
  int compared = 0;
  for (int sm : {80, 90, 100})
    for (const Problem& p : problems) {
      const Capabilities& caps = cudnn_backend().capabilities();
      if (!caps.dtypes.contains(p.dtype) || !caps.masks.contains(p.mask) || p.softcap > 0) continue;
      const Diagnostics rules = cudnn::support_reasons(p, sm, version);
      if (rules.has_code("AK2104")) continue;  // dtype combinations never reach a graph
      const Diagnostics frontend =
          cudnn::validate_spec(cudnn::make_graph_spec(p, cudnn::canonical_binding(p), 0, sm, true));
      ++compared;
      EXPECT_EQ(rules.empty(), frontend.ok()) << "sm_" << sm << " " << p.summary() << "\n  rules: " << rules.summary()
                                              << "\n  frontend: " << frontend.summary();
    }
  EXPECT_GT(compared, 60);
  std::printf("compared %d problems x SMs against the frontend's validation (cuDNN %s)\n", compared,
              cudnn_version_string(version).c_str());
}

// The on-disk plan store: a plan comes back only for its own whole key, and
// a file that is short, long, foreign or not a file is a miss.
class CudnnPlanCache : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "attnkit-plan-cache-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  static void write_bytes(const std::filesystem::path& f, const std::string& bytes) {
    std::ofstream(f, std::ios::binary | std::ios::trunc) << bytes;
  }
  static std::string read_bytes(const std::filesystem::path& f) {
    std::ifstream in(f, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  std::filesystem::path dir;
  const std::vector<std::uint8_t> payload = {0, 1, 2, 255, '\n', 7};
};

TEST_F(CudnnPlanCache, RoundTripsForItsOwnKeyOnly) {
  const std::string key = "cudnn 91900 frontend 11901 gpu NVIDIA H200 sm 90 sms 132 spec 0 90 1 2";
  const auto file = cudnn::plan_cache_file(dir / "nested", key);
  EXPECT_FALSE(cudnn::read_plan(file, key).has_value());  // nothing stored yet
  ASSERT_TRUE(cudnn::write_plan(file, key, payload));     // creates the directory
  EXPECT_EQ(cudnn::read_plan(file, key), payload);
  EXPECT_FALSE(cudnn::read_plan(file, key + " 3").has_value()) << "another key in the same file is a miss";
  EXPECT_NE(cudnn::plan_cache_file(dir, key), cudnn::plan_cache_file(dir, key + " 3"));
  EXPECT_EQ(cudnn::plan_cache_file(dir, key), cudnn::plan_cache_file(dir, key)) << "the name is a function of the key";
  ASSERT_TRUE(cudnn::write_plan(file, key, {}));  // an empty payload is a payload
  EXPECT_EQ(cudnn::read_plan(file, key), std::vector<std::uint8_t>{});
  for (const auto& e : std::filesystem::directory_iterator(dir / "nested"))
    EXPECT_EQ(e.path(), file) << "no temporary file is left behind";
}

TEST_F(CudnnPlanCache, DamagedOrForeignFilesAreMisses) {
  const std::string key = "k";
  const auto file = cudnn::plan_cache_file(dir, key);
  ASSERT_TRUE(cudnn::write_plan(file, key, payload));
  const std::string whole = read_bytes(file);
  for (std::size_t cut : {std::size_t{0}, std::size_t{5}, whole.size() - payload.size() - 1, whole.size() - 1}) {
    write_bytes(file, whole.substr(0, cut));
    EXPECT_FALSE(cudnn::read_plan(file, key).has_value()) << "truncated to " << cut << " bytes";
  }
  write_bytes(file, whole + "x");
  EXPECT_FALSE(cudnn::read_plan(file, key).has_value()) << "bytes appended";
  std::string other_magic = whole;
  other_magic[0] = 'A';
  write_bytes(file, other_magic);
  EXPECT_FALSE(cudnn::read_plan(file, key).has_value()) << "not our format";
  std::string huge_length = whole;
  huge_length[whole.size() - payload.size() - 1] = '\x7f';  // the length's top byte
  write_bytes(file, huge_length);
  EXPECT_FALSE(cudnn::read_plan(file, key).has_value()) << "a length past the file";
  std::filesystem::remove(file);
  std::filesystem::create_directory(file);
  EXPECT_FALSE(cudnn::read_plan(file, key).has_value()) << "a directory";
  std::string why;
  EXPECT_FALSE(cudnn::write_plan(file, key, payload, &why)) << "cannot replace a directory";
  EXPECT_NE(why.find("cannot rename"), std::string::npos) << why;  // what the once-per-process warning quotes
  EXPECT_FALSE(cudnn::write_plan(dir / "f" / "x.plan", key, std::vector<std::uint8_t>(cudnn::kMaxPlanBytes + 1), &why));
  EXPECT_NE(why.find("larger than"), std::string::npos) << why;
  const std::filesystem::path blocked = dir / "not_a_dir";
  write_bytes(blocked, "a file where the directory would be");
  EXPECT_FALSE(cudnn::write_plan(blocked / "x.plan", key, payload, &why));
  EXPECT_NE(why.find("cannot create"), std::string::npos) << why;
}

TEST_F(CudnnPlanCache, LocationFollowsTheEnvironment) {
  const char* saved = std::getenv("ATTNKIT_CUDNN_PLAN_CACHE");
  const std::string restore = saved ? saved : "";
  for (const char* off : {"0", "off", ""}) {
    setenv("ATTNKIT_CUDNN_PLAN_CACHE", off, 1);
    EXPECT_FALSE(cudnn::plan_cache_dir().has_value()) << "'" << off << "' turns it off";
  }
  setenv("ATTNKIT_CUDNN_PLAN_CACHE", dir.c_str(), 1);
  EXPECT_EQ(cudnn::plan_cache_dir(), dir);
  unsetenv("ATTNKIT_CUDNN_PLAN_CACHE");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string xdg_restore = xdg ? xdg : "";
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  EXPECT_EQ(cudnn::plan_cache_dir(), dir / "attnkit" / "cudnn");
  if (xdg) setenv("XDG_CACHE_HOME", xdg_restore.c_str(), 1); else unsetenv("XDG_CACHE_HOME");
  if (saved) setenv("ATTNKIT_CUDNN_PLAN_CACHE", restore.c_str(), 1);
}

}  // namespace
}  // namespace attnkit
