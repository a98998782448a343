// --attention-backend-config in its four forms, malformed input, and the typed
// schemas of design section 3.
#include "select_test_util.hpp"

namespace attnkit::select {
namespace {

using testing::write_temp;

const BackendSchema* schema(std::string_view owner) {
  const BackendSchema* s = find_schema(owner);
  EXPECT_NE(s, nullptr) << owner;
  return s;
}

Diagnostics validate(const BackendConfig& cfg, std::string_view owner) {
  const BackendSchema* schemas[] = {schema(owner)};
  return validate_config(cfg, schemas, owner);
}

TEST(SelectConfig, EmptyIsEmpty) {
  auto r = parse_backend_config("  ");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->form, ConfigForm::empty);
  EXPECT_TRUE(r->values.empty());
}

TEST(SelectConfig, PairsInferTypes) {
  auto r = parse_backend_config("topk=0.5, skip_time_steps=15,enabled=true,name=STA_inference,off=false");
  ASSERT_TRUE(r.ok()) << r.diagnostics().summary();
  EXPECT_EQ(r->form, ConfigForm::pairs);
  EXPECT_EQ(std::get<double>(r->values.at("topk")), 0.5);
  EXPECT_EQ(std::get<std::int64_t>(r->values.at("skip_time_steps")), 15);
  EXPECT_EQ(std::get<bool>(r->values.at("enabled")), true);
  EXPECT_EQ(std::get<bool>(r->values.at("off")), false);
  EXPECT_EQ(std::get<std::string>(r->values.at("name")), "STA_inference");
}

TEST(SelectConfig, PairsKeepCommaLists) {
  auto r = parse_backend_config("dense_layers=0,1,dense_steps=10");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::get<std::string>(r->values.at("dense_layers")), "0,1");
  EXPECT_EQ(std::get<std::int64_t>(r->values.at("dense_steps")), 10);
  EXPECT_TRUE(validate(r->values, "sol_attn").ok());
}

TEST(SelectConfig, MalformedPairs) {
  for (const char* bad : {"topk", "=0.5", "topk=0.5,topk=0.6", ",topk=1"}) {
    auto r = parse_backend_config(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(r.diagnostics().has_code("AK3106")) << bad << ": " << r.diagnostics().summary();
  }
}

TEST(SelectConfig, JsonString) {
  auto r = parse_backend_config(R"({"topk": 0.25, "dense_layers": [0, 1, 2], "sta_mode": "STA_tuning"})");
  ASSERT_TRUE(r.ok()) << r.diagnostics().summary();
  EXPECT_EQ(r->form, ConfigForm::json_string);
  EXPECT_EQ(std::get<double>(r->values.at("topk")), 0.25);
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(r->values.at("dense_layers")), (std::vector<std::int64_t>{0, 1, 2}));
}

TEST(SelectConfig, MalformedJson) {
  for (const char* bad : {R"({"topk": 0.5)", R"({"topk": })", R"({"nested": {"a": 1}})", R"({"l": ["a"]})"}) {
    auto r = parse_backend_config(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(r.diagnostics().has_code("AK3106") || r.diagnostics().has_code("AK3102")) << bad;
  }
  EXPECT_TRUE(parse_backend_config(R"({"topk": 0.5)").diagnostics().has_code("AK3106"));
  EXPECT_TRUE(parse_backend_config(R"({"nested": {"a": 1}})").diagnostics().has_code("AK3102"));
}

TEST(SelectConfig, JsonFile) {
  const std::string path = write_temp("cfg.json", R"({"sparsity": 0.9})");
  auto r = parse_backend_config(path);
  ASSERT_TRUE(r.ok()) << r.diagnostics().summary();
  EXPECT_EQ(r->form, ConfigForm::json_file);
  EXPECT_EQ(std::get<double>(r->values.at("sparsity")), 0.9);
  EXPECT_TRUE(validate(r->values, "video_sparse_attn").ok());
  const std::string bad = write_temp("bad.json", R"({"sparsity": )");
  EXPECT_TRUE(parse_backend_config(bad).diagnostics().has_code("AK3106"));
}

TEST(SelectConfig, YamlFile) {
  const std::string path = write_temp("cfg.yaml", "topk: 0.5\nsta_mode: STA_searching\nquoted: \"15\"\nlayers: [0, 3]\n");
  auto r = parse_backend_config(path);
  ASSERT_TRUE(r.ok()) << r.diagnostics().summary();
  EXPECT_EQ(r->form, ConfigForm::yaml_file);
  EXPECT_EQ(std::get<double>(r->values.at("topk")), 0.5);
  EXPECT_EQ(std::get<std::string>(r->values.at("sta_mode")), "STA_searching");
  EXPECT_EQ(std::get<std::string>(r->values.at("quoted")), "15");  // quoted stays a string
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(r->values.at("layers")), (std::vector<std::int64_t>{0, 3}));
  const std::string bad = write_temp("bad.yaml", "topk: [0.5\n");
  EXPECT_TRUE(parse_backend_config(bad).diagnostics().has_code("AK3106"));
  const std::string list = write_temp("list.yaml", "- 1\n- 2\n");
  EXPECT_TRUE(parse_backend_config(list).diagnostics().has_code("AK3106"));
}

