#include "select/json_text.hpp"

#include <set>
#include <vector>

#include "core/text_file.hpp"

namespace attnkit::select {

JsonText parse_json_text(std::string_view text) {
  struct TooDeep {};
  struct Repeated {
    std::string key;
  };
  // The keys of each open object: nlohmann keeps the last of a repeated key, which
  // would drop the first value silently (k=v pairs refuse a repeated key too).
  std::vector<std::set<std::string>> open_keys;
  const auto guard = [&open_keys](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (depth > kMaxNesting) throw TooDeep{};
    if (event == Event::object_start) open_keys.emplace_back();
    if (event == Event::object_end && !open_keys.empty()) open_keys.pop_back();
    if (event == Event::key && !open_keys.empty() && parsed.is_string() &&
        !open_keys.back().insert(parsed.get<std::string>()).second)
      throw Repeated{parsed.get<std::string>()};
    return true;
  };
  try {
    return {nlohmann::json::parse(text, guard), ""};
  } catch (const TooDeep&) {
    return {std::nullopt, "it nests deeper than " + std::to_string(kMaxNesting) + " levels"};
  } catch (const Repeated& r) {
    return {std::nullopt, "key '" + shortened(r.key) + "' is given twice"};
  } catch (const nlohmann::json::exception& e) {  // parse errors, and numbers past the double range
    return {std::nullopt, e.what()};
  }
}

std::string shown_json(const nlohmann::json& j) {
  return shortened(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace attnkit::select
