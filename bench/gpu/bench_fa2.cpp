// GPU benchmark of attnkit's CUDA backends on the dense grid of design §6:
// seqlen 512..16k, batch = 16384/seqlen, heads = 2048/head_dim, bf16, BSHD,
// causal and not. Timed with CUDA events around each run after warm-up; the
// median is reported. Inputs are random (never zeros) and rotated between two
// sets so no run reads what the previous one left in L2.
//
//   bench_fa2 [--backend fa2|cudnn|...] [--dims 64,128,256] [--seqlens 512,...,16384]
//             [--masks full,causal] [--iters 30] [--warmup 5] [--json out.json]
//   bench_fa2 --variants [--only 'f3_d128|f3_d64_m192_n128$'] [--seqlens 4096,16384] [--json variants.json]
//             [--tile-counter on|off|both] [--walk-groups 0,1,100]
//             times the tile-shape variants of fa2_variants.def (direct launches). fa3 variants get a
//             tile counter, as the fa3 backend's plans do (its dynamic scheduler for masked calls beyond
//             short rows); off: one CTA per such tile; both: each variant both ways (NAME~percta: off)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/backends/registry.hpp"
#include "fa2_variants.hpp"
#include "kernels/cuda/params.hpp"
#include "attnkit/core/dtype.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/platform/platform.hpp"

using namespace attnkit;

namespace {

#define BENCH_CUDA(call)                                                                  \
  do {                                                                                    \
    const cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));             \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

// Waits for `stream`, or ends the process when it has not finished in
// `seconds`: a variant whose barriers deadlock must cost its own run, not the
// device call that times it (exit status 3; the driver frees the GPU).
void sync_or_exit(cudaStream_t stream, double seconds, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
      std::exit(1);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "%s did not finish in %.0f s (a deadlock?)\n", what, seconds);
      std::fflush(stdout);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::vector<int> parse_ints(const char* s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) out.push_back(std::stoi(tok));
  return out;
}

struct Row {
  std::string backend;
  int head_dim, seqlen, batch, heads;
  bool causal;
  double ms_median, ms_min, tflops;
};

