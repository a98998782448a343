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

std::vector<std::string> Registry::aliases() const {
  std::vector<std::string> out;
  for (const auto& [alias, canonical] : aliases_) out.push_back(alias);
  return out;
}

Registry& default_registry() {
  static Registry registry = [] {
    Registry r;
    register_builtin_backends(r);
    return r;
  }();
  return registry;
}

Diagnostic unknown_backend_name(std::string_view name, const std::vector<std::string>& valid) {
  std::string listed;
  for (const std::string& n : valid) listed += (listed.empty() ? "" : ", ") + n;
  const std::string near = nearest_name(name, valid);
  return diagnose("AK2002", {{"name", std::string(name)},
                             {"suggestion", near.empty() ? "" : " (did you mean '" + near + "'?)"},
                             {"valid", listed}});
}

Result<const Backend*> find_backend(const Registry& registry, std::string_view name) {
  if (const Backend* b = registry.find(name)) return b;
  std::vector<std::string> valid = registry.names();
  for (const auto& alias : registry.aliases()) valid.push_back(alias);
  return unknown_backend_name(name, valid);
}

}  // namespace attnkit
