#pragma once
// The selection engine (design section 2). For every attention layer of a
// model profile it picks a backend from the first priority level that is set:
//
//   1 per-request override   2 global force          3 component role override
//   4 component override     5 engine default        6 declared default
//   7 auto (the platform's preference order, filtered by capability)
//
// An explicit request that cannot run is an error with reasons; fallback happens
// only where the policy allows it, and is recorded in the Decision. Nothing here
// touches a GPU: `check` runs all of it for a named platform.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/backends/registry.hpp"
#include "attnkit/core/diagnostic.hpp"
#include "attnkit/platform/platform.hpp"
#include "attnkit/select/config.hpp"
#include "attnkit/select/profile.hpp"

namespace attnkit::select {

enum class Level : std::uint8_t {
  per_request = 1,
  global_force,
  component_role_override,
  component_override,
  engine_default,
  declared_default,
  auto_select,
};
// "per_request", "global_force", "component_role_override", "component_override",
// "engine_default", "declared_default", "auto".
std::string_view level_name(Level l);

// ---- names -------------------------------------------------------------------
// Names are matched as engine users write them: case-insensitive, `-` = `_`,
// surrounding blanks ignored ("Text-Encoder" -> "text_encoder").
std::string normalise_name(std::string_view name);
// normalise_name() plus the aliases: the engine's enum spellings
// (TORCH_SDPA -> sdpa, TORCH_CUDNN_SDPA and cudnn_sdpa -> cudnn, FA2 -> fa2),
// torch_native -> sdpa, triton -> triton_attn, sage / sageattention ->
// sage_attn, flash_attn -> fa, aiter_attn -> aiter.
std::string normalise_backend_name(std::string_view name);
// "auto" in any spelling: no request at that level.
bool is_auto_name(std::string_view name);
// Aliases normalise (see normalise_backend_name); families pick a kernel for
// the platform: `fa` -> fa2 (sm_80..89, sm_120), fa3 (sm_90), fa4
// (sm_100..103), the modelled `fa` elsewhere, xpu_flash on XPU; `sdpa` ->
// cuda_sdpa on CUDA, cpu_flash on the CPU, the modelled `sdpa` elsewhere.
// Returns "" when the name is unknown to `registry`.
std::string resolve_backend_name(std::string_view name, const Platform& platform, const Registry& registry);
// The backends `name` may run a problem with, in order: resolve_backend_name's,
// then, for `fa` on CUDA, the sm_80 kernel fa2 (it runs on every sm >= 80), so
// that `fa` on sm_90 is fa3 for every problem fa3 supports and fa2 for the rest
// (a paged KV cache, say). Selection takes the first whose check passes and
// records the refusals before it. Empty when the name is unknown.
std::vector<std::string> resolve_backend_candidates(std::string_view name, const Platform& platform,
                                                    const Registry& registry);
// Whether `canonical` is a member of the flash family (fa, fa2, fa3, fa4).
bool is_flash_family(std::string_view canonical);
// Whether the name `written` (a backend, alias or family, as a profile lists
// it) covers the backend `canonical` on `platform`: `fa` covers every flash
// kernel, `sdpa` the platform's SDPA-class backend.
bool names_backend(std::string_view written, std::string_view canonical, const Platform& platform,
                   const Registry& registry);
// Every name a user may write: registered backends, families and aliases.
std::vector<std::string> accepted_backend_names(const Registry& registry);
// AK2002 listing the accepted names and the nearest one.
Diagnostic unknown_backend(std::string_view name, const Registry& registry);

// ---- auto level ----------------------------------------------------------------
// What kind of layer the auto level chooses for.
struct LayerTraits {
  bool llm = false;                     // an LLM decoder layer (prefill/decode)
  bool ring_sequence_parallel = false;  // split over ring degree > 1
};
// The platform's preference order of design 2.1, most preferred first; names
// are families or backends, resolved with resolve_backend_name().
std::vector<std::string> platform_preference_order(const Platform& platform, const Problem& p,
                                                   const LayerTraits& layer = {});

// ---- global force --------------------------------------------------------------
// Process-wide level-2 override; "" clears it.
void set_global_force_backend(std::string name);
std::string global_force_backend();

// Forces a backend for every layer selected while it lives; restores the
// previous force (possibly none) when it goes out of scope.
class ScopedForceBackend {
 public:
  explicit ScopedForceBackend(std::string name);
  ~ScopedForceBackend();
  ScopedForceBackend(const ScopedForceBackend&) = delete;
  ScopedForceBackend& operator=(const ScopedForceBackend&) = delete;

