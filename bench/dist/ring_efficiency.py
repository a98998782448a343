#!/usr/bin/env python3
"""Sequence-parallel efficiency on the CPU with MPI: (T1 / N) / TN for the video
DiT shape scaled down (1 x 24 heads x S x 128, bf16), where T1 is one rank and TN
N ranks of one thread each (OMP_NUM_THREADS=1: a rank is one core, the CPU's
"device"). Single-rank and N-rank runs alternate, `--rounds` times; medians.

    bench/dist/ring_efficiency.py --attnkit build-cpu-only/src/cli/attnkit --seqlen 4096
"""
import argparse
import json
import os
import statistics
import subprocess


def run(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{"):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnkit", default="build-cpu-only/src/cli/attnkit")
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layouts", default="2:1,1:2,4:1,2:2,1:4", help="ring:ulysses pairs")
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    problem = ["--batch", "1", "--heads", str(args.heads), "--kv-heads", str(args.heads), "--seqlen", str(args.seqlen),
               "--head-dim", "128", "--dtype", "bf16", "--backend", "cpu_flash", "--check-heads", "1",
               "--repeat", str(args.repeat), "--format", "json"] + (["--causal"] if args.causal else [])
    single, multi = [], {}
    for _ in range(args.rounds):
        single.append(run([args.attnkit, "run"] + problem, env))
        for layout in args.layouts.split(","):
            ring, ulysses = (int(x) for x in layout.split(":"))
            n = ring * ulysses
            r = run(["mpirun", "-np", str(n), "--oversubscribe", args.attnkit, "run", "--ring-degree", str(ring),
                     "--ulysses-degree", str(ulysses)] + problem, env)
            multi.setdefault(layout, []).append(r)
    t1 = statistics.median(r["time_ms"] for r in single)
    t1_best = min(r["time_ms"] for r in single)
    assert all(r["passed"] for r in single)
    print(f"problem {single[0]['problem']}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"T1 = {t1:.1f} ms median, {t1_best:.1f} ms best (1 rank, 1 thread)")
    print("| layout | ranks | TN ms (median / best) | (T1/N)/TN median / best | rank 0: inner backend | "
          "rank 0: blocked in transfers | passed |")
    print("|---|---|---|---|---|---|---|")
    for layout, rs in multi.items():
        ring, ulysses = (int(x) for x in layout.split(":"))
        n = ring * ulysses
        tn = statistics.median(r["time_ms"] for r in rs)
        tn_best = min(r["time_ms"] for r in rs)
        blocked = statistics.median(r["parallel"]["rank0_blocked_ms"] for r in rs)
        inner = statistics.median(r["parallel"]["rank0_inner_ms"] for r in rs)
        print(f"| ring {ring} x ulysses {ulysses} | {n} | {tn:.0f} / {tn_best:.0f} | {t1 / n / tn:.2f} / "
              f"{t1_best / n / tn_best:.2f} | {inner:.1f} ms "
              f"({inner / tn:.0%}) | {blocked:.1f} ms ({blocked / tn:.1%}) | {all(r['passed'] for r in rs)} |")


if __name__ == "__main__":
    main()
