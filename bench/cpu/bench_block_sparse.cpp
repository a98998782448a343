// Block-sparse cpu_flash against its dense path: time versus the fraction of
// key blocks listed. Random lists: each query block lists round(density * key
// blocks) blocks drawn at random (the same count per row, so the work is
// exactly the density). Sliding-tile lists: the 16 x 16 x 16 grid in 4x4x8
// tiles (one 128-token block each) under windows of 1..4 tiles. Dense and
// sparse runs alternate (--reps of each after a warm-up), so a machine whose
// load drifts slows both; medians are reported. Effective GFLOP/s counts the
// listed blocks only (block_sparse_flops).
//
//   bench_block_sparse [--dtype bf16] [--seqlen 4096] [--heads 4] [--head-dim 128]
//                      [--block 128] [--threads 2] [--reps 3]
// Prints one JSON object per line, one per list set.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "attnkit/sparse/sliding_tile.hpp"
#include "bench_args.hpp"

namespace {

using namespace attnkit;
using Clock = std::chrono::steady_clock;

struct Args : bench::ShapeArgs {
  int block = 128;
  Args() {
    dtype = DType::bf16;
    seqlen = 4096;
    heads = 4;
    reps = 3;
  }
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "bench_block_sparse: %s\n", why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  std::string dtype;
  CLI::App app{"block-sparse cpu_flash against its dense path: time versus density"};
  bench::add_shape_options(app, a, dtype);
  app.add_option("--block", a.block, "block size (queries and keys)")->capture_default_str();
  bench::parse_shape_args(app, argc, argv, "bench_block_sparse", a, dtype);
  return a;
}

// Every query block lists `per_row` key blocks chosen at random, ascending.
BlockSparseLists random_lists(const Problem& p, int per_row, std::mt19937_64& rng) {
  const BlockSparseShape s = block_sparse_shape(p);
  BlockSparseLists l;
  l.offsets.push_back(0);
  std::vector<int> all(s.num_k_blocks);
  std::iota(all.begin(), all.end(), 0);
  for (std::int64_t r = 0; r < s.rows; ++r) {
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int> row(all.begin(), all.begin() + per_row);
    std::sort(row.begin(), row.end());
    l.indices.insert(l.indices.end(), row.begin(), row.end());
    l.offsets.push_back(static_cast<std::int32_t>(l.indices.size()));
  }
  return l;
}

double time_ms(const Plan& plan, const AttentionTensors& t, std::vector<std::byte>& ws) {
  const auto t0 = Clock::now();
  const Diagnostics d = plan.run(t, ws, nullptr);
  const auto t1 = Clock::now();
  if (!d.ok()) usage(d.summary());
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Medians of `reps` alternating runs of `a` and `b` (after one warm-up of each).
std::pair<double, double> interleaved_ms(const Plan& a, const AttentionTensors& ta, const Plan& b,
                                         const AttentionTensors& tb, int reps) {
  std::vector<std::byte> ws(std::max(a.workspace_bytes(), b.workspace_bytes()));
  time_ms(a, ta, ws);
  time_ms(b, tb, ws);
  std::vector<double> ms_a, ms_b;
  for (int r = 0; r < reps; ++r) {
    ms_a.push_back(time_ms(a, ta, ws));
    ms_b.push_back(time_ms(b, tb, ws));
  }
  return {median(ms_a), median(ms_b)};
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  Problem dense;
  dense.seqlen_q = dense.seqlen_k = a.seqlen;
  dense.heads_q = dense.heads_kv = a.heads;
  dense.head_dim_qk = dense.head_dim_v = a.head_dim;
  dense.dtype = a.dtype;
  auto data = HostProblemData::create(dense, {.seed = 1});
  if (!data) usage(data.diagnostics().summary());
  const auto backend = make_cpu_flash_backend({CpuIsa::best, a.threads});
  const Platform cpu = detect_cpu_platform();
  auto dense_plan = backend->plan(dense, cpu);
  if (!dense_plan) usage(dense_plan.diagnostics().summary());
  const std::string shape = "\"dtype\":\"" + std::string(dtype_name(a.dtype)) + "\",\"seqlen\":" +
                            std::to_string(a.seqlen) + ",\"heads\":" + std::to_string(a.heads) + ",\"head_dim\":" +
                            std::to_string(a.head_dim) + ",\"block\":" + std::to_string(a.block) +
                            ",\"threads\":" + std::to_string(a.threads);
  Problem sparse = dense;
  sparse.block_sparse = BlockSparse{a.block, a.block, 1, 1};
  auto sparse_plan = backend->plan(sparse, cpu);
  if (!sparse_plan) usage(sparse_plan.diagnostics().summary());
  auto report = [&](const char* lists, const std::string& setting, const BlockSparseLists& l) {
    AttentionTensors t = data->tensors();
    l.bind(t);
    const auto [dense_ms, ms] = interleaved_ms(**dense_plan, data->tensors(), **sparse_plan, t, a.reps);
    std::printf(
        "{\"lists\":\"%s\",\"setting\":\"%s\",%s,\"density\":%.3f,\"ms\":%.1f,\"dense_ms\":%.1f,"
        "\"time_over_dense\":%.3f,\"effective_gflops\":%.1f,\"dense_gflops\":%.1f}\n",
        lists, setting.c_str(), shape.c_str(), block_sparse_density(sparse, l), ms, dense_ms, ms / dense_ms,
        block_sparse_flops(sparse, l) / ms * 1e-6, dense.flops() / dense_ms * 1e-6);
    std::fflush(stdout);
  };
  const int key_blocks = block_sparse_shape(sparse).num_k_blocks;
  std::mt19937_64 rng(7);
  for (double density : {0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0}) {
    const int per_row = std::max(1, static_cast<int>(density * key_blocks + 0.5));
    report("random", std::to_string(per_row) + " of " + std::to_string(key_blocks) + " blocks per row",
           random_lists(sparse, per_row, rng));
  }
  // Sliding-tile windows: 16 x 16 x 16 latents, 4x4x8 tiles (128 tokens), 4 x 4 x 2 tiles.
  if (a.seqlen == 4096 && a.block == 128) {
    const sparse::TileGeometry g{{16, 16, 16, 4, 4, 8}, 0, sparse::WindowBorder::shift};
    for (const sparse::TileWindow w : {sparse::TileWindow{1, 1, 1}, {2, 2, 1}, {2, 2, 2}, {3, 3, 2}, {4, 4, 2}}) {
      const sparse::TileWindow heads[] = {w};
      report("sliding tile", "kernel " + std::to_string(w.t) + "x" + std::to_string(w.h) + "x" + std::to_string(w.w),
             sparse::sliding_tile_lists(g, heads));
    }
  }
  return 0;
}
