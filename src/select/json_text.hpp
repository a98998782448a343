#pragma once
// JSON that users write on the command line or in config files
// (--attention-backend-config, --component-attention-backends), parsed and
// quoted safely: every nlohmann exception and nesting past kMaxNesting levels
// becomes a reason, never an escaped exception or a stack overflow.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "attnkit/core/diagnostic.hpp"

namespace attnkit::select {

struct JsonText {
  std::optional<nlohmann::json> value;  // the parsed text, when well formed
  std::string problem;                  // else why not (parse error, a number past double, too deep)
};
JsonText parse_json_text(std::string_view text);

// A JSON value as quoted in a message: at most 64 characters of it, invalid
// UTF-8 replaced (U+FFFD).
std::string shown_json(const nlohmann::json& j);

}  // namespace attnkit::select
