#pragma once
// Backends attnkit knows the rules of but has no kernel for in this binary:
// their capabilities are declared (so `check` can validate a deployment for
// another machine), `built` is false, and plan() refuses with AK2111.
#include "attnkit/backends/registry.hpp"

namespace attnkit {

// Adds every modelled backend whose name is not registered yet; call it after
// the real backends so a kernel that has landed replaces its modelled entry.
void register_modelled_backends(Registry& registry);

}  // namespace attnkit
