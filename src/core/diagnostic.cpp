#include "attnkit/core/diagnostic.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <stdexcept>

#include "embedded_data.hpp"

namespace attnkit {

std::string_view severity_name(Severity s) {
  switch (s) {
    case Severity::error: return "error";
    case Severity::warning: return "warning";
    case Severity::note: return "note";
  }
  return "error";
}

namespace {

Severity parse_severity(const std::string& s) {
  if (s == "warning") return Severity::warning;
  if (s == "note") return Severity::note;
  return Severity::error;
}

std::vector<std::string> string_list(const YAML::Node& n) {
  std::vector<std::string> out;
  if (n && n.IsSequence())
    for (const auto& item : n) out.push_back(item.as<std::string>());
  return out;
}

std::vector<CatalogEntry> parse_catalog(std::string_view yaml_text) {
  std::vector<CatalogEntry> entries;
  const YAML::Node root = YAML::Load(std::string(yaml_text));
  for (const auto& node : root) {
    CatalogEntry e;
    e.code = node["code"].as<std::string>();
    e.title = node["title"].as<std::string>("");
    e.severity = parse_severity(node["severity"].as<std::string>("error"));
    e.message = node["message"].as<std::string>("");
    e.meaning = node["meaning"].as<std::string>("");
    e.solutions = string_list(node["solutions"]);
    if (const auto ex = node["example"]) {
      e.example_before = ex["before"].as<std::string>("");
      e.example_after = ex["after"].as<std::string>("");
    }
    e.when = node["when"].as<std::string>("");
    e.related = string_list(node["related"]);
    e.engine_messages = string_list(node["engine_messages"]);
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace

const std::vector<CatalogEntry>& diagnostic_catalog() {
  // Parsed once; a malformed embedded catalog is a build defect caught by tests.
  static const std::vector<CatalogEntry> catalog = parse_catalog(embedded::diagnostics_yaml());
  return catalog;
}

const CatalogEntry* find_catalog_entry(std::string_view code) {
  for (const CatalogEntry& e : diagnostic_catalog())
    if (e.code == code) return &e;
  return nullptr;
}

Result<const CatalogEntry*> lookup_catalog_entry(std::string_view code) {
  std::string wanted;
  for (char ch : code)
    if (ch != ' ' && ch != '\t') wanted += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (const CatalogEntry* e = find_catalog_entry(wanted)) return e;
  std::vector<std::string> codes;
  for (const CatalogEntry& e : diagnostic_catalog()) codes.push_back(e.code);
  const std::string near = wanted.size() <= 16 ? nearest_name(wanted, codes) : "";
  return diagnose("AK0001", {{"code", shortened(code, 32)}, {"suggestion", near.empty() ? "" : " (did you mean " + near + "?)"}});
}

std::string shortened(std::string_view text, std::size_t max) {
  return text.size() <= max ? std::string(text) : std::string(text.substr(0, max - 3)) + "...";
}

std::string fill_template(std::string_view tmpl, DiagArgs args) { return fill_template_args(tmpl, DiagArgSpan(args.begin(), args.size())); }

std::string fill_template_args(std::string_view tmpl, DiagArgSpan args) {
  std::string out;
  out.reserve(tmpl.size() + 32);
  for (std::size_t i = 0; i < tmpl.size();) {
    if (tmpl[i] == '{') {
      const std::size_t close = tmpl.find('}', i);
      if (close != std::string_view::npos) {
        const std::string_view key = tmpl.substr(i + 1, close - i - 1);
        bool replaced = false;
        for (const auto& [k, v] : args) {
          if (k == key) {
            out += v;
            replaced = true;
            break;
          }
        }
        if (replaced) {
          i = close + 1;
          continue;
        }
      }
    }
    out += tmpl[i++];
  }
  return out;
}

std::string nearest_name(std::string_view name, const std::vector<std::string>& candidates) {
  // Levenshtein distance with one row of the table.
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  std::size_t best_d = std::max<std::size_t>(3, name.size() / 2) + 1;
  for (const std::string& c : candidates) {
    const std::size_t d = distance(name, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

Diagnostic diagnose(std::string_view code, DiagArgs args) { return diagnose_args(code, DiagArgSpan(args.begin(), args.size())); }

Diagnostic diagnose_args(std::string_view code, DiagArgSpan args) {
  const CatalogEntry* e = find_catalog_entry(code);
  if (e == nullptr) return diagnose("AK0000", {{"code", std::string(code)}});
  Diagnostic d;
  d.code = e->code;
  d.severity = e->severity;
  d.message = fill_template_args(e->message, args);
  d.meaning = fill_template_args(e->meaning, args);
  for (const std::string& s : e->solutions) d.solutions.push_back(fill_template_args(s, args));
  d.example = "before: " + fill_template_args(e->example_before, args) +
              "\nafter:  " + fill_template_args(e->example_after, args);
  d.when = e->when;
  d.related = e->related;
  return d;
}

bool Diagnostics::ok() const {
  for (const Diagnostic& d : items_)
    if (d.severity == Severity::error) return false;
  return true;
}

bool Diagnostics::has_code(std::string_view code) const {
  for (const Diagnostic& d : items_)
    if (d.code == code) return true;
  return false;
}

std::string Diagnostics::summary() const {
  std::string out;
  for (std::size_t i = 0; i < items_.size(); ++i) {
    if (i) out += '\n';
    out += items_[i].code + " " + std::string(severity_name(items_[i].severity)) + ": " + items_[i].message;
  }
  return out;
}

}  // namespace attnkit
