// Error against dense attention versus the fraction of work skipped, for each
// sparse method on the CPU, on video-like inputs (tests/testing/video_inputs:
// positional locality, smooth content, outlier channels). One JSON object per
// line: method, its setting, the skipped fraction the method reports, the
// relative L2 error of its output against cpu_flash's dense output (same
// dtype), and its time against that dense call's: `--reps` runs of each,
// alternating (a machine whose load drifts slows both), medians.
//
//   bench_sparse_accuracy [--frames 8] [--height 16] [--width 16] [--heads 4] [--seed 1] [--reps 3]
// plot_sparse_accuracy.py turns the lines into docs/sparse.md's table and plot.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/backends/sparse.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "testing/video_inputs.hpp"

namespace {

using namespace attnkit;

struct Args {
  int frames = 8, height = 16, width = 16, heads = 4, reps = 3;
  std::uint64_t seed = 1;
};

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "bench_sparse_accuracy: %s\n", why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--frames") a.frames = std::stoi(v);
    else if (f == "--height") a.height = std::stoi(v);
    else if (f == "--width") a.width = std::stoi(v);
    else if (f == "--heads") a.heads = std::stoi(v);
    else if (f == "--seed") a.seed = std::stoull(v);
    else if (f == "--reps") a.reps = std::max(1, std::stoi(v));
    else fail("unknown flag " + f);
  }
  return a;
}