 private:
  std::string previous_;
};

// ---- configuration and results -------------------------------------------------
// The engine flags of design section 5, as strings the way users write them.
struct DeploymentConfig {
  std::string model;                 // shipped profile name or PATH.yaml
  std::string platform;              // "" : this machine
  std::string dtype = "bf16";
  std::string attention_backend;     // level 5
  std::string attention_backend_config;
  std::string component_attention_backends;  // "comp[.role]=backend,..." (levels 3, 4)
  std::string prefill_attention_backend;     // level 3 for the LLM `prefill` role
  std::string decode_attention_backend;      // level 3 for the LLM `decode` role
  std::string mm_attention_backend;          // level 4 for multimodal components
  std::string kv_cache_dtype = "auto";
  // SGLang's --page-size: the page size of every paged KV cache the profile
  // declares (LLM decoders); nullopt: PagedKv's default.
  std::optional<int> page_size;
  // The degrees as resolved: the flag parser (parse_deployment_args) applies
  // the engine's rule that --sp-degree N alone means ulysses_degree = N.
  int ring_degree = 1;
  int ulysses_degree = 1;
  std::optional<int> sp_degree;      // default: ring_degree * ulysses_degree
  // SGLang's tensor parallelism of an LLM profile's attention: each layer's
  // Problem is one rank's heads (dist::attention_tp_size, dist::tensor_parallel_heads).
  int tp_size = 1;
  int dp_size = 1;
  bool enable_dp_attention = false;
  bool enable_torch_compile = false;
  bool enable_breakable_cuda_graph = false;
  // A per-request override to validate offline (design 2.2): `check` prepares
  // and applies it; a runtime::Deployment starts with it applied.
  std::string attention_backend_override;  // a backend name, or "none"
  std::string skip_softmax_params;         // JSON/YAML file, JSON string or k=v pairs (threshold_scale_factor, start_step)
  // Read the backend variables of the environment at the engine-default level
  // when --attention-backend / --mm-attention-backend leave it unset:
  // ATTNKIT_ATTENTION_BACKEND, then SGLANG_DIFFUSION_ATTENTION_BACKEND (DiT
  // components), and ATTNKIT_MM_ATTENTION_BACKEND, then
  // SGLANG_MM_ATTENTION_BACKEND (multimodal components).
  bool read_environment = true;
  // Engine flags the parser accepted that do not change attention selection
  // (SGLang's serving flags, e.g. "--port"), names only: a note (AK3023) lists them.
  std::vector<std::string> ignored_flags;
};

struct Rejection {
  std::string backend;
  std::string code;
  std::string reason;
};

// The selection for one (component, role): all its layers share it.
struct Decision {
  std::string component;
  std::string role;
  std::string backend;     // canonical name of the chosen (or refused) backend
  std::string requested;   // the name as written at the deciding level ("" for auto)
  Level decided_by = Level::auto_select;
  std::string source;      // who asked: "--attention-backend fa", "SGLANG_DIFFUSION_ATTENTION_BACKEND=fa (environment)", "" for auto
  std::string fallback_reason;  // "" when no fallback happened
  std::vector<Rejection> rejected;
  bool ok = true;          // false: the requested backend cannot run and no fallback is allowed
  int layers = 0;
  Problem problem;         // the representative attention call of the role
};

struct CheckResult {
  bool ok = false;
  Platform platform;
  std::string model;
  std::vector<Decision> selections;
  Diagnostics diagnostics;
};

// ---- per-request override ------------------------------------------------------
struct RequestOverride {
  std::string backend;              // a backend name, or "none" to restore the defaults
  std::optional<BackendConfig> skip_softmax;  // request-scoped skip-softmax settings
};

// The request of `config`'s request flags (--attention-backend-override,
// --skip-softmax-params); nullopt when neither is given. Skip-softmax
// parameters without an override keep the deployment's backends ("none").
Result<std::optional<RequestOverride>> request_flags(const DeploymentConfig& config);

// A backend requested by an engine flag at levels 3 to 5, kept for the audit
// once the model's layers exist (runtime::Deployment::audit).
struct FlagRequest {
  Level level = Level::engine_default;
  std::string component;  // "" : every component the flag reaches
  std::string role;       // "" : every role
  std::string source;     // the flag as written, e.g. "--component-attention-backends text_encoder=sdpa"
};

// The result of prepare(): everything apply() needs, already checked.
struct PreparedRequest {
  std::string backend;              // canonical; "none" restores defaults
  std::vector<Decision> decisions;  // for the switchable layers
  // Every layer's decision once applied; apply() only swaps this pointer in.
  std::shared_ptr<const std::vector<Decision>> active;
};

// ---- the engine -----------------------------------------------------------------
class Engine {
 public:
  using LogSink = std::function<void(std::string_view line)>;

