#!/usr/bin/env python3
"""cpu_flash against PyTorch's CPU scaled_dot_product_attention.

Same inputs (written by this script, read by bench_cpu_flash), same thread
count, runs alternating attnkit / torch for several rounds so machine drift
cancels (each round is the median of --reps timed calls after a warm-up; the
table shows the best round of each, the JSON also the median round); the fp32 FMA peak is measured in the same run. Not part of CI: torch
is an optional, benchmark-only dependency (install it in a venv outside the
repository).

  python bench/cpu/compare_torch.py --bench build/bench/cpu/bench_cpu_flash \
      --threads 2 --rounds 3 --reps 3 [--json out.json]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F


def run_bench(exe, args, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([exe, *args, "--threads", str(threads)], check=True, capture_output=True, text=True,
                         env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def time_torch(q, k, v, causal, reps):
    F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # warm-up
    ms = []
    for _ in range(reps):
        t0 = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def flops(b, h, s, d, causal):
    f = 4.0 * b * h * s * s * d
    return f / 2 if causal else f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True, help="path to bench_cpu_flash")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seqlens", default="1024,4096")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--json")
    a = ap.parse_args()

    torch.manual_seed(0)
    results = {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
               "python": platform.python_version(), "threads": a.threads, "date": time.strftime("%Y-%m-%d"),
               "rows": []}
    results["fma_peak_gflops"] = {t: run_bench(a.bench, ["--peak"], t)["gflops"] for t in sorted({1, a.threads})}
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16}

    def one_config(dt, s, d, causal, threads):
        torch.set_num_threads(threads)
        shape = (1, a.heads, s, d)
        q, k, v = (torch.randn(shape, dtype=tdt[dt]) for _ in range(3))
        with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
            for x in (q, k, v):  # BHSD, contiguous; bf16 as its raw 16-bit patterns
                (x.view(torch.int16) if dt == "bf16" else x).numpy().tofile(f)
            path = f.name
        args = ["--dtype", dt, "--seqlen", str(s), "--heads", str(a.heads), "--head-dim", str(d), "--reps",
                str(a.reps), "--inputs", path] + (["--causal"] if causal else [])
        ours, theirs = [], []
        try:
            for r in range(a.rounds):  # alternate, and alternate who goes first
                if r % 2 == 0:
                    ours.append(run_bench(a.bench, args, threads)["ms"])
                    theirs.append(time_torch(q, k, v, causal, a.reps))
                else:
                    theirs.append(time_torch(q, k, v, causal, a.reps))
                    ours.append(run_bench(a.bench, args, threads)["ms"])
            check = run_bench(a.bench, args + ["--check", "--reps", "1"], threads)
        finally:
            os.unlink(path)
        fl = flops(1, a.heads, s, d, causal)
        row = {"dtype": dt, "seqlen": s, "head_dim": d, "causal": causal, "threads": threads,
               # Best round of each: on a shared machine interference only adds time.
               "attnkit_ms": min(ours), "torch_ms": min(theirs),
               "attnkit_ms_median": statistics.median(ours), "torch_ms_median": statistics.median(theirs),
               "rel_l2_err": check.get("rel_l2_err"), "isa": check.get("isa")}
        row["attnkit_gflops"] = fl / row["attnkit_ms"] * 1e-6
        row["torch_gflops"] = fl / row["torch_ms"] * 1e-6
        row["speedup"] = row["torch_ms"] / row["attnkit_ms"]
        row["of_fp32_peak"] = row["attnkit_gflops"] / results["fma_peak_gflops"][threads]
        print(json.dumps(row), flush=True)
        results["rows"].append(row)

    for dt in a.dtypes.split(","):
        for s in map(int, a.seqlens.split(",")):
            for d in map(int, a.head_dims.split(",")):
                for causal in (False, True):
                    one_config(dt, s, d, causal, a.threads)
    # Thread scaling, 1 -> N threads, on the headline shape.
    if a.threads > 1:
        for dt in a.dtypes.split(","):
            one_config(dt, 4096, 128, False, 1)

    print("\n| dtype | seqlen | d | causal | threads | attnkit ms | torch ms | attnkit GFLOP/s | torch GFLOP/s "
          "| speedup | % fp32 FMA peak | rel L2 err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results["rows"]:
        print(f"| {r['dtype']} | {r['seqlen']} | {r['head_dim']} | {'yes' if r['causal'] else 'no'} | {r['threads']} "
              f"| {r['attnkit_ms']:.1f} | {r['torch_ms']:.1f} | {r['attnkit_gflops']:.0f} | {r['torch_gflops']:.0f} "
              f"| {r['speedup']:.2f}x | {100 * r['of_fp32_peak']:.0f}% | {r['rel_l2_err']:.1e} |")
    print(f"\nfp32 FMA peak (GFLOP/s): {results['fma_peak_gflops']}; torch {results['torch']} "
          f"({results['cpu_capability']}); {results['date']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
