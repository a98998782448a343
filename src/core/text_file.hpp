#pragma once
// Bounded reads of the text files users name (configs, profiles): a directory,
// an endless device (/dev/zero) or a FIFO without a writer is refused or ends,
// never read forever or taken as an empty file.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace attnkit {

// Config files and model profiles are a few KiB; 1 MiB leaves room for any
// hand-written one and bounds the memory and parse time of a hostile one.
inline constexpr std::size_t kMaxTextFileBytes = std::size_t{1} << 20;

struct TextFile {
  std::optional<std::string> text;  // the contents, when readable
  std::string problem;              // why not: "is a directory", "is larger than 1 MiB", ...
};

// Reads at most `max_bytes` of `path` (any readable non-directory file).
TextFile read_text_file(const std::string& path, std::size_t max_bytes = kMaxTextFileBytes);

// Whether `path` names a readable file that is not a directory (no content read).
bool readable_file(const std::string& path);

// JSON configs may nest this deep: nlohmann's parser is iterative, but dump()
// (which quotes a value in a message) recurses once per level. yaml-cpp has
// its own guard (YAML::DeepRecursion past 2000 levels).
inline constexpr int kMaxNesting = 64;

}  // namespace attnkit
