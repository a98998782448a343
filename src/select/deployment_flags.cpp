#include "select/deployment_flags.hpp"

#include <nlohmann/json.hpp>

namespace attnkit::select {

namespace {

// SGLang server flags (python/sglang/srt/server_args.py) that `check` accepts
// so that a pasted server command line checks, and ignores: serving, logging,
// tokenizer and model loading, memory and scheduling, CUDA-graph batch sizes,
// the multi-node launch, weight quantization (the KV cache's dtype is
// --kv-cache-dtype), and the parallelism that splits layers or experts, not
// attention heads (pipeline, expert). None changes which kernel an attention
// layer runs or its shape on a rank. Flags that can (speculative decoding,
// deterministic inference, --device) are not here: they stay unknown (AK3107).
struct IgnoredFlag {
  const char* names;  // CLI11 spelling: "--a,--b" for aliases
  bool takes_value;
};
constexpr IgnoredFlag kIgnoredSglangFlags[] = {
    {"--model-path", true}, {"--tokenizer-path", true}, {"--tokenizer-mode", true}, {"--revision", true},
    {"--load-format", true}, {"--trust-remote-code", false}, {"--skip-tokenizer-init", false},
    {"--served-model-name", true}, {"--chat-template", true}, {"--context-length", true}, {"--quantization", true},
    {"--reasoning-parser", true}, {"--tool-call-parser", true},
    {"--host", true}, {"--port", true}, {"--api-key", true}, {"--log-level", true}, {"--log-requests", false},
    {"--enable-metrics", false}, {"--enable-cache-report", false},
    {"--mem-fraction-static", true}, {"--max-running-requests", true}, {"--max-queued-requests", true},
    {"--max-total-tokens", true}, {"--chunked-prefill-size", true}, {"--max-prefill-tokens", true},
    {"--schedule-policy", true}, {"--schedule-conservativeness", true}, {"--disable-radix-cache", false},
    {"--enable-mixed-chunk", false}, {"--disable-overlap-schedule", false}, {"--stream-interval", true},
    {"--watchdog-timeout", true}, {"--random-seed", true},
    {"--disable-cuda-graph", false}, {"--cuda-graph-max-bs", true}, {"--torch-compile-max-bs", true},
    {"--nnodes", true}, {"--node-rank", true}, {"--dist-init-addr", true}, {"--nccl-port", true},
    {"--dist-timeout", true}, {"--base-gpu-id", true}, {"--enable-p2p-check", false},
    {"--disable-custom-all-reduce", false}, {"--load-balance-method", true},
    {"--pp-size,--pipeline-parallel-size", true}, {"--ep-size,--expert-parallel-size", true},
};
constexpr const char* kIgnoredGroup = "SGLang server flags that do not change attention selection (accepted, ignored)";

}  // namespace

void add_deployment_flags(CLI::App& app, DeploymentFlags& flags) {
  DeploymentConfig& c = flags.config;
  app.add_option("--model", c.model, "shipped profile name or PATH.yaml")->required();
  app.add_option("--platform", c.platform,
                 "cuda:sm90|cuda:sm80|cuda:sm100|cuda:sm120|cuda:sm75|cuda:sm70|rocm|xpu|musa|mps|npu|cpu (default: this machine)");
  app.add_option("--dtype", c.dtype, "activation dtype (auto, SGLang's default: the checkpoint's, bf16)")
      ->capture_default_str();
  app.add_option("--attention-backend", c.attention_backend, "engine default backend");
  app.add_option("--attention-backend-config", c.attention_backend_config,
                 "JSON/YAML file, JSON string, or k=v,k2=v2 pairs");
  app.add_option("--component-attention-backends", c.component_attention_backends,
                 "comma list of component[.role]=backend");
  app.add_option("--prefill-attention-backend", c.prefill_attention_backend, "LLM prefill backend");
  app.add_option("--decode-attention-backend", c.decode_attention_backend, "LLM decode backend");
  app.add_option("--mm-attention-backend", c.mm_attention_backend, "vision tower backend");
  app.add_option("--kv-cache-dtype", c.kv_cache_dtype, "KV cache dtype (auto: the activation dtype)")->capture_default_str();
  app.add_option("--page-size", flags.page_size,
                 "KV cache page size of the paged (LLM) layers, in tokens (default: " + std::to_string(PagedKv{}.page_size) +
                     "; SGLang's default depends on its backend)");
  add_parallel_flags(app, flags);
  app.add_option("--tp-size,--tensor-parallel-size,--tp", c.tp_size,
                 "tensor parallel size: each rank runs heads / N of an LLM's attention heads")->capture_default_str();
  app.add_option("--dp-size,--data-parallel-size,--dp", c.dp_size,
                 "data parallel size: under --enable-dp-attention the attention TP size is tp / dp")->capture_default_str();
  app.add_flag("--enable-dp-attention", c.enable_dp_attention, "data parallel attention (attention TP size = tp / dp)");
  app.add_flag("--enable-torch-compile", c.enable_torch_compile, "torch.compile is on");
  app.add_flag("--enable-breakable-cuda-graph", c.enable_breakable_cuda_graph, "breakable CUDA graphs are on");
  app.add_option("--attention-backend-override", c.attention_backend_override,
                 "validate a per-request override: a backend name, or none");
  app.add_option("--skip-softmax-params", c.skip_softmax_params,
                 "request-scoped skip-softmax: threshold_scale_factor, start_step (JSON/YAML file, JSON string or k=v)");
  const std::string ignored = "SGLang server flag";
  for (const IgnoredFlag& f : kIgnoredSglangFlags)
    (f.takes_value ? app.add_option(f.names, ignored)->type_name("VALUE") : app.add_flag(f.names, ignored))
        ->group(kIgnoredGroup);
  refuse_empty_numbers(app);
}

void add_parallel_flags(CLI::App& app, DeploymentFlags& flags) {
  DeploymentConfig& c = flags.config;
  app.add_option("--ring-degree", c.ring_degree, "ring attention degree")->capture_default_str();
  app.add_option("--ulysses-degree", c.ulysses_degree, "Ulysses degree")->capture_default_str();
  app.add_option("--sp-degree", flags.sp_degree,
                 "sequence-parallel degree (ring * ulysses; alone it sets the Ulysses degree)");
}

void refuse_empty_numbers(CLI::App& app) {
  const CLI::Validator non_empty(
      [](std::string& value) { return value.empty() ? std::string("an empty value is not a number") : std::string(); },
      "", "NONEMPTY");
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();
    if (o->get_items_expected_min() > 0 && (type == "INT" || type == "UINT" || type == "FLOAT")) o->check(non_empty);
  }
}

