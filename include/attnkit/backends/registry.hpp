#pragma once
// The registry of backends by name. Built-in backends are added by
// register_builtin_backends(); the selection engine and later backends extend
// it by registering more. Lookups accept aliases (cudnn_sdpa -> cudnn).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/backends/backend.hpp"

namespace attnkit {

class Registry {
 public:
  // Fails (AK2001) when the name is taken.
  Diagnostics add(std::unique_ptr<Backend> backend);
  void add_alias(std::string alias, std::string canonical);

  const Backend* find(std::string_view name) const;  // canonical or alias
  std::string canonical_name(std::string_view name) const;  // "" when unknown
  std::vector<const Backend*> all() const;
  std::vector<std::string> names() const;
  std::vector<std::string> aliases() const;

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::pair<std::string, std::string>> aliases_;
};

// reference, cpu_flash, and the CUDA backends when compiled.
void register_builtin_backends(Registry& registry);
// A process-wide registry holding the built-ins, created on first use.
Registry& default_registry();

// Looks up a backend by name, with the catalogued "unknown backend" diagnostic
// (listing the valid names and the nearest) when it is not registered.
Result<const Backend*> find_backend(const Registry& registry, std::string_view name);

// AK2002 for `name`: lists `valid` and suggests the nearest of them.
Diagnostic unknown_backend_name(std::string_view name, const std::vector<std::string>& valid);

}  // namespace attnkit
