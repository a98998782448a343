// `attnkit check [engine flags]`: runs the whole selection for a deployment
// without touching a GPU. Exit 0 when valid, 1 when not (design section 5).
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnkit/select/selector.hpp"
#include "commands.hpp"

namespace attnkit::cli {
namespace {

struct CheckOptions {
  select::DeploymentConfig config;
  int sp_degree = 0;  // 0: not given
  std::string format = "text";
};

nlohmann::ordered_json to_json(const select::CheckResult& r) {
  nlohmann::ordered_json selections = nlohmann::ordered_json::array();
  for (const select::Decision& d : r.selections) {
    nlohmann::ordered_json rejected = nlohmann::ordered_json::array();
    for (const select::Rejection& x : d.rejected)
      rejected.push_back({{"backend", x.backend}, {"code", x.code}, {"reason", x.reason}});
    selections.push_back({{"component", d.component},
                          {"role", d.role},
                          {"backend", d.backend},
                          {"decided_by", select::level_name(d.decided_by)},
                          {"fallback_reason", d.fallback_reason.empty() ? nlohmann::ordered_json(nullptr)
                                                                        : nlohmann::ordered_json(d.fallback_reason)},
                          {"rejected", rejected}});
  }
  nlohmann::ordered_json diagnostics = nlohmann::ordered_json::array();
  for (const Diagnostic& d : r.diagnostics)
    diagnostics.push_back({{"code", d.code},
                           {"severity", severity_name(d.severity)},
                           {"message", d.message},
                           {"meaning", d.meaning},
                           {"solutions", d.solutions},
                           {"example", d.example}});
  return {{"ok", r.ok}, {"platform", r.platform.label()}, {"selections", selections}, {"diagnostics", diagnostics}};
}

void print_text(const select::CheckResult& r) {
  std::cout << (r.model.empty() ? "(no model)" : r.model) << " on " << r.platform.label()
            << (r.platform.detected ? "" : " (named)") << ": " << (r.ok ? "valid" : "INVALID") << "\n";
  for (const select::Decision& d : r.selections) {
    std::cout << "  " << d.component << "." << d.role << " -> " << (d.backend.empty() ? "(none)" : d.backend) << "  ["
              << select::level_name(d.decided_by) << (d.ok ? "" : ", refused") << "]\n";
    if (!d.fallback_reason.empty()) std::cout << "      fallback: " << d.fallback_reason << "\n";
    for (const select::Rejection& x : d.rejected)
      std::cout << "      rejected " << x.backend << ": " << x.code << " " << x.reason << "\n";
  }
  for (const Diagnostic& d : r.diagnostics) {
    std::cout << d.code << " " << severity_name(d.severity) << ": " << d.message << "\n";
    for (const std::string& s : d.solutions) std::cout << "    - " << s << "\n";
  }
}

}  // namespace

void add_check_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<CheckOptions>();
  CLI::App* cmd = app.add_subcommand("check", "validate a deployment: run the whole backend selection without a GPU");
  select::DeploymentConfig& c = opts->config;
  cmd->add_option("--model", c.model, "shipped profile name or PATH.yaml")->required();
  cmd->add_option("--platform", c.platform,
                  "cuda:sm90|cuda:sm80|cuda:sm100|cuda:sm120|rocm|xpu|musa|mps|npu|cpu (default: this machine)");
  cmd->add_option("--dtype", c.dtype, "activation dtype")->capture_default_str();
  cmd->add_option("--attention-backend", c.attention_backend, "engine default backend");
  cmd->add_option("--attention-backend-config", c.attention_backend_config,
                  "JSON/YAML file, JSON string, or k=v,k2=v2 pairs");
  cmd->add_option("--component-attention-backends", c.component_attention_backends,
                  "comma list of component[.role]=backend");
  cmd->add_option("--prefill-attention-backend", c.prefill_attention_backend, "LLM prefill backend");
  cmd->add_option("--decode-attention-backend", c.decode_attention_backend, "LLM decode backend");
  cmd->add_option("--mm-attention-backend", c.mm_attention_backend, "vision tower backend");
  cmd->add_option("--kv-cache-dtype", c.kv_cache_dtype, "KV cache dtype (auto: the activation dtype)")->capture_default_str();
  cmd->add_option("--ring-degree", c.ring_degree, "ring attention degree")->capture_default_str();
  cmd->add_option("--ulysses-degree", c.ulysses_degree, "Ulysses degree")->capture_default_str();
  cmd->add_option("--sp-degree", opts->sp_degree, "sequence-parallel degree (ring * ulysses)");
  cmd->add_flag("--enable-torch-compile", c.enable_torch_compile, "torch.compile is on");
  cmd->add_flag("--enable-breakable-cuda-graph", c.enable_breakable_cuda_graph, "breakable CUDA graphs are on");
  cmd->add_option("--format", opts->format, "text or json")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  cmd->callback([opts, &exit_code, cmd] {
    if (cmd->count("--sp-degree") > 0) opts->config.sp_degree = opts->sp_degree;
    const select::CheckResult r = select::check_deployment(opts->config);
    if (opts->format == "json") std::cout << to_json(r).dump(2) << "\n";
    else print_text(r);
    exit_code = r.ok ? 0 : 1;
  });
}

}  // namespace attnkit::cli
