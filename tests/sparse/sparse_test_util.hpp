#pragma once
// Helpers of the sparse backend tests.
#include <filesystem>
#include <fstream>
#include <string>

#include "testing/video_inputs.hpp"

namespace attnkit::testing {

// Writes `contents` to a file of this test binary's temporary directory; returns its path.
inline std::string temp_file(const std::string& name, const std::string& contents) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "attnkit_sparse_tests";
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / name;
  std::ofstream(path) << contents;
  return path.string();
}

}  // namespace attnkit::testing
