#pragma once
// Helpers shared by the CLI commands: list parsing and diagnostic printing.
#include <optional>
#include <string>
#include <vector>

#include "attnkit/core/diagnostic.hpp"

namespace attnkit::cli {

// "5,0,-1" -> {5, 0, -1}; nothing on any malformed element.
std::optional<std::vector<int>> parse_int_list(const std::string& text);

// Prints diagnostics (text: code, message, solutions; json: the design's
// diagnostics array under {"ok": false}) to stdout and returns exit code 1
// when any is an error, 0 otherwise.
int print_diagnostics(const Diagnostics& diagnostics, const std::string& format);

}  // namespace attnkit::cli
