#pragma once
// Small string helpers shared by the selection sources.
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::select {

std::vector<std::string> split(std::string_view s, char sep);
std::string trim(std::string_view s);
std::string join(const std::vector<std::string>& items, std::string_view sep = ", ");
// The candidate closest to `name` by edit distance, "" when none is close.
std::string nearest_name(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace attnkit::select
