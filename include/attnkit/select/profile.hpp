#pragma once
// Model profiles (design 2.4): data describing a model family's components,
// roles, attention shapes, declared defaults and the rules the selector applies.
// The shipped profiles are YAML files in data/profiles, embedded in the library;
// `--model PATH.yaml` loads another one.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/problem.hpp"
#include "attnkit/select/config.hpp"

namespace attnkit::select {

// One kind of attention layer inside a component.
struct RoleSpec {
  std::string name;        // self, cross, prefill, decode
  int layers = 1;
  int heads = 1, kv_heads = 1, head_dim = 64, head_dim_v = 64;
  MaskKind mask = MaskKind::none;
  Layout layout = Layout::bshd;
  bool paged_kv = false;
  bool cross = false;             // cross-attention: sparse backends fall back to dense
  bool sequence_parallel = false;  // split by ring / Ulysses
  std::string default_backend;     // declared default of this role ("" none)
  int seqlen = 4096;
};

struct ComponentSpec {
  std::string name;
  std::string default_backend;         // declared default ("" none)
  std::vector<RoleSpec> roles;
  bool sparse_allowed = false;         // sparse backends may run here
  std::vector<std::string> only;       // non-empty: the only backends its layers run (SDPA-only)
  std::vector<std::string> allow_list; // non-empty: accepts only auto or these (vision towers)
  bool engine_default_applies = true;  // --attention-backend reaches this component
  bool switchable = false;             // per-request overrides swap its layers
  bool llm = false;                    // LLM side: KV cache dtype, prefill/decode flags
  bool multimodal = false;             // bound to --mm-attention-backend
  bool ring_needs_profile_backend = false;  // ring > 1 needs rules.ring_backend here
};

struct ProfileRules {
  std::string ring_backend;            // family ring attention needs in marked components ("fa")
  bool sparse_rejects_ring = false;
  bool sparse_rejects_torch_compile = false;
  bool sparse_rejects_breakable_graph = false;
  std::string required_backend;        // e.g. hybrid_window_attn_h3
  std::string required_component;      // where it is required (transformer)
  std::string required_role;           // and which role ("" every non-cross role)
  std::string dense_escape_key;        // config key allowing a dense backend anyway
  bool rejects_ring = false, rejects_torch_compile = false, rejects_breakable_graph = false;
  bool linear_branch = false;          // weights carry the gated linear branch
  bool gated_compression = false;      // weights carry trained compression gates
  bool sparse_mla = false;             // DeepSeek-style sparse MLA model
  std::vector<std::string> kv_cache_dtypes;  // allowed --kv-cache-dtype values (LLMs)
  bool replicated_text_tokens = false; // joint attention: text tokens replicated under Ulysses
};

struct Profile {
  std::string name;
  std::string kind;
  std::string description;
  std::vector<ComponentSpec> components;
  ProfileRules rules;
  BackendSchema config_keys;  // model-level config keys (owner "model:<name>")
  std::string source;         // "builtin" or the file path

  const ComponentSpec* find_component(std::string_view name) const;
  std::vector<std::string> component_names() const;
  bool is_llm() const;
};

// Names of the embedded profiles, in shipping order.
std::vector<std::string> shipped_profile_names();
// A shipped name or a path to a YAML file (anything ending in .yaml/.yml or
// containing '/'). Unknown name: AK4020; unreadable file: AK4022; malformed
// profile: AK4021.
Result<Profile> load_profile(std::string_view name_or_path);
Result<Profile> parse_profile(std::string_view yaml_text, std::string_view source);

}  // namespace attnkit::select
