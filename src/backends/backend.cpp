#include "attnkit/backends/backend.hpp"

namespace attnkit {

Diagnostics Backend::check(const Problem& p, const Platform& platform) const {
  return check_capabilities(name(), capabilities(), p, platform);
}

}  // namespace attnkit
