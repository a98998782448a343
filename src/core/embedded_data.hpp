#pragma once
// Data files compiled into the library (see cmake/EmbedText.cmake).
#include <string_view>

namespace attnkit::embedded {
std::string_view diagnostics_yaml();  // data/diagnostics.yaml
}  // namespace attnkit::embedded
