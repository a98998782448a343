// `attnkit explain CODE` prints one catalog page; `explain --list` lists codes.
#include <cctype>
#include <iostream>

#include "attnkit/core/diagnostic.hpp"
#include "commands.hpp"

namespace attnkit::cli {
namespace {

void print_list(const std::string& prefix) {
  for (const CatalogEntry& e : diagnostic_catalog()) {
    if (!prefix.empty() && e.code.rfind(prefix, 0) != 0) continue;
    std::cout << e.code << "  " << severity_name(e.severity) << "  " << e.title << "\n";
  }
}

void print_page(const CatalogEntry& e) {
  std::cout << e.code << " (" << severity_name(e.severity) << "): " << e.title << "\n\n"
            << "Message:\n  " << e.message << "\n\n"
            << "What it means:\n  " << e.meaning << "\n\n"
            << "Solutions:\n";
  for (const std::string& s : e.solutions) std::cout << "  - " << s << "\n";
  std::cout << "\nExample fix:\n  before: " << e.example_before << "\n  after:  " << e.example_after << "\n\n"
            << "When it happens:\n  " << e.when << "\n";
  if (!e.related.empty()) {
    std::cout << "\nRelated:";
    for (const std::string& r : e.related) std::cout << " " << r;
    std::cout << "\n";
  }
}

}  // namespace

void add_explain_command(CLI::App& app, int& exit_code) {
  auto code = std::make_shared<std::string>();
  auto list = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("explain", "print the catalog page of a diagnostic code");
  cmd->add_option("code", *code, "diagnostic code, e.g. AK4001 (with --list: a prefix such as AK4)");
  cmd->add_flag("--list", *list, "list every code with its title");
  cmd->callback([code, list, &exit_code] {
    if (*list) {
      print_list(*code);
      exit_code = 0;
      return;
    }
    if (code->empty()) {
      std::cerr << "explain: give a code (attnkit explain AK4001) or --list\n";
      exit_code = 2;
      return;
    }
    std::string wanted = *code;
    for (char& ch : wanted) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (const CatalogEntry* e = find_catalog_entry(wanted)) {
      print_page(*e);
      exit_code = 0;
      return;
    }
    std::cerr << "explain: no catalog entry '" << *code << "'; `attnkit explain --list` lists the codes\n";
    exit_code = 1;
  });
}

}  // namespace attnkit::cli
