// `attnkit run`: build a random problem, choose a backend, run it, time it and
// compare it with the exact reference on sampled heads.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "attnkit/backends/registry.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/core/host_memory.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "attnkit/platform/device_problem_data.hpp"
#include "attnkit/select/selector.hpp"
#include "cli_support.hpp"
#include "commands.hpp"
#include "run_parallel.hpp"

namespace attnkit::cli {
namespace {

struct RunOptions {
  // kv_heads, kv_seqlen and v_head_dim follow heads, seqlen and head_dim
  // unless given (see given_*); so do batch and seqlen under --varlen.
  int batch = 2, heads = 16, kv_heads = 0, seqlen = 1024, kv_seqlen = 0, head_dim = 128, v_head_dim = 0;
  bool given_batch = false, given_seqlen = false, given_kv_heads = false, given_kv_seqlen = false,
       given_v_head_dim = false, given_window = false, given_varlen = false;
  std::string dtype = "bf16";
  bool causal = false;
  std::string window;  // "L,R"
  float softcap = 0.0f;
  std::string varlen;  // "5,0,33"
  std::string backend = "auto";
  std::uint64_t seed = 0;
  int repeat = 5;
  int check_heads = 4;
  std::string format = "text";
  select::DeploymentFlags parallel;  // --ring-degree, --ulysses-degree, --sp-degree (run_parallel.cpp)
  int replicated_tokens = 0;
};

struct RunReport {
  std::string backend, decided_by, platform;
  std::vector<std::pair<std::string, std::string>> rejected;  // backend, "code: message"
  Problem problem;
  double time_ms = 0.0, tflops = 0.0;
  ErrorStats error;
  double bound = 0.0;
  bool passed = false;
  int heads_checked = 0;
};

Diagnostic usage(std::string detail) {
  return diagnose("AK0002", {{"command", "attnkit run"}, {"detail", std::move(detail)}});
}

// The default number of KV heads for `heads` query heads: a GQA group of 4
// when it divides (16 -> 4, the default problem), else one KV head per query head.
int default_kv_heads(int heads) { return heads % 4 == 0 ? heads / 4 : heads; }

Result<Problem> build_problem(const RunOptions& o, ProblemDataOptions& data) {
  if (o.repeat < 1) return usage("--repeat must be at least 1 (the median of no runs is not a time), got " +
                                 std::to_string(o.repeat));
  if (o.check_heads < 1)
    return usage("--check-heads must be at least 1 (a run is always checked against the reference), got " +
                 std::to_string(o.check_heads));
  Problem p;
  p.batch = o.batch;
  p.heads_q = o.heads;
  p.heads_kv = o.given_kv_heads ? o.kv_heads : default_kv_heads(o.heads);
  p.seqlen_q = o.seqlen;
  p.seqlen_k = o.given_kv_seqlen ? o.kv_seqlen : o.seqlen;
  p.head_dim_qk = o.head_dim;
  p.head_dim_v = o.given_v_head_dim ? o.v_head_dim : o.head_dim;
  const auto dtype = parse_dtype(o.dtype);
  if (!dtype) return diagnose("AK1007", {{"role", "q"}, {"dtype", o.dtype}, {"reason", "unknown dtype name; use fp32, fp16 or bf16"}});
  p.dtype = *dtype;
  p.softcap = o.softcap;
  if (o.causal) p.mask = MaskKind::causal;
  if (o.given_window) {
    const auto lr = parse_int_list(o.window);
    if (!lr || lr->size() != 2)
      return diagnose("AK1004", {{"left", o.window}, {"right", "?"}});
    p.mask = MaskKind::sliding_window;
    p.window = {(*lr)[0], (*lr)[1]};
    if (o.causal) p.window.right = std::min(p.window.right < 0 ? 0 : p.window.right, 0);
  }
  if (o.given_varlen) {
    const auto lens = parse_int_list(o.varlen);
    if (!lens || lens->empty())
      return diagnose("AK1108", {{"name", "--varlen"}, {"reason", "expected comma-separated lengths, e.g. 5,0,33"}});
    if (o.given_batch && o.batch != static_cast<int>(lens->size()))
      return usage("--batch " + std::to_string(o.batch) + " contradicts the " + std::to_string(lens->size()) +
                   " sequences of --varlen (leave --batch out)");
    if (o.given_seqlen || o.given_kv_seqlen)
      return usage("--seqlen / --kv-seqlen contradict --varlen, which gives every sequence's length (leave them out)");
    p.layout = Layout::thd;
    p.batch = static_cast<int>(lens->size());
    p.seqlen_q = p.seqlen_k = std::max(0, *std::max_element(lens->begin(), lens->end()));
    data.q_lens = data.k_lens = *lens;
    for (int len : *lens)
      if (len < 0) return diagnose("AK1108", {{"name", "--varlen"}, {"reason", "lengths must be >= 0"}});
  }
  Diagnostics why = validate_problem(p);
  if (!why.ok()) return why;
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Runs and times the plan on its platform; leaves the outputs of one run in `data`.
Result<double> run_and_time(const Plan& plan, const Platform& platform, HostProblemData& data, int repeat) {
  if (platform.kind == PlatformKind::cuda) {
    auto device = DeviceProblemData::upload(data);
    if (!device) return device.diagnostics();
    auto times = (*device)->time_runs(plan, 2, repeat);
    if (!times) return times.diagnostics();
    Diagnostics why = (*device)->download_outputs(data);
    if (!why.ok()) return why;
    return median(*times);
  }
  std::vector<std::byte> workspace(plan.workspace_bytes());  // plan() checked it fits in host memory
  Diagnostics why = plan.run(data.tensors(), workspace, nullptr);  // warm-up, and the checked outputs
  if (!why.ok()) return why;
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    why = plan.run(data.tensors(), workspace, nullptr);
    const auto t1 = std::chrono::steady_clock::now();
    if (!why.ok()) return why;
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return median(ms);
}

// Compares `data`'s outputs with the reference on up to `max_heads` (batch, head)
// pairs spread over the problem.
Result<ErrorStats> check_against_reference(const HostProblemData& data, int max_heads, int& heads_checked) {
  const Problem& p = data.problem();
  const auto heads = sampled_heads(p, max_heads);
  heads_checked = static_cast<int>(heads.size());
  const std::int64_t out_rows = p.layout == Layout::thd ? data.total_q() : std::int64_t{p.batch} * p.seqlen_q;
  const Diagnostics why = check_host_allocation("the reference's fp64 output",
                                                out_rows * p.heads_q * p.head_dim_v * std::int64_t{sizeof(double)});
  if (!why.ok()) return why;
  const HostTensor want = reference_on_heads(data, heads);
  const AttentionTensors got = data.tensors();
  std::vector<std::int64_t> offsets, lens;
  for (int b = 0; b < p.batch; ++b) {
    const SequenceSpan span = host_sequence_span(p, got, b);
    offsets.push_back(span.q_offset);
    lens.push_back(span.q_len);
  }
  return compare_heads(p, got.out, want.view(), heads, offsets, lens);
}

int execute(const RunOptions& o) {
  ProblemDataOptions data_options;
  data_options.seed = o.seed;
  auto problem = build_problem(o, data_options);
  if (!problem) return print_diagnostics(problem.diagnostics(), o.format);
  const ParallelRunOptions parallel{o.parallel, o.replicated_tokens, o.backend, o.repeat, o.check_heads, o.format};
  if (wants_parallel_run(parallel)) return run_parallel(*problem, data_options, parallel);
  auto choice = select::select_for_call(*problem, detect_local_platforms(), o.backend);
  if (!choice) return print_diagnostics(choice.diagnostics(), o.format);
  if (Diagnostics inexact = refuse_inexact_for_run(*choice->backend); !inexact.ok())
    return print_diagnostics(inexact, o.format);
  auto plan = choice->backend->plan(*problem, choice->platform);
  if (!plan) return print_diagnostics(plan.diagnostics(), o.format);
  auto data = HostProblemData::create(*problem, data_options);
  if (!data) return print_diagnostics(data.diagnostics(), o.format);
  auto time_ms = run_and_time(**plan, choice->platform, *data, o.repeat);
  if (!time_ms) return print_diagnostics(time_ms.diagnostics(), o.format);

  RunReport r;
  r.backend = std::string(choice->backend->name());
  r.decided_by = std::string(select::level_name(choice->decided_by));
  if (choice->decided_by == select::Level::auto_select)
    r.decided_by += ": first in " + choice->platform.label() + "'s preference order that supports the problem";
  r.platform = choice->platform.label() + " (" + choice->platform.device_name + ")";
  for (const select::Rejection& x : choice->rejected) r.rejected.emplace_back(x.backend, x.code + ": " + x.reason);
  r.problem = *problem;
  r.time_ms = *time_ms;
  r.tflops = *time_ms > 0 ? problem->flops() / (*time_ms * 1e-3) / 1e12 : 0.0;
  auto error = check_against_reference(*data, o.check_heads, r.heads_checked);
  if (!error) return print_diagnostics(error.diagnostics(), o.format);
  r.error = *error;
  r.bound = rel_l2_bound(*problem);
  r.passed = r.error.clean() && r.error.rel_l2 <= r.bound;

  if (o.format == "json") {
    nlohmann::json j = {{"backend", r.backend},
                        {"time_ms", r.time_ms},
                        {"tflops", r.tflops},
                        {"rel_l2_err", r.error.rel_l2},
                        {"max_abs_err", r.error.max_abs},
                        {"passed", r.passed},
                        {"decided_by", r.decided_by},
                        {"platform", r.platform},
                        {"problem", r.problem.summary()},
                        {"error_bound", r.bound},
                        {"heads_checked", r.heads_checked},
                        {"unwritten_or_nonfinite", r.error.not_finite}};
    nlohmann::json rejected = nlohmann::json::array();
    for (const auto& [name, why] : r.rejected) rejected.push_back({{"backend", name}, {"reason", why}});
    j["rejected"] = rejected;
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << fmt::format("problem   {}\n", r.problem.summary());
    std::cout << fmt::format("platform  {}\n", r.platform);
    std::cout << fmt::format("backend   {}  ({})\n", r.backend, r.decided_by);
    for (const auto& [name, why] : r.rejected) std::cout << fmt::format("  skipped {}: {}\n", name, why);
    std::cout << fmt::format("time      {:.3f} ms (median of {})   {:.4g} TFLOP/s\n", r.time_ms, o.repeat, r.tflops);
    std::cout << fmt::format("error     rel_l2 {:.3e}  max_abs {:.3e}  vs reference on {} head(s)  bound {:.0e}\n",
                             r.error.rel_l2, r.error.max_abs, r.heads_checked, r.bound);
    if (!r.error.clean()) std::cout << fmt::format("          {} non-finite or unwritten outputs\n", r.error.not_finite);
    std::cout << (r.passed ? "PASSED\n" : "FAILED\n");
  }
  return r.passed ? 0 : 1;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run attention on a random problem and check it against the reference");
  cmd->add_option("--batch", opts->batch, "batch size")->capture_default_str();
  cmd->add_option("--heads", opts->heads, "query heads")->capture_default_str();
  cmd->add_option("--kv-heads", opts->kv_heads, "key/value heads (GQA; default: --heads / 4 when 4 divides it, else --heads)");
  cmd->add_option("--seqlen", opts->seqlen, "query length")->capture_default_str();
  cmd->add_option("--kv-seqlen", opts->kv_seqlen, "key length (default: --seqlen)");
  cmd->add_option("--head-dim", opts->head_dim, "q/k head dim")->capture_default_str();
  cmd->add_option("--v-head-dim", opts->v_head_dim, "v head dim (default: --head-dim)");
  cmd->add_option("--dtype", opts->dtype, "fp32 | fp16 | bf16")->capture_default_str();
  cmd->add_flag("--causal", opts->causal, "causal mask (bottom-right aligned)");
  cmd->add_option("--window", opts->window, "sliding window L,R (-1 = unbounded)");
  cmd->add_option("--softcap", opts->softcap, "logit softcap (0 = off)");
  cmd->add_option("--varlen", opts->varlen, "packed sequences with these lengths, e.g. 5,0,33");
  cmd->add_option("--backend", opts->backend, "backend name or auto")->capture_default_str();
  cmd->add_option("--seed", opts->seed, "random seed")->capture_default_str();
  cmd->add_option("--repeat", opts->repeat, "timed repetitions (median reported)")->capture_default_str();
  cmd->add_option("--check-heads", opts->check_heads, "(batch, head) pairs compared with the reference")->capture_default_str();
  cmd->add_option("--format", opts->format, "text | json")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  select::add_parallel_flags(*cmd, opts->parallel);
  cmd->add_option("--replicated-tokens", opts->replicated_tokens,
                  "joint attention: leading text tokens of every sequence kept whole on every rank");
  select::refuse_empty_numbers(*cmd);
  cmd->callback([opts, cmd, &exit_code] {
    select::finish_deployment_flags(*cmd, opts->parallel);
    RunOptions& o = *opts;
    o.given_batch = cmd->count("--batch") > 0;
    o.given_seqlen = cmd->count("--seqlen") > 0;
    o.given_kv_heads = cmd->count("--kv-heads") > 0;
    o.given_kv_seqlen = cmd->count("--kv-seqlen") > 0;
    o.given_v_head_dim = cmd->count("--v-head-dim") > 0;
    o.given_window = cmd->count("--window") > 0;
    o.given_varlen = cmd->count("--varlen") > 0;
    exit_code = execute(o);
  });
}

}  // namespace attnkit::cli