TEST(SelectConfig, UnreadableFile) {
  for (const char* path : {"/nonexistent/a.json", "/nonexistent/a.yaml", "/nonexistent/dir/config"}) {
    auto r = parse_backend_config(path);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_TRUE(r.diagnostics().has_code("AK3105")) << path;
  }
}

TEST(SelectConfig, SchemaRanges) {
  EXPECT_TRUE(validate({{"topk", 1.0}}, "sparge_attn").ok());
  EXPECT_TRUE(validate({{"topk", std::int64_t{1}}}, "sparge_attn").ok());  // an int is a valid float
  EXPECT_TRUE(validate({{"topk", 0.0}}, "sparge_attn").has_code("AK3103"));  // (0, 1]
  EXPECT_TRUE(validate({{"topk", 1.01}}, "sparge_attn").has_code("AK3103"));
  EXPECT_TRUE(validate({{"topk", std::string("half")}}, "sparge_attn").has_code("AK3102"));
  EXPECT_TRUE(validate({{"sparsity", 0.0}}, "video_sparse_attn").ok());  // [0, 1)
  EXPECT_TRUE(validate({{"sparsity", 1.0}}, "subblock_sparse_attn").has_code("AK3103"));
  EXPECT_TRUE(validate({{"sparsity", -0.1}}, "video_sparse_attn").has_code("AK3103"));
  EXPECT_TRUE(validate({{"dense_backend", std::string("sage_attn")}}, "sol_attn").ok());
  EXPECT_TRUE(validate({{"dense_backend", std::string("cudnn")}}, "sol_attn").has_code("AK3103"));
  EXPECT_TRUE(validate({{"dense_steps", 2.5}}, "sol_attn").has_code("AK3102"));
  EXPECT_TRUE(validate({{"dense_steps", std::int64_t{-1}}}, "sol_attn").has_code("AK3103"));
  EXPECT_TRUE(validate({{"dense_layers", std::string("0-3,7")}}, "sol_attn").ok());
  EXPECT_TRUE(validate({{"dense_layers", std::string("3-1")}}, "sol_attn").has_code("AK3102"));
  EXPECT_TRUE(validate({{"tau", 0.0}}, "sol_attn").has_code("AK3103"));
  EXPECT_TRUE(validate({{"threshold_scale_factor", 0.0}}, "skip_softmax").has_code("AK3103"));
  EXPECT_TRUE(validate({{"threshold_scale_factor", 3.0}, {"start_step", std::int64_t{2}}}, "skip_softmax").ok());
  EXPECT_TRUE(validate({{"start_step", true}}, "skip_softmax").has_code("AK3102"));
}

TEST(SelectConfig, RequiredKeyAndPathKeys) {
  const Diagnostics missing = validate({{"skip_time_steps", std::int64_t{15}}}, "sliding_tile_attn");
  EXPECT_TRUE(missing.has_code("AK3104"));
  const Diagnostics unreadable = validate({{"mask_strategy_file_path", std::string("/nonexistent/mask.json")}}, "sliding_tile_attn");
  EXPECT_TRUE(unreadable.has_code("AK3105"));
  const std::string mask = write_temp("mask.json", "{}");
  EXPECT_TRUE(validate({{"mask_strategy_file_path", mask}, {"sta_mode", std::string("STA_inference")}}, "sliding_tile_attn").ok());
  EXPECT_TRUE(validate({{"mask_strategy_file_path", mask}, {"sta_mode", std::string("fast")}}, "sliding_tile_attn").has_code("AK3103"));
}

TEST(SelectConfig, UnknownKeyListsValidOnesAndNearest) {
  const Diagnostics d = validate({{"topK", 0.5}}, "sparge_attn");
  ASSERT_TRUE(d.has_code("AK3101"));
  EXPECT_NE(d.items()[0].message.find("did you mean 'topk'"), std::string::npos) << d.items()[0].message;
  EXPECT_NE(d.items()[0].message.find("topk"), std::string::npos);
}

TEST(SelectConfig, LayerList) {
  auto r = parse_layer_list("0,1, 4-6,1");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<int>{0, 1, 4, 5, 6}));
  EXPECT_FALSE(parse_layer_list("a-b").ok());
  EXPECT_FALSE(parse_layer_list("1-").ok());
}

// The same settings in all four forms give the same validated decision.
TEST(SelectConfig, FourFormsAgreeThroughCheck) {
  const std::string json_file = write_temp("four.json", R"({"topk": 0.3})");
  const std::string yaml_file = write_temp("four.yaml", "topk: 0.3\n");
  for (const std::string& form : {json_file, yaml_file, std::string(R"({"topk": 0.3})"), std::string("topk=0.3")}) {
    Engine e({.model = "wan", .platform = "cuda:sm90", .attention_backend = "sparge_attn", .attention_backend_config = form});
    e.set_log_sink(nullptr);
    const CheckResult& r = e.build();
    EXPECT_TRUE(r.ok) << form << "\n" << r.diagnostics.summary();
    EXPECT_EQ(std::get<double>(e.backend_config().at("topk")), 0.3) << form;
  }
}

}  // namespace
}  // namespace attnkit::select
