#pragma once
// Helpers for the selection tests: one-line deployments and small assertions.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "attnkit/select/selector.hpp"

namespace attnkit::select::testing {

inline CheckResult check(DeploymentConfig c) { return check_deployment(c); }

inline std::string codes(const Diagnostics& d) {
  std::string out;
  for (const Diagnostic& x : d) out += (out.empty() ? "" : " ") + x.code;
  return out;
}

inline const Decision* find(const CheckResult& r, std::string_view comp, std::string_view role) {
  for (const Decision& d : r.selections)
    if (d.component == comp && d.role == role) return &d;
  return nullptr;
}

// A file under the test temp dir with `text`; returns its path.
inline std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("attnkit_select_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace attnkit::select::testing
