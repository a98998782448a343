// `explain` by error text: the catalog pages whose engine messages (or own
// message) share the most words with a fragment of an error message.
#include <algorithm>
#include <cctype>
#include <regex>
#include <set>
#include <string>

#include "attnkit/core/diagnostic.hpp"

namespace attnkit {
namespace {

// Words that carry no meaning for matching.
const std::set<std::string>& stop_words() {
  static const std::set<std::string> words = {"a",   "an",  "the", "of",  "for", "to",   "is",  "be",   "by",
                                              "and", "or",  "on",  "in",  "with", "it",  "this", "that", "as",
                                              "at",  "are", "was", "got", "its", "can",  "not", "use",  "only"};
  return words;
}

// Lower-case words of letters, digits and '_' ; "{placeholders}" and "..." dropped.
std::set<std::string> words_of(std::string_view text) {
  std::set<std::string> out;
  std::string word;
  bool in_placeholder = false;
  auto flush = [&] {
    if (!word.empty() && !stop_words().count(word)) out.insert(word);
    word.clear();
  };
  for (char ch : text) {
    if (ch == '{') in_placeholder = true;
    if (ch == '}') {
      in_placeholder = false;
      word.clear();
      continue;
    }
    if (in_placeholder) continue;
    const auto u = static_cast<unsigned char>(ch);
    if (std::isalnum(u) || ch == '_') word += static_cast<char>(std::tolower(u));
    else flush();
  }
  flush();
  return out;
}

// A message template as a pattern: its literal text, each "{placeholder}"
// matching anything, so a whole attnkit message (values filled in) matches
// the template it came from.
std::regex template_pattern(std::string_view tmpl) {
  static const std::string specials = R"(.^$|()[]{}*+?\)";
  std::string pattern;
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] == '{') {
      const std::size_t close = tmpl.find('}', i);
      if (close != std::string_view::npos) {
        pattern += "[\\s\\S]*";
        i = close;
        continue;
      }
    }
    if (specials.find(tmpl[i]) != std::string::npos) pattern += '\\';
    pattern += tmpl[i];
  }
  return std::regex(pattern);
}

// std::regex matches recursively, about one stack frame per character a
// "[\s\S]*" consumes: 100000 characters overflow an 8 MiB stack, 10000 do
// not. A filled message is a few hundred characters; longer texts are
// matched by their words alone.
constexpr std::size_t kMaxFilledMessage = 2048;

// The literal characters of a template (its specificity).
std::size_t literal_size(std::string_view tmpl) {
  std::size_t n = 0;
  bool in_placeholder = false;
  for (char ch : tmpl) {
    if (ch == '{') in_placeholder = true;
    else if (ch == '}') in_placeholder = false;
    else if (!in_placeholder) ++n;
  }
  return n;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return out;
}

}  // namespace

std::vector<CatalogMatch> search_catalog(std::string_view text, std::size_t max) {
  std::vector<CatalogMatch> coded;
  const std::set<std::string> query = words_of(text);
  for (const std::string& w : query)
    if (const CatalogEntry* e = w.size() == 6 ? find_catalog_entry(upper(w)) : nullptr) coded.push_back({e, 1.0, e->code});
  if (!coded.empty() || query.empty()) return coded;
  struct Scored {
    CatalogMatch match;
    double cover;
  };
  // A whole attnkit message fills its page's template: at least 0.5, more
  // the more of the message is the template's literal text.
  static const std::vector<std::regex> patterns = [] {
    std::vector<std::regex> out;
    for (const CatalogEntry& e : diagnostic_catalog()) out.push_back(template_pattern(e.message));
    return out;
  }();
  std::string whole(text);
  whole.erase(0, whole.find_first_not_of(" \t\r\n"));
  whole.erase(whole.find_last_not_of(" \t\r\n") + 1);
  auto filled_score = [&](std::size_t i) {
    const CatalogEntry& e = diagnostic_catalog()[i];
    const std::size_t literal = literal_size(e.message);
    if (literal < 12 || whole.empty() || whole.size() > kMaxFilledMessage || !std::regex_match(whole, patterns[i]))
      return 0.0;
    return 0.5 + 0.5 * std::min(1.0, static_cast<double>(literal) / static_cast<double>(whole.size()));
  };
  std::vector<Scored> out;
  for (std::size_t i = 0; i < diagnostic_catalog().size(); ++i) {
    const CatalogEntry& e = diagnostic_catalog()[i];
    CatalogMatch best{&e, 0.0, ""};
    double best_cover = 0;  // tie-break: the share of the text's words the query covers
    auto consider = [&](const std::string& candidate, double weight) {
      const std::set<std::string> words = words_of(candidate);
      if (words.empty()) return;
      std::size_t shared = 0;
      for (const std::string& w : query) shared += words.count(w);
      const double score = weight * static_cast<double>(shared) / static_cast<double>(query.size());
      const double cover = static_cast<double>(shared) / static_cast<double>(words.size());
      if (score > best.score || (score == best.score && cover > best_cover)) {
        best = {&e, score, candidate};
        best_cover = cover;
      }
    };
    for (const std::string& m : e.engine_messages) consider(m, 1.0);
    consider(e.message, 1.0);
    consider(e.title, 0.8);  // "ring-needs-fa"
    if (const double filled = filled_score(i); filled > best.score) {
      best = {&e, filled, e.message};
      best_cover = 1.0;
    }
    if (best.score > 0) out.push_back({best, best_cover});
  }
  std::stable_sort(out.begin(), out.end(), [](const Scored& a, const Scored& b) {
    return a.match.score != b.match.score ? a.match.score > b.match.score : a.cover > b.cover;
  });
  const double floor = out.empty() ? 1.0 : std::max(0.3, out.front().match.score / 2);
  std::vector<CatalogMatch> kept;
  for (const Scored& s : out)
    if (s.match.score >= floor && kept.size() < max) kept.push_back(s.match);
  return kept;
}

namespace {

// One word of "AK" and letters or digits, at least one a digit: a code as
// written, maybe misspelt (AK1O02), not a fragment of a message.
bool looks_like_code(std::string_view text) {
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return false;
  text = text.substr(first, text.find_last_not_of(" \t\r\n") + 1 - first);
  if (text.size() < 3 || std::toupper(static_cast<unsigned char>(text[0])) != 'A' ||
      std::toupper(static_cast<unsigned char>(text[1])) != 'K')
    return false;
  const std::string_view rest = text.substr(2);
  return std::all_of(rest.begin(), rest.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)); }) &&
         std::any_of(rest.begin(), rest.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); });
}

}  // namespace

Result<Explanation> explain_text(std::string_view text) {
  if (looks_like_code(text)) {
    Result<const CatalogEntry*> page = lookup_catalog_entry(text);
    if (!page) return page.diagnostics();
    return Explanation{*page, {}};
  }
  std::vector<CatalogMatch> matches = search_catalog(text);
  if (matches.empty()) {
    return diagnose("AK0004", {{"text", shortened(text)}});
  }
  return Explanation{nullptr, std::move(matches)};
}

}  // namespace attnkit