  explicit Engine(DeploymentConfig config, const Registry& registry = default_registry());
  Engine(DeploymentConfig config, Profile profile, const Registry& registry = default_registry());

  // Runs the whole selection; logs each component's decisions once.
  const CheckResult& build();
  const CheckResult& result() const { return result_; }
  const Profile* profile() const { return profile_ ? &*profile_ : nullptr; }
  const BackendConfig& backend_config() const { return backend_config_; }
  // The backends the engine flags requested at levels 3-5 (after build()).
  const std::vector<FlagRequest>& flag_requests() const { return flag_requests_; }

  // The decision currently in force for a layer (after any applied request).
  const Decision* decision(std::string_view component, std::string_view role) const;
  const std::vector<Decision>& active() const { return *active_; }

  // Phase 1: checks and builds the alternative for every switchable layer;
  // changes nothing on failure. Results are cached per backend. "none" with
  // skip-softmax settings keeps the decisions and checks they run fa.
  Result<PreparedRequest> prepare(const RequestOverride& request);
  // Phase 2: swaps the prepared decisions in; cannot fail.
  void apply(const PreparedRequest& prepared) noexcept;

  void set_log_sink(LogSink sink) { log_ = std::move(sink); }

 private:
  struct Impl;
  DeploymentConfig config_;
  const Registry* registry_;
  std::optional<Profile> profile_;
  Diagnostics profile_error_;
  BackendConfig backend_config_;
  CheckResult result_;
  std::vector<FlagRequest> flag_requests_;
  std::shared_ptr<const std::vector<Decision>> active_;
  std::map<std::string, PreparedRequest> prepared_cache_;
  std::set<std::string> logged_;
  LogSink log_;
  friend struct Impl;
};

// ---- one attention call, no model profile --------------------------------------
// What `attnkit run` and the Python module use: the backend for one Problem on
// the first of `platforms` (e.g. this machine's GPU, then its CPU) that has one.
struct CallDecision {
  const Backend* backend = nullptr;
  Platform platform;
  Level decided_by = Level::auto_select;
  std::string requested;           // as written ("" for auto)
  std::vector<Rejection> rejected;  // candidates that could not run it: auto's, or a family's members before the one that runs
};
// `requested` is a name ("auto" or "" for none): an explicit name is level 1 and
// must run (else its reasons are returned); otherwise the global force (level
// 2), then the platforms' preference order (level 7).
Result<CallDecision> select_for_call(const Problem& p, const std::vector<Platform>& platforms,
                                     std::string_view requested, const Registry& registry = default_registry());

// Builds an Engine and returns its result: the library side of `attnkit check`.
// With request flags, the request is prepared and applied: the selections show
// what it runs, and its refusals join the diagnostics.
CheckResult check_deployment(const DeploymentConfig& config, const Registry& registry = default_registry());

}  // namespace attnkit::select
