#pragma once
// The engine flags of design section 5 and the JSON shape of `check`, shared by
// the CLI and the Python module so both accept exactly the same deployment.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "attnkit/select/selector.hpp"

namespace attnkit::select {

// Flags as parsed; `sp_degree` and `page_size` are copied into the config
// only when given.
struct DeploymentFlags {
  DeploymentConfig config;
  int sp_degree = 0;
  int page_size = 0;
  std::string format = "text";
};

// Registers --model, --platform, --dtype, the backend flags, --page-size, the
// parallel degrees and sizes (sequence and tensor parallelism), the
// torch.compile / CUDA-graph switches, the request flags
// (--attention-backend-override, --skip-softmax-params) and the SGLang server
// flags that do not change attention selection (accepted, listed by AK3023) on `app`.
void add_deployment_flags(CLI::App& app, DeploymentFlags& flags);
// Registers only --ring-degree, --ulysses-degree and --sp-degree (`attnkit run`).
void add_parallel_flags(CLI::App& app, DeploymentFlags& flags);
// Refuses an empty value for every numeric option of `app` (CLI11 reads "" as 0:
// --seed '' ran with seed 0, --softcap '' without a softcap, --ring-degree ''
// was "must be at least 1, got 0"). Call once its options are added.
void refuse_empty_numbers(CLI::App& app);
// Copies --sp-degree and --page-size into the config when they were given on
// `app`, and names the ignored SGLang flags that were.
void finish_deployment_flags(const CLI::App& app, DeploymentFlags& flags);

// Parses engine flags (no program name) into a config; a bad flag is AK3107.
Result<DeploymentConfig> parse_deployment_args(const std::vector<std::string>& args);

// {"ok", "platform", "selections":[...], "diagnostics":[...]} (design section 5).
std::string check_result_json(const CheckResult& r, int indent = 2);
// One element of "selections" and the "diagnostics" array, in the same shape.
std::string decision_json(const Decision& d, int indent = 2);
std::string diagnostics_json(const Diagnostics& d, int indent = 2);

}  // namespace attnkit::select
