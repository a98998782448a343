// `attnkit explain CODE` prints one catalog page; `explain "<error text>"`
// finds the pages covering a fragment of an engine's or attnkit's error
// message (ranked, several when several match); `explain --list` lists codes.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "attnkit/core/diagnostic.hpp"
#include "cli_support.hpp"
#include "commands.hpp"

namespace attnkit::cli {
namespace {

// Every code starting with `prefix`: lines of text, or a JSON array of {code, severity, title}
// (--format json was ignored here: a JSON reader got text).
void print_list(const std::string& prefix, const std::string& format) {
  nlohmann::json list = nlohmann::json::array();
  for (const CatalogEntry& e : diagnostic_catalog()) {
    if (!prefix.empty() && e.code.rfind(prefix, 0) != 0) continue;
    if (format == "json") list.push_back({{"code", e.code}, {"severity", severity_name(e.severity)}, {"title", e.title}});
    else std::cout << e.code << "  " << severity_name(e.severity) << "  " << e.title << "\n";
  }
  if (format == "json") std::cout << list.dump(2) << "\n";
}

void print_page(const CatalogEntry& e) {
  std::cout << e.code << " (" << severity_name(e.severity) << "): " << e.title << "\n\n"
            << "Message:\n  " << e.message << "\n\n"
            << "What it means:\n  " << e.meaning << "\n\n"
            << "Solutions:\n";
  for (const std::string& s : e.solutions) std::cout << "  - " << s << "\n";
  std::cout << "\nExample fix:\n  before: " << e.example_before << "\n  after:  " << e.example_after << "\n\n"
            << "When it happens:\n  " << e.when << "\n";
  if (!e.engine_messages.empty()) {
    std::cout << "\nEngine messages it covers:\n";
    for (const std::string& m : e.engine_messages) std::cout << "  - " << m << "\n";
  }
  if (!e.related.empty()) {
    std::cout << "\nRelated:";
    for (const std::string& r : e.related) std::cout << " " << r;
    std::cout << "\n";
  }
}

nlohmann::json page_json(const CatalogEntry& e) {
  return {{"code", e.code},
          {"title", e.title},
          {"severity", severity_name(e.severity)},
          {"message", e.message},
          {"meaning", e.meaning},
          {"solutions", e.solutions},
          {"example", {{"before", e.example_before}, {"after", e.example_after}}},
          {"when", e.when},
          {"related", e.related},
          {"engine_messages", e.engine_messages}};
}

int explain(const std::string& text, const std::string& format) {
  const Result<Explanation> found = explain_text(text);
  if (!found) return print_diagnostics(found.diagnostics(), format);
  // A code is its page, as the one match with score 1.
  const std::vector<CatalogMatch> matches =
      found->page ? std::vector<CatalogMatch>{{found->page, 1.0, found->page->code}} : found->matches;
  if (format == "json") {
    nlohmann::json list = nlohmann::json::array();
    for (const CatalogMatch& m : matches) {
      nlohmann::json j = page_json(*m.entry);
      j["score"] = m.score;
      j["matched"] = m.matched;
      list.push_back(j);
    }
    std::cout << nlohmann::json{{"query", text}, {"matches", list}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
    return 0;
  }
  if (matches.size() > 1) {
    std::cout << matches.size() << " pages match, best first:\n";
    for (const CatalogMatch& m : matches)
      std::cout << fmt::format("  {}  {:<36} {:.0f}%  \"{}\"\n", m.entry->code, m.entry->title, 100 * m.score, m.matched);
    std::cout << "\n";
  }
  print_page(*matches.front().entry);
  return 0;
}

}  // namespace

void add_explain_command(CLI::App& app, int& exit_code) {
  auto words = std::make_shared<std::vector<std::string>>();
  auto list = std::make_shared<bool>(false);
  auto format = std::make_shared<std::string>("text");
  CLI::App* cmd = app.add_subcommand("explain", "print the catalog page of a code, or find the pages covering an error message");
  cmd->add_option("text", *words,
                  "a code (AK4001), or any fragment of an engine's or attnkit's error message (with --list: a code prefix)");
  cmd->add_flag("--list", *list, "list every code with its title");
  cmd->add_option("--format", *format, "text or json")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  cmd->callback([words, list, format, &exit_code] {
    std::string text;
    for (const std::string& w : *words) text += (text.empty() ? "" : " ") + w;
    if (*list) {
      print_list(text, *format);
      exit_code = 0;
      return;
    }
    if (text.empty()) {
      print_diagnostics(diagnose("AK0002", {{"command", "attnkit explain"},
                                            {"detail", "give a code (attnkit explain AK4001), an error message, or --list"}}),
                        *format);
      exit_code = kUsageExit;
      return;
    }
    exit_code = explain(text, *format);
  });
}

}  // namespace attnkit::cli
