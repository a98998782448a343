// Block-sparse cpu_flash against its dense path: time versus the fraction of
// key blocks listed. Each query block lists round(density * key blocks)
// blocks drawn at random (the same count per row, so the work is exactly the
// density). Median of --reps runs after a warm-up; effective GFLOP/s counts
// the listed blocks only (block_sparse_flops).
//
//   bench_block_sparse [--dtype bf16] [--seqlen 4096] [--heads 4] [--head-dim 128]
//                      [--block 128] [--threads 2] [--reps 3]
// Prints one JSON object per line: the dense run, then one per density.
#include <omp.h>

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

namespace {

using namespace attnkit;
using Clock = std::chrono::steady_clock;

struct Args {
  DType dtype = DType::bf16;
  int seqlen = 4096, heads = 4, head_dim = 128, block = 128, threads = 0, reps = 3;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "bench_block_sparse: %s\n", why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value for " + f);
      return argv[++i];
    };
    if (f == "--dtype") {
      auto t = parse_dtype(value());
      if (!t) usage("bad --dtype");
      a.dtype = *t;
    } else if (f == "--seqlen") a.seqlen = std::stoi(value());
    else if (f == "--heads") a.heads = std::stoi(value());
    else if (f == "--head-dim") a.head_dim = std::stoi(value());
    else if (f == "--block") a.block = std::stoi(value());
    else if (f == "--threads") a.threads = std::stoi(value());
    else if (f == "--reps") a.reps = std::stoi(value());
    else usage("unknown flag " + f);
  }
  if (a.threads <= 0) a.threads = omp_get_max_threads();
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

double median_ms(const Plan& plan, const AttentionTensors& t, int reps) {
  std::vector<std::byte> ws(plan.workspace_bytes());
  std::vector<double> ms;
  for (int r = 0; r < reps + 1; ++r) {  // the first run warms up
    const auto t0 = Clock::now();
    const Diagnostics d = plan.run(t, ws, nullptr);
    const auto t1 = Clock::now();
    if (!d.ok()) usage(d.summary());
    if (r > 0) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
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
  const double dense_ms = median_ms(**dense_plan, data->tensors(), a.reps);
  const std::string shape = "\"dtype\":\"" + std::string(dtype_name(a.dtype)) + "\",\"seqlen\":" +
                            std::to_string(a.seqlen) + ",\"heads\":" + std::to_string(a.heads) + ",\"head_dim\":" +
                            std::to_string(a.head_dim) + ",\"block\":" + std::to_string(a.block) +
                            ",\"threads\":" + std::to_string(a.threads);
  std::printf("{\"impl\":\"cpu_flash dense\",%s,\"density\":1.0,\"ms\":%.2f,\"gflops\":%.1f}\n", shape.c_str(),
              dense_ms, dense.flops() / dense_ms * 1e-6);

  Problem sparse = dense;
  sparse.block_sparse = BlockSparse{a.block, a.block, 1, 1};
  auto sparse_plan = backend->plan(sparse, cpu);
  if (!sparse_plan) usage(sparse_plan.diagnostics().summary());
  const int key_blocks = block_sparse_shape(sparse).num_k_blocks;
  std::mt19937_64 rng(7);
  for (double density : {0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0}) {
    const int per_row = std::max(1, static_cast<int>(density * key_blocks + 0.5));
    const BlockSparseLists lists = random_lists(sparse, per_row, rng);
    AttentionTensors t = data->tensors();
    lists.bind(t);
    const double ms = median_ms(**sparse_plan, t, a.reps);
    const double listed = block_sparse_density(sparse, lists);
    std::printf(
        "{\"impl\":\"cpu_flash block-sparse\",%s,\"density\":%.3f,\"ms\":%.2f,\"effective_gflops\":%.1f,"
        "\"time_over_dense\":%.3f}\n",
        shape.c_str(), listed, ms, block_sparse_flops(sparse, lists) / ms * 1e-6, ms / dense_ms);
  }
  return 0;
}
