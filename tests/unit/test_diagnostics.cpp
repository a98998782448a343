#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "attnkit/core/diagnostic.hpp"

namespace attnkit {
namespace {

TEST(Catalog, EveryEntryIsACompletePage) {
  const auto& catalog = diagnostic_catalog();
  ASSERT_GT(catalog.size(), 20u);
  std::set<std::string> codes;
  for (const CatalogEntry& e : catalog) {
    EXPECT_TRUE(std::regex_match(e.code, std::regex("AK[0-9]{4}"))) << e.code;
    EXPECT_TRUE(codes.insert(e.code).second) << "duplicate code " << e.code;
    EXPECT_FALSE(e.title.empty()) << e.code;
    EXPECT_FALSE(e.message.empty()) << e.code;
    EXPECT_FALSE(e.meaning.empty()) << e.code;
    EXPECT_FALSE(e.solutions.empty()) << e.code;
    EXPECT_FALSE(e.example_before.empty()) << e.code;
    EXPECT_FALSE(e.example_after.empty()) << e.code;
    EXPECT_FALSE(e.when.empty()) << e.code;
    // Selection, model and parallel pages always point to their neighbours.
    if (e.code >= "AK3000" && e.code < "AK6000") EXPECT_FALSE(e.related.empty()) << e.code;
  }
  for (const CatalogEntry& e : catalog)
    for (const std::string& r : e.related) EXPECT_TRUE(codes.count(r)) << e.code << " relates to unknown " << r;
}

TEST(Catalog, TemplatesAreFilled) {
  const Diagnostic d = diagnose("AK1002", {{"heads_q", "3"}, {"heads_kv", "2"}});
  EXPECT_EQ(d.code, "AK1002");
  EXPECT_EQ(d.severity, Severity::error);
  EXPECT_EQ(d.message, "heads_q (3) is not a multiple of heads_kv (2)");
  EXPECT_NE(d.example.find("before:"), std::string::npos);
  EXPECT_EQ(fill_template("{a}-{b}-{c}", {{"a", "x"}, {"c", "z"}}), "x-{b}-z");
}

TEST(Catalog, UnknownCodeIsAnInternalError) {
  const Diagnostic d = diagnose("AK9999");
  EXPECT_EQ(d.code, "AK0000");
  EXPECT_NE(d.message.find("AK9999"), std::string::npos);
}

TEST(Catalog, DiagnosticsAggregate) {
  Diagnostics ds;
  EXPECT_TRUE(ds.ok());
  ds.add("AK1001", {{"field", "batch"}, {"min", "1"}, {"value", "0"}});
  EXPECT_FALSE(ds.ok());
  EXPECT_TRUE(ds.has_code("AK1001"));
  EXPECT_NE(ds.summary().find("batch must be at least 1, got 0"), std::string::npos);
}

// Every code literal raised anywhere in the sources has a catalog page, so no
// user ever sees AK0000 for a code someone forgot to document.
TEST(Catalog, EveryCodeRaisedInTheSourcesExists) {
  const std::filesystem::path root = ATTNKIT_SOURCE_DIR;
  const std::regex code_literal("\"(AK[0-9]{4})\"");
  std::set<std::string> missing;
  int files = 0;
  for (const char* dir : {"src", "include", "python"}) {
    if (!std::filesystem::exists(root / dir)) continue;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".cuh" && ext != ".py") continue;
      ++files;
      std::ifstream in(entry.path());
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      for (std::sregex_iterator it(text.begin(), text.end(), code_literal), end; it != end; ++it) {
        const std::string code = (*it)[1];
        if (code != "AK0000" && find_catalog_entry(code) == nullptr)
          missing.insert(code + " (" + entry.path().filename().string() + ")");
      }
    }
  }
  EXPECT_GT(files, 10);
  for (const std::string& m : missing) ADD_FAILURE() << "raised but not in data/diagnostics.yaml: " << m;
}

}  // namespace
}  // namespace attnkit
