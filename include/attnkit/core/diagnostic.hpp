#pragma once
// Diagnostics: every refusal and every warning attnkit emits is a catalogued
// Diagnostic. The catalog (data/diagnostics.yaml, embedded at build time) holds
// each code's message template, meaning, solutions, example and related codes;
// code sites only name the code and fill the template's {placeholders}.
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attnkit {

enum class Severity { error, warning, note };
std::string_view severity_name(Severity s);

struct Diagnostic {
  std::string code;
  Severity severity = Severity::error;
  std::string message;  // the template with its placeholders filled in
  std::string meaning;
  std::vector<std::string> solutions;
  std::string example;  // "before" and "after" lines
  std::string when;
  std::vector<std::string> related;
};

// One page of the catalog.
struct CatalogEntry {
  std::string code;
  std::string title;
  Severity severity = Severity::error;
  std::string message;  // template: "{name}" is replaced by the argument `name`
  std::string meaning;
  std::vector<std::string> solutions;
  std::string example_before;
  std::string example_after;
  std::string when;
  std::vector<std::string> related;
  std::vector<std::string> engine_messages;  // error texts of the engine (SGLang) this page covers
};

using DiagArgs = std::initializer_list<std::pair<std::string_view, std::string>>;
using DiagArgSpan = std::span<const std::pair<std::string_view, std::string>>;  // arguments built at run time

// The embedded catalog, parsed once.
const std::vector<CatalogEntry>& diagnostic_catalog();
const CatalogEntry* find_catalog_entry(std::string_view code);

// A catalog page found by the text of an error message.
struct CatalogMatch {
  const CatalogEntry* entry = nullptr;
  double score = 0;      // share of the query's words the page's best text contains, 0..1
  std::string matched;   // that text: an engine message, or the page's own message template
};
// The pages whose engine messages or own message best cover `text` (any
// fragment of an engine's or attnkit's error message), best first: every page
// scoring at least half of the best and at least 0.3, up to `max`. A page
// scores the share of the query's words one of its texts contains, or, when
// the whole text fills its message template, 0.5 plus half the template's
// share of the text. A code ("AK4001") in the text finds its page with score 1.
std::vector<CatalogMatch> search_catalog(std::string_view text, std::size_t max = 5);

// Builds the diagnostic for `code` with the template filled from `args`.
// An unknown code is a programming error: it yields an "AK0000" internal
// diagnostic naming the missing code (and a test asserts none is produced).
Diagnostic diagnose(std::string_view code, DiagArgs args = {});
Diagnostic diagnose_args(std::string_view code, DiagArgSpan args);

// Fills "{key}" placeholders; unknown placeholders are left as written.
std::string fill_template(std::string_view tmpl, DiagArgs args);
std::string fill_template_args(std::string_view tmpl, DiagArgSpan args);

// User input as quoted in a message: `text`, or its first max - 3 bytes and "...".
std::string shortened(std::string_view text, std::size_t max = 64);

// For "did you mean" suggestions: the candidate closest to `name` by edit
// distance, "" when none is within max(3, |name|/2) edits.
std::string nearest_name(std::string_view name, const std::vector<std::string>& candidates);

// Several diagnostics; `ok()` when none is an error.
class Diagnostics {
 public:
  Diagnostics() = default;
  Diagnostics(Diagnostic d) { items_.push_back(std::move(d)); }  // NOLINT: implicit by design

  void add(Diagnostic d) { items_.push_back(std::move(d)); }
  void add(std::string_view code, DiagArgs args = {}) { items_.push_back(diagnose(code, args)); }
  void append(const Diagnostics& other) {
    items_.insert(items_.end(), other.items_.begin(), other.items_.end());
  }

  bool ok() const;
  bool empty() const { return items_.empty(); }
  std::size_t size() const { return items_.size(); }
  const std::vector<Diagnostic>& items() const { return items_; }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  bool has_code(std::string_view code) const;
  // "code: message" lines, for logs and exceptions.
  std::string summary() const;

 private:
  std::vector<Diagnostic> items_;
};

// A value or the diagnostics explaining why there is none.
template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)), has_value_(true) {}  // NOLINT
  Result(Diagnostics why) : why_(std::move(why)) {}                // NOLINT
  Result(Diagnostic why) : why_(std::move(why)) {}                 // NOLINT

  bool ok() const { return has_value_; }
  explicit operator bool() const { return has_value_; }
  T& value() { return value_; }
  const T& value() const { return value_; }
  T& operator*() { return value_; }
  const T& operator*() const { return value_; }
  T* operator->() { return &value_; }
  const T* operator->() const { return &value_; }
  const Diagnostics& diagnostics() const { return why_; }

 private:
  T value_{};
  Diagnostics why_;
  bool has_value_ = false;
};

// The page of a code as a user writes it (any case, surrounding spaces), or
// AK0001 naming the nearest code: what `attnkit explain` and attnkit.explain() show.
Result<const CatalogEntry*> lookup_catalog_entry(std::string_view code);

// What `attnkit explain TEXT` and attnkit.explain(text) answer. A text that is
// one code-like word ("AK1002", " ak1002 ", the typo "AK1O02") names a page:
// that page, or AK0001 naming the nearest code. Any other text: the pages
// covering it (search_catalog), or AK0004 when none does.
struct Explanation {
  const CatalogEntry* page = nullptr;  // the text was a code
  std::vector<CatalogMatch> matches;   // otherwise: best first, never empty
};
Result<Explanation> explain_text(std::string_view text);

}  // namespace attnkit
