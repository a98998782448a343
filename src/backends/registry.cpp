#include "attnkit/backends/registry.hpp"

#include <algorithm>
#include <mutex>

namespace attnkit {

Diagnostics Registry::add(std::unique_ptr<Backend> backend) {
  if (find(backend->name()) != nullptr) return diagnose("AK2001", {{"name", std::string(backend->name())}});
  backends_.push_back(std::move(backend));
  return {};
}

void Registry::add_alias(std::string alias, std::string canonical) {
  aliases_.emplace_back(std::move(alias), std::move(canonical));
}

std::string Registry::canonical_name(std::string_view name) const {
  for (const auto& b : backends_)
    if (b->name() == name) return std::string(name);
  for (const auto& [alias, canonical] : aliases_)
    if (alias == name) return canonical;
  return {};
}

const Backend* Registry::find(std::string_view name) const {
  const std::string canonical = canonical_name(name);
  for (const auto& b : backends_)
    if (b->name() == canonical) return b.get();
  return nullptr;
}

std::vector<const Backend*> Registry::all() const {
  std::vector<const Backend*> out;
  for (const auto& b : backends_) out.push_back(b.get());
  return out;
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& b : backends_) out.emplace_back(b->name());
  return out;
}

namespace {
std::size_t edit_distance(std::string_view a, std::string_view b) {
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
}
}  // namespace

std::string Registry::nearest(std::string_view name) const {
  std::string best;
  std::size_t best_d = std::max<std::size_t>(3, name.size() / 2) + 1;
  auto consider = [&](std::string_view candidate) {
    const std::size_t d = edit_distance(name, candidate);
    if (d < best_d) {
      best_d = d;
      best = std::string(candidate);
    }
  };
  for (const auto& b : backends_) consider(b->name());
  for (const auto& [alias, canonical] : aliases_) consider(alias);
  return best;
}

Registry& default_registry() {
  static Registry registry = [] {
    Registry r;
    register_builtin_backends(r);
    return r;
  }();
  return registry;
}

Result<const Backend*> find_backend(const Registry& registry, std::string_view name) {
  if (const Backend* b = registry.find(name)) return b;
  std::string valid;
  for (const std::string& n : registry.names()) valid += (valid.empty() ? "" : ", ") + n;
  const std::string near = registry.nearest(name);
  return diagnose("AK2002", {{"name", std::string(name)},
                             {"suggestion", near.empty() ? "" : " (did you mean '" + near + "'?)"},
                             {"valid", valid}});
}

}  // namespace attnkit
