// `attnkit check [engine flags]`: runs the whole selection for a deployment
// without touching a GPU. Exit 0 when valid, 1 when not (design section 5).
#include <iostream>

#include "attnkit/select/selector.hpp"
#include "select/deployment_flags.hpp"
#include "commands.hpp"

namespace attnkit::cli {
namespace {

void print_text(const select::CheckResult& r) {
  std::cout << (r.model.empty() ? "(no model)" : r.model) << " on " << r.platform.label()
            << (r.platform.detected ? "" : " (named)") << ": " << (r.ok ? "valid" : "INVALID") << "\n";
  if (r.platform.kind == PlatformKind::cuda) std::cout << "  cuDNN " << cudnn_description(r.platform) << "\n";
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
  auto flags = std::make_shared<select::DeploymentFlags>();
  CLI::App* cmd = app.add_subcommand("check", "validate a deployment: run the whole backend selection without a GPU");
  select::add_deployment_flags(*cmd, *flags);
  cmd->add_option("--format", flags->format, "text or json")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  cmd->callback([flags, &exit_code, cmd] {
    select::finish_deployment_flags(*cmd, *flags);
    const select::CheckResult r = select::check_deployment(flags->config);
    if (flags->format == "json") std::cout << select::check_result_json(r) << "\n";
    else print_text(r);
    exit_code = r.ok ? 0 : 1;
  });
}

}  // namespace attnkit::cli
