// Selection for a single attention call without a model profile (levels 1, 2
// and 7 of design section 2): used by `attnkit run` and the Python module.
#include "attnkit/select/selector.hpp"

namespace attnkit::select {

Result<CallDecision> select_for_call(const Problem& p, const std::vector<Platform>& platforms,
                                     std::string_view requested, const Registry& registry) {
  const bool is_auto = requested.empty() || is_auto_name(requested);
  const std::string forced = global_force_backend();
  if (!is_auto || !forced.empty()) {
    const std::string name = is_auto ? forced : std::string(requested);
    const Level level = is_auto ? Level::global_force : Level::per_request;
    // An explicit name must run on one of the platforms: the GPU's reasons
    // matter more than "not a CPU backend", so keep the most specific ones.
    Diagnostics best;
    // A family tries its members in order (`fa` on sm_90: fa3, then fa2), the
    // first one's refusal recorded when a later one runs the call.
    for (const Platform& platform : platforms) {
      const std::vector<std::string> candidates = resolve_backend_candidates(name, platform, registry);
      if (candidates.empty()) return unknown_backend(name, registry);
      Diagnostics first;
      for (const std::string& canonical : candidates) {
        const Backend* backend = registry.find(canonical);
        Diagnostics why = backend->check(p, platform);
        if (why.empty()) {
          CallDecision d{backend, platform, level, name, {}};
          if (!first.empty()) d.rejected.push_back({candidates.front(), first.begin()->code, first.begin()->message});
          return d;
        }
        if (first.empty()) first = why;
      }
      if (best.empty() || !first.has_code("AK2101")) best = first;
    }
    return best;
  }
  CallDecision d;
  Diagnostics reasons;
  std::string tried, where;
  for (const Platform& platform : platforms) {
    where += (where.empty() ? "" : " or ") + platform.label();
    for (const std::string& name : platform_preference_order(platform, p))
      for (const std::string& canonical : resolve_backend_candidates(name, platform, registry)) {
        const Backend* backend = registry.find(canonical);
        Diagnostics why = backend->check(p, platform);
        if (why.empty()) {
          d.backend = backend;
          d.platform = platform;
          return d;
        }
        d.rejected.push_back({canonical, why.begin()->code, why.begin()->message});
        tried += (tried.empty() ? "" : ", ") + canonical + " (" + why.begin()->code + ")";
        reasons.append(why);
      }
  }
  Diagnostics none = diagnose("AK3002", {{"layer", p.summary()}, {"platform", where}, {"tried", tried}});
  none.append(reasons);
  return none;
}

}  // namespace attnkit::select