// Runs `plan` at `where` into `t`'s out; returns what it skipped.
SparsityStats run(const Plan& plan, CallContext where, const AttentionTensors& t) {
  std::vector<std::byte> ws(plan.workspace_bytes());
  SparsityStats stats;
  where.stats = &stats;
  const Diagnostics d = plan.run_at(where, t, ws, nullptr);
  if (!d.ok()) fail(d.summary());
  return stats;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A method's run: what it skipped, and the medians of `reps` timed runs of it
// and of the dense call, alternating.
struct Timed {
  SparsityStats stats;
  double ms = 0, dense_ms = 0;
};
Timed timed(int reps, const Plan& plan, CallContext where, const AttentionTensors& t, const Plan& dense,
            const AttentionTensors& dense_t) {
  Timed r;
  r.stats = run(plan, where, t);  // warm-up, and the output reported
  std::vector<double> mine, theirs;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    run(dense, {}, dense_t);
    theirs.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    run(plan, where, t);
    mine.push_back(ms_since(t0));
  }
  r.ms = median(mine), r.dense_ms = median(theirs);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  Problem p;
  p.seqlen_q = p.seqlen_k = a.frames * a.height * a.width;
  p.heads_q = p.heads_kv = a.heads;
  p.head_dim_qk = p.head_dim_v = 128;  // sol_attn's head dim
  p.dtype = DType::bf16;              // sol_attn's dtype
  p.video = VideoGrid{a.frames, a.height, a.width};
  auto data = HostProblemData::create(p, {.seed = a.seed});
  if (!data) fail(data.diagnostics().summary());
  attnkit::testing::fill_video_like(p, data->tensors(), {.seed = a.seed});
  const Platform cpu = detect_cpu_platform();

  auto dense_plan = make_cpu_flash_backend()->plan(p, cpu);
  if (!dense_plan) fail(dense_plan.diagnostics().summary());
  HostTensor dense_out = data->make_output(p.out_dtype());
  run(**dense_plan, {}, data->tensors_with_outputs(dense_out.view(), {}));

  // The dense call the methods are timed against writes a buffer of its own.
  HostTensor dense_timed_out = data->make_output(p.out_dtype());
  const AttentionTensors dense_t = data->tensors_with_outputs(dense_timed_out.view(), {});
  auto report = [&](const char* method, const std::string& setting, const Timed& r) {
    const ErrorStats e = compare_outputs(data->tensors().out, dense_out.view());
    std::printf("{\"method\":\"%s\",\"setting\":\"%s\",\"skipped\":%.4f,\"rel_l2\":%.5f,\"tokens\":%d,"
                "\"heads\":%d,\"ms\":%.2f,\"dense_ms\":%.2f,\"time_over_dense\":%.3f}\n",
                method, setting.c_str(), r.stats.skipped_fraction(), e.rel_l2, p.seqlen_q, p.heads_q, r.ms, r.dense_ms,
                r.ms / r.dense_ms);
    std::fflush(stdout);
  };
  auto time_run = [&](const Plan& plan, CallContext where) {
    return timed(a.reps, plan, where, data->tensors(), **dense_plan, dense_t);
  };
  auto plan_of = [&](const Backend& b, const select::BackendConfig& c) {
    auto plan = b.plan_configured(p, cpu, c);
    if (!plan) fail(plan.diagnostics().summary());
    return std::move(*plan);
  };

  // sliding_tile_attn: 2x4x4 tiles, one window for every head and layer.
  const std::string mask_path = "/tmp/attnkit_bench_sta_mask.json";
  const auto sta = make_sliding_tile_backend();
  const int kernels[][3] = {{1, 1, 1}, {1, 2, 2}, {2, 2, 2}, {2, 3, 3}, {3, 3, 3}, {3, 4, 4}};
  for (const auto& k : kernels) {
    std::string json = "{";
    for (int h = 0; h < p.heads_q; ++h)
      json += (h ? "," : "") + std::string("\"0_0_") + std::to_string(h) + "\": [" + std::to_string(k[0]) + ", " +
              std::to_string(k[1]) + ", " + std::to_string(k[2]) + "]";
    std::FILE* f = std::fopen(mask_path.c_str(), "w");
    std::fputs((json + "}").c_str(), f);
    std::fclose(f);
    const auto plan = plan_of(*sta, {{"mask_strategy_file_path", mask_path}, {"skip_time_steps", std::int64_t{0}},
                                     {"tile_size", std::string("2,4,4")}});
    report("sliding_tile_attn", "kernel " + std::to_string(k[0]) + "x" + std::to_string(k[1]) + "x" +
                                    std::to_string(k[2]) + " tiles",
           time_run(*plan, {0, 0}));
  }
  // sparge_attn: top-k fractions, then cumulative probabilities.
  const auto sparge = make_sparge_backend();
  for (double topk : {0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9})
    report("sparge_attn", "topk " + std::to_string(topk).substr(0, 4),
           time_run(*plan_of(*sparge, {{"topk", topk}}), {}));
  for (double cdf : {0.5, 0.8, 0.9, 0.95, 0.99})
    report("sparge_attn", "cdfthreshd " + std::to_string(cdf).substr(0, 4),
           time_run(*plan_of(*sparge, {{"cdfthreshd", cdf}}), {}));
  // sol_attn: a routed call (past dense_steps, outside dense_layers).
  const auto sol = make_sol_backend();
  for (double tau : {0.1, 0.25, 0.5, 1.0, 1.5, 2.0})
    report("sol_attn", "tau " + std::to_string(tau).substr(0, 4),
           time_run(*plan_of(*sol, {{"tau", tau}, {"dense_steps", std::int64_t{0}}, {"dense_layers", std::string("")}}),
                    {5, 3}));
  // video_sparse_attn_h3 without a gate (base H3 weights: the pure fine pass), 4x4x4 cubes.
  const auto vsa = make_video_sparse_backend();
  for (double sparsity : {0.5, 0.75, 0.875, 0.9, 0.95})
    report("video_sparse_attn_h3", "sparsity " + std::to_string(sparsity).substr(0, 5) + ", gate 0",
           time_run(*plan_of(*vsa, {{"sparsity", sparsity}}), {}));
  // hybrid_window_attn_h3's softmax window alone (gate 0: its linear branch is
  // the checkpoint's, not an approximation of dense); skipped: the (query, key)
  // pairs outside the window.
  const auto hybrid = make_hybrid_window_backend();
  for (int side : {64, 128, 256, 512, 1024}) {
    Timed window = time_run(*plan_of(*hybrid, {{"window_size", std::to_string(side) + "," + std::to_string(side)}}), {});
    SparsityStats& outside = window.stats;
    const std::int64_t S = p.seqlen_q;
    std::int64_t seen = 0;
    for (std::int64_t i = 0; i < S; ++i) seen += std::min(S - 1, i + side) - std::max<std::int64_t>(0, i - side) + 1;
    outside.blocks = S * S;
    outside.blocks_skipped = S * S - seen;
    report("hybrid_window_attn_h3", "window_size " + std::to_string(side) + "," + std::to_string(side) + ", gate 0",
           window);
  }
  // Request skip-softmax on cpu_flash, 128-key decision blocks.
  for (double factor : {0.1, 1.0, 10.0, 100.0, 1000.0}) {
    CallContext where;
    where.step = 1;
    where.skip_softmax = SkipSoftmaxParams{factor, 0, 128};
    report("skip_softmax", "threshold_scale_factor " + std::to_string(factor).substr(0, 6),
           time_run(**dense_plan, where));
  }
  return 0;
}
