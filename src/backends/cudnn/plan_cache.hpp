#pragma once
// cuDNN execution plans kept on disk between processes. cuDNN compiles its
// SDPA kernels at run time (NVRTC): the first graph of each kernel
// configuration in a process takes 350-900 ms to build on the H200, later ones
// 35-65 ms (docs/perf/gpu-cudnn.md). A serialized plan carries the compiled
// kernel, so a process that finds one skips the compile.
//
// Plain C++ (no cuDNN): the file format and where files live. A file is
//   "attnkit-cudnn-plan 1\n" <key> "\n" <payload size: 8 bytes, little endian> <payload>
// and is used only when its key equals the caller's whole key (the file name
// is a hash of it), so a collision, a truncated write or another cuDNN's plan
// is a miss, never a wrong plan. Files are written to a temporary name and
// renamed, so concurrent processes see a whole file or none.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace attnkit::cudnn {

// The largest payload read back (an SDPA plan is ~100 KB; a file past this is
// not ours).
inline constexpr std::uint64_t kMaxPlanBytes = 64ull << 20;

// Where plans are kept: $ATTNKIT_CUDNN_PLAN_CACHE when set ("0", "off" or ""
// turn the cache off), else $XDG_CACHE_HOME/attnkit/cudnn, else
// $HOME/.cache/attnkit/cudnn; nullopt when off or no location is known.
std::optional<std::filesystem::path> plan_cache_dir();

// The file of `key` in `dir`.
std::filesystem::path plan_cache_file(const std::filesystem::path& dir, const std::string& key);

// The payload stored for `key` at `file`, or nullopt when the file is missing,
// unreadable, malformed, larger than kMaxPlanBytes or stored for another key.
std::optional<std::vector<std::uint8_t>> read_plan(const std::filesystem::path& file, const std::string& key);

// Stores `payload` for `key` at `file` (creating its directory). False when it
// could not be written, and then `why` (when given) says what failed; the cache
// is best effort and a failure changes no result.
bool write_plan(const std::filesystem::path& file, const std::string& key, const std::vector<std::uint8_t>& payload,
                std::string* why = nullptr);

}  // namespace attnkit::cudnn
