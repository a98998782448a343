#include "run_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnkit/core/error_stats.hpp"
#include "attnkit/dist/sequence_parallel.hpp"
#include "attnkit/select/selector.hpp"
#include "cli_support.hpp"
#include "dist/device_ops.hpp"

namespace attnkit::cli {
namespace {

// MPI when mpirun started this process, else a group of one (so that degrees
// above 1 meet AK5007 with its "launch with mpirun -np N").
Result<std::shared_ptr<dist::Communicator>> host_world() {
  if (dist::launched_by_mpirun()) return dist::mpi_world();
  return dist::make_in_process_group(1)[0];
}

// This rank's index among the ranks of its node: its GPU.
int local_rank(int world_rank) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return world_rank;
}

// This rank's rows of the sampled heads against the same rows of the reference.
ErrorStats check_shard(const HostProblemData& data, const dist::Sharding& s, int rank, const TensorView& got,
                       const std::vector<std::pair<int, int>>& heads) {
  const Problem& p = data.problem();
  const HostTensor want = dist::shard_tokens(reference_on_heads(data, heads).view(), p.layout, s, rank, false);
  const std::vector<std::int32_t> cu = dist::local_cu_seqlens(s, rank, false);
  std::vector<std::int64_t> offsets, lens;
  for (int b = 0; b < s.batch(); ++b) {
    offsets.push_back(cu[b]);
    lens.push_back(cu[b + 1] - cu[b]);
  }
  return compare_heads(p, got, want.view(), heads, offsets, lens);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

bool wants_parallel_run(const ParallelRunOptions& o) {
  const auto& c = o.degrees.config;
  return c.ring_degree != 1 || c.ulysses_degree != 1 || c.sp_degree.has_value() || o.replicated_tokens != 0 ||
         dist::launched_by_mpirun();
}

int run_parallel(const Problem& global, const ProblemDataOptions& data_options, const ParallelRunOptions& o) {
  const select::DeploymentConfig& cfg = o.degrees.config;
  const dist::SequenceParallel sp{cfg.ring_degree, cfg.ulysses_degree, o.replicated_tokens};
  if (Diagnostics why = dist::check_parallel_degrees(sp.ring_degree, sp.ulysses_degree, cfg.sp_degree); !why.ok())
    return print_diagnostics(why, o.format);
  auto host = host_world();
  if (!host) return print_diagnostics(host.diagnostics(), o.format);
  dist::Communicator& world = **host;
  const bool root = world.rank() == 0;
  // Every rank reaches the same verdict; rank 0 prints it.
  auto refuse = [&](const Diagnostics& d) { return root ? print_diagnostics(d, o.format) : 1; };

  Platform platform = detect_cpu_platform();
  platform.communicator = *host;
  if (auto gpu = detect_cuda_platform(); gpu && dist::nccl_compiled()) {
    platform = *gpu;
    platform.device_index = local_rank(world.rank());
    auto nccl = dist::make_nccl_communicator(world, platform.device_index);
    if (!nccl) return refuse(nccl.diagnostics());
    platform.communicator = *nccl;
  }
  // The inner backend: named, or the platform's first that runs the problem (and returns the LSE under
  // ring). A named backend is selected for the call as given, so that one without the LSE the ring
  // needs is refused by plan_sequence_parallel as not ring-capable (AK5003), not as a feature the
  // user never asked for (AK2109 "does not support returning the LSE").
  Problem probe = global;
  if (o.backend == "auto") probe.return_lse = global.return_lse || sp.ring_degree > 1;
  auto choice = select::select_for_call(probe, {platform}, o.backend);
  if (!choice) return refuse(choice.diagnostics());
  if (Diagnostics inexact = refuse_inexact_for_run(*choice->backend); !inexact.ok()) return refuse(inexact);
  auto data = HostProblemData::create(global, data_options);  // the same seed: the same data on every rank
  if (!data) return refuse(data.diagnostics());
  auto plan = dist::plan_sequence_parallel(global, sp, *choice->backend, platform);
  if (!plan) return refuse(plan.diagnostics());

  const dist::Sharding sharding(global, sp, data->q_lens(), data->k_lens());
  dist::HostShard shard = dist::make_host_shard(*data, sharding, world.rank());
  const DeviceKind kind = platform.kind == PlatformKind::cuda ? DeviceKind::cuda : DeviceKind::cpu;
  auto ops = dist::ops_for(kind);
  if (!ops) return refuse(ops.diagnostics());
  dist::DeviceCopies buffers(**ops, {kind, platform.device_index});
  AttentionTensors t = shard.tensors;
  Diagnostics placed = buffers.place_all(t);
  auto ws = buffers.scratch((*plan)->workspace_bytes());
  if (!ws) placed.append(ws.diagnostics());
  if (!placed.ok()) return refuse(placed);

  // Each timed run starts together (a barrier), and lasts until the slowest rank ends.
  std::vector<double> times;
  Diagnostics ran;
  for (int i = 0; i <= std::max(1, o.repeat) && ran.ok(); ++i) {
    const char token = 0;
    std::vector<char> tokens(world.size());
    world.all_gather_host(&token, 1, tokens.data());
    const auto t0 = std::chrono::steady_clock::now();
    ran = (*plan)->run(t, {static_cast<std::byte*>(*ws), (*plan)->workspace_bytes()}, nullptr);
    if (ran.ok()) ran = (*ops)->synchronize(nullptr);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<double> all(world.size());
    world.all_gather_host(&ms, sizeof ms, all.data());
    if (i > 0) times.push_back(*std::max_element(all.begin(), all.end()));  // run 0 warms up
  }
  if (!ran.ok()) return refuse(ran);
  if (Diagnostics why = buffers.fetch(t.out, shard.out.view()); !why.ok()) return refuse(why);

  const auto heads = sampled_heads(global, o.check_heads);
  const ErrorStats mine = check_shard(*data, sharding, world.rank(), shard.out.view(), heads);
  std::vector<ErrorStats> every(world.size());
  world.all_gather_host(&mine, sizeof mine, every.data());
  ErrorStats error;
  for (const ErrorStats& e : every) error.merge(e);
  const double bound = rel_l2_bound(global);
  const bool passed = error.clean() && error.rel_l2 <= bound;
  const double time_ms = median(times);
  const double tflops = time_ms > 0 ? global.flops() / (time_ms * 1e-3) / 1e12 : 0.0;
  const dist::SequenceParallelStats stats = (*plan)->last_run_stats();
  if (!root) return passed ? 0 : 1;

  const std::string backend(choice->backend->name());
  const std::string where = platform.label() + " (" + platform.device_name + ")";
  if (o.format == "json") {
    const nlohmann::json j = {{"backend", backend},
                              {"time_ms", time_ms},
                              {"tflops", tflops},
                              {"rel_l2_err", error.rel_l2},
                              {"max_abs_err", error.max_abs},
                              {"passed", passed},
                              {"platform", where},
                              {"problem", global.summary()},
                              {"error_bound", bound},
                              {"heads_checked", heads.size()},
                              {"unwritten_or_nonfinite", error.not_finite},
                              {"parallel",
                               {{"ranks", world.size()},
                                {"ring_degree", sp.ring_degree},
                                {"ulysses_degree", sp.ulysses_degree},
                                {"replicated_tokens", sp.replicated_tokens},
                                {"communicator", std::string(platform.communicator->kind())},
                                {"hops", stats.hops},
                                {"calls", stats.calls},
                                {"skipped_calls", stats.skipped_calls},
                                {"rank0_blocked_ms", stats.blocked_ms},
                                {"rank0_inner_ms", stats.inner_ms}}}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << fmt::format("problem   {}\n", global.summary());
    std::cout << fmt::format(
        "parallel  {} ranks ({}): ring {} x ulysses {}{}; rank 0: {} hops, {} calls, {} skipped, {:.3f} ms blocked in "
        "transfers, {:.3f} ms in the inner backend\n",
        world.size(), platform.communicator->kind(), sp.ring_degree, sp.ulysses_degree,
        sp.replicated_tokens ? fmt::format(", {} replicated tokens", sp.replicated_tokens) : "", stats.hops, stats.calls,
        stats.skipped_calls, stats.blocked_ms, stats.inner_ms);
    std::cout << fmt::format("platform  {}\n", where);
    std::cout << fmt::format("backend   {} (inner)\n", backend);
    std::cout << fmt::format("time      {:.3f} ms (median of {}, slowest rank)   {:.4g} TFLOP/s\n", time_ms, times.size(), tflops);
    std::cout << fmt::format("error     rel_l2 {:.3e}  max_abs {:.3e}  vs reference on {} head(s), all ranks  bound {:.0e}\n",
                             error.rel_l2, error.max_abs, heads.size(), bound);
    if (!error.clean()) std::cout << fmt::format("          {} non-finite or unwritten outputs\n", error.not_finite);
    std::cout << (passed ? "PASSED\n" : "FAILED\n");
  }
  return passed ? 0 : 1;
}

}  // namespace attnkit::cli
