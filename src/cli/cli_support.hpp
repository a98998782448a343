#pragma once
// Helpers shared by the CLI commands: list parsing and diagnostic printing.
#include <optional>
#include <string>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/core/host_tensor.hpp"

namespace attnkit::cli {

// "5,0,-1" -> {5, 0, -1}; nothing on any malformed or empty element
// (including a trailing comma) or on an empty text.
std::optional<std::vector<int>> parse_int_list(const std::string& text);

// The exit status of a command line that could not be used (AK0002, AK3107).
inline constexpr int kUsageExit = 2;

// "json" when argv asks for --format json (read before parsing, so that even a
// usage error is printed in the requested format), else "text".
std::string requested_format(int argc, const char* const* argv);

// Prints diagnostics (text: code, message, solutions; json: the design's
// diagnostics array under {"ok": false}) to stdout and returns exit code 1
// when any is an error, 0 otherwise.
int print_diagnostics(const Diagnostics& diagnostics, const std::string& format);

// `run`'s check: up to `max_heads` (batch, q head) pairs spread over the problem,
// the exact (fp64) reference of `data` on those heads, and the comparison of
// their rows: sequence b's rows start at token offset `offsets[b]` and are
// `lens[b]` long (the whole problem's, or one rank's shard's).
std::vector<std::pair<int, int>> sampled_heads(const Problem& p, int max_heads);
// AK2124 for a backend whose output is not exact attention by design (the
// sparse video backends: skipped blocks, a gated second branch), which `run`'s
// comparison with the reference cannot judge; empty for the others.
Diagnostics refuse_inexact_for_run(const Backend& backend);
HostTensor reference_on_heads(const HostProblemData& data, const std::vector<std::pair<int, int>>& heads);
ErrorStats compare_heads(const Problem& p, const TensorView& got, const TensorView& want,
                         const std::vector<std::pair<int, int>>& heads, const std::vector<std::int64_t>& offsets,
                         const std::vector<std::int64_t>& lens);

}  // namespace attnkit::cli
