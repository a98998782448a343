// cpu_flash benchmark: one attention shape, timed after warm-up, median of the
// repeats; or the machine's fp32 FMA peak (--peak). Driven by compare_torch.py,
// which alternates it with PyTorch's CPU SDPA on the same inputs and threads.
//
//   bench_cpu_flash --dtype bf16 --seqlen 4096 --heads 16 --head-dim 128 [--causal]
//                   [--threads 2] [--reps 5] [--inputs FILE] [--check]
//   bench_cpu_flash --peak --threads 2
// Prints one JSON object per line.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "attnkit/backends/cpu_flash.hpp"
#include "attnkit/backends/reference.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "bench_args.hpp"
#include "fma_peak.hpp"

namespace {

using namespace attnkit;
using Clock = std::chrono::steady_clock;

struct Args : bench::ShapeArgs {
  int batch = 1;
  bool causal = false, peak = false, check = false;
  std::string inputs;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "bench_cpu_flash: %s\n", why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  std::string dtype;
  CLI::App app{"cpu_flash on one shape, or the machine's fp32 FMA peak"};
  bench::add_shape_options(app, a, dtype);
  app.add_option("--batch", a.batch)->capture_default_str();
  app.add_option("--inputs", a.inputs, "q, k, v as compare_torch.py writes them");
  app.add_flag("--causal", a.causal);
  app.add_flag("--peak", a.peak, "the fp32 FMA peak instead of attention");
  app.add_flag("--check", a.check, "compare with the reference");
  bench::parse_shape_args(app, argc, argv, "bench_cpu_flash", a, dtype);
  return a;
}

// q, k, v as written by compare_torch.py: BHSD, contiguous, one after another.
bool read_inputs(const std::string& path, const AttentionTensors& t) {
  std::ifstream in(path, std::ios::binary);
  for (const TensorView* v : {&t.q, &t.k, &t.v}) {
    const auto bytes = static_cast<std::streamsize>(v->numel() * dtype_size(v->dtype));
    if (!in.read(static_cast<char*>(v->data), bytes)) return false;
  }
  return true;
}

// The [seq, dim] slice of head (b, h) of a BHSD tensor.
TensorView head_view(const TensorView& v, int b, int h) {
  TensorView s = v;
  s.data = v.bytes() + (b * v.strides[0] + h * v.strides[1]) * static_cast<std::int64_t>(dtype_size(v.dtype));
  s.rank = 2;
  s.shape = {v.shape[2], v.shape[3]};
  s.strides = {v.strides[2], v.strides[3]};
  return s;
}

int run_attention(const Args& a) {
  Problem p;
  p.layout = Layout::bhsd;
  p.batch = a.batch;
  p.seqlen_q = p.seqlen_k = a.seqlen;
  p.heads_q = p.heads_kv = a.heads;
  p.head_dim_qk = p.head_dim_v = a.head_dim;
  p.dtype = a.dtype;
  if (a.causal) p.mask = MaskKind::causal;
  auto data = HostProblemData::create(p, {.seed = 1});
  if (!data) usage(data.diagnostics().summary().c_str());
  const AttentionTensors t = data->tensors();
  if (!a.inputs.empty() && !read_inputs(a.inputs, t)) usage("cannot read --inputs");

  const auto backend = make_cpu_flash_backend({CpuIsa::best, a.threads});
  auto plan = backend->plan(p, detect_cpu_platform());
  if (!plan) usage(plan.diagnostics().summary().c_str());
  std::vector<std::byte> ws((*plan)->workspace_bytes());

  std::vector<double> ms;
  for (int r = 0; r < a.reps + 1; ++r) {  // the first run warms up
    const auto t0 = Clock::now();
    const Diagnostics d = (*plan)->run(t, ws, nullptr);
    const auto t1 = Clock::now();
    if (!d.ok()) usage(d.summary().c_str());
    if (r > 0) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  // 4 b h s^2 d FLOPs (QK^T and PV), half under a causal mask.
  const double flops = p.flops();
  std::string extra;
  if (a.check) {  // a few heads against the exact reference
    Problem rp = p;
    rp.out_dtype_override = DType::f64;
    HostTensor ref = data->make_output(DType::f64);
    ReferenceOptions o;
    o.only_heads = {{0, 0}, {0, a.heads - 1}};
    AttentionTensors rt = data->tensors_with_outputs(ref.view(), {});
    if (!reference_attention(rp, rt, o).ok()) usage("reference failed");
    ErrorStats e;
    for (auto [b, h] : o.only_heads) e.merge(compare_outputs(head_view(t.out, b, h), head_view(ref.view(), b, h)));
    extra = ",\"rel_l2_err\":" + std::to_string(e.rel_l2);
  }
  std::printf(
      "{\"impl\":\"attnkit\",\"isa\":\"%s\",\"dtype\":\"%s\",\"seqlen\":%d,\"heads\":%d,\"head_dim\":%d,"
      "\"causal\":%s,\"threads\":%d,\"ms\":%.3f,\"gflops\":%.2f%s}\n",
      std::string(cpu_isa_name(cpu_flash_best_isa())).c_str(), std::string(dtype_name(a.dtype)).c_str(), a.seqlen,
      a.heads, a.head_dim, a.causal ? "true" : "false", a.threads, median, flops / median * 1e-6, extra.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.peak) {
    const double g = attnkit::bench::fp32_fma_peak_gflops(a.threads);
    std::printf("{\"impl\":\"fma_peak\",\"dtype\":\"fp32\",\"threads\":%d,\"gflops\":%.2f}\n", a.threads, g);
    return 0;
  }
  return run_attention(a);
}
