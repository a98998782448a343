#include "cli_support.hpp"

#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace attnkit::cli {

std::optional<std::vector<int>> parse_int_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size()) return std::nullopt;
      out.push_back(v);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return out;
}

int print_diagnostics(const Diagnostics& diagnostics, const std::string& format) {
  if (format == "json") {
    nlohmann::json list = nlohmann::json::array();
    for (const Diagnostic& d : diagnostics)
      list.push_back({{"code", d.code},
                      {"severity", std::string(severity_name(d.severity))},
                      {"message", d.message},
                      {"meaning", d.meaning},
                      {"solutions", d.solutions},
                      {"example", d.example}});
    std::cout << nlohmann::json{{"ok", diagnostics.ok()}, {"diagnostics", list}}.dump(2) << "\n";
  } else {
    for (const Diagnostic& d : diagnostics) {
      std::cout << d.code << " " << severity_name(d.severity) << ": " << d.message << "\n";
      for (const std::string& s : d.solutions) std::cout << "  fix: " << s << "\n";
      std::cout << "  (attnkit explain " << d.code << ")\n";
    }
  }
  return diagnostics.ok() ? 0 : 1;
}

}  // namespace attnkit::cli
