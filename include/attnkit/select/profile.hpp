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

// Checkpoint features: what a model's weights provide beyond plain q/k/v
// attention, named in profiles (`checkpoint.provides`) and in backend
// capabilities (`requires_weights`, `uses_weights`). The vocabulary is fixed:
// a profile naming another feature is refused.
struct CheckpointFeature {
  std::string_view name;         // linear_branch, compression_gates, sparse_mla
  std::string_view description;  // for messages: "a gated linear-attention branch"
  std::string_view missing_code; // raised when a backend requires it and the checkpoint lacks it
  bool gate_input = false;       // a call passes it as AttentionTensors::gate (a layer refuses a call without it: AK2118)
};
const std::vector<CheckpointFeature>& checkpoint_features();
const CheckpointFeature* find_checkpoint_feature(std::string_view name);

// One kind of attention layer inside a component.
struct RoleSpec {
  std::string name;        // self, cross, prefill, decode
  int layers = 1;          // 0: the role is declared but this checkpoint builds no such layer
  int heads = 1, kv_heads = 1, head_dim = 64, head_dim_v = 64;
  MaskKind mask = MaskKind::none;
  Layout layout = Layout::bshd;
  bool paged_kv = false;
  bool cross = false;             // cross-attention: sparse backends fall back to dense
  bool sequence_parallel = false;  // split by ring / Ulysses
  std::string default_backend;     // declared default of this role ("" none)
  int seqlen = 4096;               // keys (and queries unless seqlen_q is set)
  int seqlen_q = 0;                // 0: seqlen (a decode step has 1 query)
  std::optional<VideoGrid> video;  // the latent grid of a video self-attention call (sparse video backends)
  // Checkpoint features these layers' weights carry that a backend must use:
  // one that ignores them computes another model (VDN-H3's linear branch).
  std::vector<std::string> weights_need;

  // The role's representative attention call: batch 1, seqlen keys, seqlen_q
  // queries (seqlen when 0), PagedKv's default page size for a paged cache, bf16.
  Problem problem() const;
};

struct ComponentSpec {
  std::string name;
  std::string default_backend;         // declared default ("" none)
  std::vector<RoleSpec> roles;
  bool sparse_allowed = false;         // sparse backends may run here
  std::vector<std::string> only;       // non-empty: the only backends its layers run (SDPA-only layers)
  std::vector<std::string> allow_list; // non-empty: accepts only auto or these (vision towers)
  std::vector<std::string> auto_order; // non-empty: the auto level's order here instead of the platform's
  bool engine_default_applies = true;  // --attention-backend reaches this component
  bool switchable = false;             // per-request overrides swap its layers
  bool llm = false;                    // LLM side: KV cache dtype, prefill/decode flags
  bool multimodal = false;             // bound to --mm-attention-backend
  bool ring_needs_profile_backend = false;  // ring > 1 needs rules.ring_backend here
  std::vector<std::string> weights_need;    // as RoleSpec::weights_need, for every role
};

struct ProfileRules {
  std::string ring_backend;            // the backend (or family) ring attention needs in marked components ("fa")
  bool sparse_rejects_ring = false;
  bool sparse_rejects_torch_compile = false;
  bool sparse_rejects_breakable_graph = false;
  std::string dense_escape_key;        // bool config key allowing a backend that skips weights_need (smoke tests)
  bool rejects_ring = false, rejects_torch_compile = false, rejects_breakable_graph = false;
  std::vector<std::string> kv_cache_dtypes;  // allowed --kv-cache-dtype values (LLMs)
  bool replicated_text_tokens = false; // joint attention: text tokens replicated under Ulysses
};

// What the weights provide (see CheckpointFeature).
struct CheckpointSpec {
  std::vector<std::string> provides;
  // Features whose backend, wherever it can run a layer, is the only one that
  // layer accepts (GLM-DSA's sparse MLA with an fp8_e4m3 cache on sm_120/121).
  std::vector<std::string> exclusive_where_runnable;
  bool has(std::string_view feature) const;
};

struct Profile {
  std::string name;
  std::string kind;
  std::string description;
  std::vector<ComponentSpec> components;
  CheckpointSpec checkpoint;
  ProfileRules rules;
  BackendSchema config_keys;  // model-level config keys (owner "model:<name>")
  std::string source;         // "builtin" or the file path

  // `name` as users write it (case, '-' for '_').
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