// The value of option `flag` among `choices` (name, the list it stands for);
// false, with the names it takes, for any other.
bool pick_bools(const char* flag, const std::string& value,
                const std::vector<std::pair<std::string, std::vector<bool>>>& choices, std::vector<bool>& out) {
  std::string names;
  for (const auto& [name, list] : choices) {
    if (value == name) {
      out = list;
      return true;
    }
    names += (names.empty() ? "" : ", ") + name;
  }
  std::fprintf(stderr, "%s takes %s\n", flag, names.c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_name = "fa2", json_path, only;  // only: a regex matched from the start of a variant's name
  std::vector<int> dims = {64, 128, 256};
  std::vector<int> seqlens = {512, 1024, 2048, 4096, 8192, 16384};
  int iters = 30, warmup = 5;
  bool variants = false;
  std::vector<bool> masks = {false, true};  // causal: no, yes (--masks full,causal)
  std::vector<bool> counters = {true};      // fa3 variants: with the tile counter, without (--tile-counter)
  std::vector<int> walk_groups = {0};       // fa3 variants' causal launches: heads a walk group (0: the launch's rule)
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() { return i + 1 < argc ? argv[++i] : ""; };
    if (!std::strcmp(argv[i], "--backend")) backend_name = next();
    else if (!std::strcmp(argv[i], "--only")) only = next();
    else if (!std::strcmp(argv[i], "--dims")) dims = parse_ints(next());
    else if (!std::strcmp(argv[i], "--seqlens")) seqlens = parse_ints(next());
    else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(next());
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(next());
    else if (!std::strcmp(argv[i], "--json")) json_path = next();
    else if (!std::strcmp(argv[i], "--variants")) variants = true;
    else if (!std::strcmp(argv[i], "--walk-groups")) walk_groups = parse_ints(next());
    else if (!std::strcmp(argv[i], "--tile-counter")) {
      if (!pick_bools("--tile-counter", next(), {{"on", {true}}, {"off", {false}}, {"both", {true, false}}}, counters))
        return 2;
    } else if (!std::strcmp(argv[i], "--masks")) {
      if (!pick_bools("--masks", next(), {{"full", {false}}, {"causal", {true}}, {"full,causal", {false, true}}}, masks))
        return 2;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  std::regex only_re;  // --only; CMake's ATTNKIT_BENCH_VARIANTS_ONLY takes the same regex
  try {
    only_re = std::regex("^(?:" + only + ")");
  } catch (const std::regex_error& e) {
    std::fprintf(stderr, "--only %s: not a regex (%s)\n", only.c_str(), e.what());
    return 2;
  }
  const auto platform = detect_cuda_platform();
  if (!platform) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  auto backend = find_backend(default_registry(), backend_name);
  if (!backend) {
    std::fprintf(stderr, "%s\n", backend.diagnostics().summary().c_str());
    return 1;
  }

  // Every grid point has 16384 tokens x 2048 (heads * dim) elements per tensor.
  constexpr std::int64_t kTokens = 16384, kWidth = 2048, kElems = kTokens * kWidth;
  constexpr int kSets = 2;
  std::vector<std::uint16_t> host(kElems + 3 * kSets * 4099);
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : host) x = float_to_bf16(normal(rng));
  std::vector<void*> q(kSets), k(kSets), v(kSets);
  for (int s = 0; s < kSets; ++s) {
    void** bufs[3] = {&q[s], &k[s], &v[s]};
    for (int t = 0; t < 3; ++t) {
      BENCH_CUDA(cudaMalloc(bufs[t], kElems * 2));
      BENCH_CUDA(cudaMemcpy(*bufs[t], host.data() + (3 * s + t) * 4099, kElems * 2, cudaMemcpyHostToDevice));
    }
  }
  void* out = nullptr;
  BENCH_CUDA(cudaMalloc(&out, kElems * 2));
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreate(&stream));
  std::vector<cudaEvent_t> ev(2 * (iters + warmup));
  for (auto& e : ev) BENCH_CUDA(cudaEventCreate(&e));

  std::vector<Row> rows;
  // Times `enqueue(set)` with events around each call; returns the sorted times (ms).
  auto time_runs = [&](auto&& enqueue) {
    const int total = warmup + iters;
    for (int it = 0; it < total; ++it) {
      BENCH_CUDA(cudaEventRecord(ev[2 * it], stream));
      enqueue(it % kSets);
      BENCH_CUDA(cudaEventRecord(ev[2 * it + 1], stream));
    }
    sync_or_exit(stream, 120.0, "the timed calls");  // a batch takes under a second at every grid point
    std::vector<double> ms;
    for (int it = warmup; it < total; ++it) {
      float e = 0;
      BENCH_CUDA(cudaEventElapsedTime(&e, ev[2 * it], ev[2 * it + 1]));
      ms.push_back(e);
    }
    std::sort(ms.begin(), ms.end());
    return ms;
  };
  auto grid_problem = [&](int d, int s, bool causal) {
    Problem p;
    p.layout = Layout::bshd;
    p.batch = static_cast<int>(kTokens / s);
    p.seqlen_q = p.seqlen_k = s;
    p.heads_q = p.heads_kv = static_cast<int>(kWidth / d);
    p.head_dim_qk = p.head_dim_v = d;
    p.dtype = DType::bf16;
    p.mask = causal ? MaskKind::causal : MaskKind::none;
    return p;
  };
  auto record = [&](const std::string& name, const Problem& p, const std::vector<double>& ms) {
    const int s = p.seqlen_q, d = p.head_dim_qk;
    const bool causal = p.mask == MaskKind::causal;
    const double median = ms[ms.size() / 2];
    const double flops = 4.0 * p.batch * p.heads_q * double(s) * s * d / (causal ? 2.0 : 1.0);
    rows.push_back({name, d, s, p.batch, p.heads_q, causal, median, ms.front(), flops / (median * 1e9)});
    std::printf("%-16s d%-3d %-6s s%-6d b%-3d h%-3d %8.3f ms %7.1f TFLOP/s\n", name.c_str(), d,
                causal ? "causal" : "full", s, p.batch, p.heads_q, median, rows.back().tflops);
    std::fflush(stdout);
  };
  auto view_for = [&](const Problem& p, void* data) {
    return make_view(data, DType::bf16, {p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk}, Device{DeviceKind::cuda, 0});
  };

  bool variant_mismatch = false;
#if defined(ATTNKIT_BENCH_FA2_VARIANTS)
  void* out_shipped = nullptr;
  unsigned int* tile_counter = nullptr;  // fa3 variants' dynamic scheduler (the launch zeroes it)
  if (variants) {
    BENCH_CUDA(cudaMalloc(&out_shipped, kElems * 2));
    BENCH_CUDA(cudaMalloc(&tile_counter, sizeof(unsigned int)));
  }
  // The variant's output against the shipped kernel's, problem `p`, input set 0.
  auto compare_to_shipped = [&](const Problem& p, const cuda::AttnParams& variant_params,
                                const bench::Fa2Variant& var) -> std::optional<ErrorStats> {
    const Backend* family = default_registry().find(var.backend);
    if (family == nullptr) return std::nullopt;
    auto shipped = family->plan(p, *platform);
    if (!shipped) return std::nullopt;
    AttentionTensors t;
    t.q = view_for(p, q[0]);
    t.k = view_for(p, k[0]);
    t.v = view_for(p, v[0]);
    t.out = view_for(p, out_shipped);
    void* ws = nullptr;  // fa3's causal plans take their tile counter from it
    const std::size_t ws_bytes = (*shipped)->workspace_bytes();
    if (ws_bytes > 0) BENCH_CUDA(cudaMalloc(&ws, ws_bytes));
    const bool ran = (*shipped)->run(t, {static_cast<std::byte*>(ws), ws_bytes}, stream).ok() &&
                     var.launch(variant_params, stream) == 0;
    BENCH_CUDA(cudaStreamSynchronize(stream));
    if (ws != nullptr) BENCH_CUDA(cudaFree(ws));
    if (!ran) return std::nullopt;
    std::vector<std::uint16_t> got(kElems), expected(kElems);
    BENCH_CUDA(cudaMemcpy(got.data(), out, kElems * 2, cudaMemcpyDeviceToHost));
    BENCH_CUDA(cudaMemcpy(expected.data(), out_shipped, kElems * 2, cudaMemcpyDeviceToHost));
    const Device host{DeviceKind::cpu, 0};
    return compare_outputs(make_view(got.data(), DType::bf16, {kElems}, host),
                           make_view(expected.data(), DType::bf16, {kElems}, host));
  };
#endif

  if (variants) {
#if !defined(ATTNKIT_BENCH_FA2_VARIANTS)
    std::fprintf(stderr, "--variants: configure with -DATTNKIT_BENCH_FA2_VARIANTS=ON\n");
    return 2;
#else
    for (const bench::Fa2Variant& var : bench::fa2_variants()) {
      if (!only.empty() && !std::regex_search(var.name, only_re)) continue;
      if (const int err = var.configure(); err != 0) {  // its attributes, and (fa3) the occupancy query
        std::fprintf(stderr, "variant %s: configure failed: %s\n", var.name.c_str(),
                     cudaGetErrorString(static_cast<cudaError_t>(err)));
        continue;
      }
      for (bool causal : masks)
        for (int s : seqlens)
          for (bool counter : counters)
          for (int walk_group : walk_groups) {
            const bool applies = var.backend == "fa3" && causal;  // the launches a counter or a walk group changes
            if (!counter && !applies && counters.size() > 1) continue;  // the same launch as with it
            if (walk_group != walk_groups.front() && !applies) continue;
            const Problem p = grid_problem(var.head_dim, s, causal);
            std::string name = counter || !applies ? var.name : var.name + "~percta";
            if (walk_group > 0 && applies) name += "~group" + std::to_string(walk_group);
            std::vector<cuda::AttnParams> params;
            for (int set = 0; set < kSets; ++set) {
              AttentionTensors t;
              t.q = view_for(p, q[set]);
              t.k = view_for(p, k[set]);
              t.v = view_for(p, v[set]);
              t.out = view_for(p, out);
              params.push_back(cuda::make_attn_params(p, t));
              if (var.backend == "fa3" && counter) params.back().tile_counter = tile_counter;
              params.back().walk_group = walk_group;
            }
            const auto ms = time_runs([&](int set) {
              const int err = var.launch(params[set], stream);
              if (err != 0) {
                std::fprintf(stderr, "variant %s launch failed (%d)\n", var.name.c_str(), err);
                std::exit(1);
              }
            });
            record(name, p, ms);
            // A faster variant is only news if it computes the same thing: compare its
            // output with the shipped kernel's on the same inputs.
            const std::optional<ErrorStats> e = compare_to_shipped(p, params[0], var);
            const bool same = e && e->clean() && e->rel_l2 < rel_l2_bound(DType::bf16);
            std::printf("%-16s vs shipped %s: %s%s\n", name.c_str(), var.backend.c_str(),
                        e ? describe(*e).c_str() : "could not run both", same ? "" : "  MISMATCH");
            if (!same) variant_mismatch = true;
          }
    }
    dims.clear();  // the variants replace the backend grid
#endif
  }

  for (int d : dims)
    for (bool causal : masks)
      for (int s : seqlens) {
        const Problem p = grid_problem(d, s, causal);
        auto plan = (*backend)->plan(p, *platform);
        if (!plan) {
          std::fprintf(stderr, "skip %s: %s\n", p.summary().c_str(), plan.diagnostics().summary().c_str());
          continue;
        }
        // Backends with scratch (cudnn's cuDNN workspace) get it; fa2 needs none.
        void* workspace = nullptr;
        const std::size_t workspace_bytes = (*plan)->workspace_bytes();
        if (workspace_bytes > 0) BENCH_CUDA(cudaMalloc(&workspace, workspace_bytes));
        const auto ms = time_runs([&](int set) {
          AttentionTensors t;
          t.q = view_for(p, q[set]);
          t.k = view_for(p, k[set]);
          t.v = view_for(p, v[set]);
          t.out = view_for(p, out);
          const Diagnostics ran = (*plan)->run(t, {static_cast<std::byte*>(workspace), workspace_bytes}, stream);
          if (!ran.ok()) {
            std::fprintf(stderr, "%s\n", ran.summary().c_str());
            std::exit(1);
          }
        });
        if (workspace != nullptr) BENCH_CUDA(cudaFree(workspace));
        record(backend_name, p, ms);
      }

  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "{\"device\": \"" << platform->device_name << "\", \"results\": [\n";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      f << "  {\"impl\": \"attnkit_" << r.backend << "\", \"head_dim\": " << r.head_dim << ", \"seqlen\": " << r.seqlen
        << ", \"batch\": " << r.batch << ", \"heads\": " << r.heads << ", \"causal\": " << (r.causal ? "true" : "false")
        << ", \"ms_median\": " << r.ms_median << ", \"ms_min\": " << r.ms_min << ", \"tflops\": " << r.tflops << "}"
        << (i + 1 < rows.size() ? ",\n" : "\n");
    }
    f << "]}\n";
  }
  for (auto& e : ev) cudaEventDestroy(e);
  for (int s = 0; s < kSets; ++s) cudaFree(q[s]), cudaFree(k[s]), cudaFree(v[s]);
  cudaFree(out);
#if defined(ATTNKIT_BENCH_FA2_VARIANTS)
  cudaFree(out_shipped);
  cudaFree(tile_counter);
#endif
  cudaStreamDestroy(stream);
  return variant_mismatch ? 1 : 0;
}
