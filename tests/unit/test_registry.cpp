#include <gtest/gtest.h>

#include "attnkit/backends/reference.hpp"
#include "attnkit/backends/registry.hpp"

namespace attnkit {
namespace {

TEST(Registry, NamesAreUniqueAndAliasesResolve) {
  Registry r;
  EXPECT_TRUE(r.add(make_reference_backend()).ok());
  EXPECT_TRUE(r.add(make_reference_backend()).has_code("AK2001"));
  r.add_alias("oracle", "reference");
  ASSERT_NE(r.find("oracle"), nullptr);
  EXPECT_EQ(r.find("oracle")->name(), "reference");
  EXPECT_EQ(r.canonical_name("oracle"), "reference");
  EXPECT_EQ(r.find("nothing"), nullptr);
}

TEST(Registry, UnknownNameListsValidOnesAndTheNearest) {
  Registry r;
  r.add(make_reference_backend());
  auto found = find_backend(r, "refrence");
  ASSERT_FALSE(found.ok());
  ASSERT_TRUE(found.diagnostics().has_code("AK2002"));
  const std::string& msg = found.diagnostics().items()[0].message;
  EXPECT_NE(msg.find("did you mean 'reference'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("valid backends: reference"), std::string::npos) << msg;
  auto far = find_backend(r, "zzzzzzzzzzzz");
  EXPECT_EQ(far.diagnostics().items()[0].message.find("did you mean"), std::string::npos);
}

TEST(Registry, DefaultRegistryHasTheBuiltIns) {
  const Registry& r = default_registry();
  EXPECT_NE(r.find("reference"), nullptr);
  for (const Backend* b : r.all()) {
    EXPECT_FALSE(b->name().empty());
    EXPECT_FALSE(b->description().empty()) << b->name();
  }
}

TEST(Capabilities, ReasonsCarryCodes) {
  auto ref = make_reference_backend();
  Problem p;
  Platform cuda;
  cuda.kind = PlatformKind::cuda;
  cuda.sm = 90;
  const Diagnostics why = ref->check(p, cuda);
  ASSERT_TRUE(why.has_code("AK2101"));  // the reference runs on the CPU only

  Capabilities caps;
  caps.platforms = {PlatformKind::cuda};
  caps.min_sm = 90;
  caps.max_sm = 90;
  caps.dtypes = {DType::bf16};
  caps.head_dims = {64, 128};
  caps.masks = {MaskKind::none};
  caps.layouts = {Layout::bshd};
  caps.softcap = false;
  caps.distinct_v_head_dim = false;
  caps.required_library = "cudnn";
  Problem q;
  q.dtype = DType::f32;
  q.head_dim_qk = 96;
  q.head_dim_v = 64;
  q.mask = MaskKind::causal;
  q.layout = Layout::thd;
  q.softcap = 3.0f;
  Platform ampere = cuda;
  ampere.sm = 80;
  const Diagnostics all = check_capabilities("fa3", caps, q, ampere);
  for (const char* code : {"AK2102", "AK2104", "AK2105", "AK2106", "AK2107", "AK2108", "AK2109", "AK2110"})
    EXPECT_TRUE(all.has_code(code)) << code << " missing in: " << all.summary();
  // design 2.3: fa3 on sm_80 suggests the sm_80 kernel
  for (const Diagnostic& d : all)
    if (d.code == "AK2102") EXPECT_NE(d.solutions[0].find("fa2"), std::string::npos);
  Platform blackwell = cuda;
  blackwell.sm = 100;
  blackwell.has_cudnn = true;
  EXPECT_TRUE(check_capabilities("fa3", caps, q, blackwell).has_code("AK2103"));
  caps.built = false;
  Platform local = blackwell;
  local.detected = true;
  EXPECT_TRUE(check_capabilities("fa3", caps, q, local).has_code("AK2111"));
}

TEST(Platform, NamedPlatformsParse) {
  auto p = parse_platform("cuda:sm90");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, PlatformKind::cuda);
  EXPECT_EQ(p->sm, 90);
  EXPECT_FALSE(p->detected);
  EXPECT_EQ(p->label(), "cuda:sm90");
  for (const char* name : {"cpu", "rocm", "xpu", "musa", "mps", "npu", "cuda:sm80", "cuda:sm100", "cuda:sm120"})
    EXPECT_TRUE(parse_platform(name).ok()) << name;
  EXPECT_TRUE(parse_platform("cuda:hopper").diagnostics().has_code("AK2112"));
  EXPECT_TRUE(parse_platform("tpu").diagnostics().has_code("AK2112"));
  const Platform cpu = detect_cpu_platform();
  EXPECT_EQ(cpu.kind, PlatformKind::cpu);
  EXPECT_GE(cpu.cpu.logical_cores, 1);
}

}  // namespace
}  // namespace attnkit
