#pragma once
// What one build of the selection reads, resolved once: the profile, the
// platform, the flags as requests per level, and the environment. Shared by
// the request parsing (requests.cpp), the model rules (model_rules.cpp) and
// the levels and fallback policy (selector.cpp).
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "attnkit/select/selector.hpp"

namespace attnkit::select {

// A requested name at one level, with who asked (for messages and the Decision).
struct Request {
  std::string name;
  std::string source;
};

struct Overrides {
  std::map<std::string, Request> component;                      // level 4, by component name
  std::map<std::pair<std::string, std::string>, Request> role;   // level 3, by (component, role)
};

// Level 5: the flag, then the backend variables of the environment.
struct EngineDefaults {
  Request flag;       // --attention-backend
  Request attnkit;    // ATTNKIT_ATTENTION_BACKEND: every component the engine default reaches
  Request diffusion;  // SGLANG_DIFFUSION_ATTENTION_BACKEND: the same, DiT-side (not LLM) components
  Request mm;         // ATTNKIT_ / SGLANG_MM_ATTENTION_BACKEND: multimodal components
};

struct Context {
  const Registry& registry;
  const Profile& profile;
  const Platform& platform;
  const DeploymentConfig& config;
  const BackendConfig& backend_config;
  DType dtype = DType::bf16;
  std::optional<DType> kv_dtype;  // nullopt: auto (same as dtype)
  Overrides overrides;
  EngineDefaults engine_default;
  std::string force;  // level 2
  int attention_tp = 1;  // ranks that split each layer's heads (1: none, or not an LLM profile)
};

inline std::string layer_name(const ComponentSpec& c, const RoleSpec& r) { return c.name + "." + r.name; }

// requests.cpp: --attention-backend, --component-attention-backends (comma
// list or JSON object), --prefill/--decode/--mm-attention-backend and the
// environment, into `ctx`.
void parse_requests(Context& ctx, Diagnostics& diags);
// The level-3 / 4 / 5 requests for one layer (`_2` components inherit their
// base component's entry unless named themselves).
const Request* role_request(const Context& ctx, const ComponentSpec& c, const RoleSpec& r);
const Request* component_request(const Context& ctx, const ComponentSpec& c);
const Request* engine_default_request(const Context& ctx, const ComponentSpec& c);

// model_rules.cpp: every reason `canonical` cannot run layer (c, r) beyond its
// capabilities: the profile's rules of design 2.3, data-driven. Empty: it can.
Diagnostics model_rules(const Context& ctx, const Backend& backend, std::string_view written, const ComponentSpec& c,
                        const RoleSpec& r, const Problem& p);
// The description of the first checkpoint feature that layer (c, r)'s weights
// need and `backend` skips ("" when it uses them all).
std::string skipped_weights(const Backend& backend, const ComponentSpec& c, const RoleSpec& r);
// Backends that a checkpoint feature of layer (c, r) calls for (they require
// it), tried first by the auto level.
std::vector<std::string> checkpoint_backends(const Context& ctx, const ComponentSpec& c, const RoleSpec& r);
// The code of the reason a sparse backend runs layer (c, r) dense instead
// ("AK3003" cross-attention, "AK3020" too short or not square), "" if none.
std::string sparse_runs_dense(const Backend& backend, const RoleSpec& r, const Problem& p);

}  // namespace attnkit::select
