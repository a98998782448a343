#include "select/json_text.hpp"

#include "core/text_file.hpp"

namespace attnkit::select {

JsonText parse_json_text(std::string_view text) {
  struct TooDeep {};
  const auto depth_guard = [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxNesting) throw TooDeep{};
    return true;
  };
  try {
    return {nlohmann::json::parse(text, depth_guard), ""};
  } catch (const TooDeep&) {
    return {std::nullopt, "it nests deeper than " + std::to_string(kMaxNesting) + " levels"};
  } catch (const nlohmann::json::exception& e) {  // parse errors, and numbers past the double range
    return {std::nullopt, e.what()};
  }
}

std::string shown_json(const nlohmann::json& j) {
  return shortened(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace attnkit::select