void finish_deployment_flags(const CLI::App& app, DeploymentFlags& flags) {
  DeploymentConfig& c = flags.config;
  // `attnkit run` registers the parallel flags alone.
  auto given = [&](const std::string& name) {
    const CLI::Option* o = app.get_option_no_throw(name);
    return o != nullptr && o->count() > 0;
  };
  if (given("--page-size")) c.page_size = flags.page_size;
  // Names only: values such as --api-key's stay out of the note.
  for (const IgnoredFlag& f : kIgnoredSglangFlags) {
    const std::string first = std::string(f.names).substr(0, std::string_view(f.names).find(','));
    if (given(first)) c.ignored_flags.push_back(first);
  }
  if (!given("--sp-degree")) return;
  c.sp_degree = flags.sp_degree;
  // As the engine does: --sp-degree N with neither ring nor Ulysses given
  // means Ulysses = N (then the Ulysses rules apply to N).
  if (!given("--ring-degree") && !given("--ulysses-degree") && flags.sp_degree != 1)
    c.ulysses_degree = flags.sp_degree;
}

Result<DeploymentConfig> parse_deployment_args(const std::vector<std::string>& args) {
  CLI::App app{"attnkit check"};
  DeploymentFlags flags;
  add_deployment_flags(app, flags);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return diagnose("AK3107", {{"detail", e.what()}});
  }
  finish_deployment_flags(app, flags);
  return flags.config;
}

namespace {

using json = nlohmann::ordered_json;

json decision_object(const Decision& d) {
  json rejected = json::array();
  for (const Rejection& x : d.rejected) rejected.push_back({{"backend", x.backend}, {"code", x.code}, {"reason", x.reason}});
  return {{"component", d.component},
          {"role", d.role},
          {"backend", d.backend},
          {"decided_by", level_name(d.decided_by)},
          {"fallback_reason", d.fallback_reason.empty() ? json(nullptr) : json(d.fallback_reason)},
          {"rejected", rejected},
          {"requested_by", d.source.empty() ? json(nullptr) : json(d.source)}};
}

json diagnostics_array(const Diagnostics& diagnostics) {
  json out = json::array();
  for (const Diagnostic& d : diagnostics)
    out.push_back({{"code", d.code},
                   {"severity", severity_name(d.severity)},
                   {"message", d.message},
                   {"meaning", d.meaning},
                   {"solutions", d.solutions},
                   {"example", d.example}});
  return out;
}

// Flags and names are user bytes: invalid UTF-8 is replaced (U+FFFD), not
// thrown as nlohmann's type_error 316 (which aborted `check --format json`).
std::string dump(const json& j, int indent) { return j.dump(indent, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string check_result_json(const CheckResult& r, int indent) {
  json selections = json::array();
  for (const Decision& d : r.selections) selections.push_back(decision_object(d));
  json j = {{"ok", r.ok}, {"platform", r.platform.label()}, {"selections", selections},
            {"diagnostics", diagnostics_array(r.diagnostics)}};
  // The cuDNN release the check ran against: found on this machine, or assumed for a named platform.
  if (r.platform.kind == PlatformKind::cuda)
    j["cudnn"] = {
        {"version", r.platform.has_cudnn ? json(cudnn_version_string(r.platform.cudnn_version)) : json(nullptr)},
        {"detail", cudnn_description(r.platform)}};
  return dump(j, indent);
}

std::string decision_json(const Decision& d, int indent) { return dump(decision_object(d), indent); }

std::string diagnostics_json(const Diagnostics& d, int indent) { return dump(diagnostics_array(d), indent); }

}  // namespace attnkit::select
