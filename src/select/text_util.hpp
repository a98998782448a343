#pragma once
// Small string helpers shared by the selection sources.
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/core/diagnostic.hpp"

namespace attnkit::select {

std::vector<std::string> split(std::string_view s, char sep);
std::string trim(std::string_view s);
std::string join(const std::vector<std::string>& items, std::string_view sep = ", ");
// "did you mean" suggestions (core/diagnostic.hpp).
using attnkit::nearest_name;

}  // namespace attnkit::select
