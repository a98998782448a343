#!/usr/bin/env python3
"""A/B of two builds of fa2 timed in one call (scripts/gpu_check.sh with
GPU_CHECK_AB): bench_fa2 JSON files of this tree ("new") and of an older
commit ("base"), run alternately for several rounds. Per grid point, the
median over rounds of each side's median, and new / base; separate processes,
so only differences beyond a few percent mean anything (docs/perf/gpu-fa2.md).

  ab_report.py --new r1_new.json r2_new.json --base r1_base.json r2_base.json --out-json ab.json
"""
import argparse
import json
import statistics
import sys


def point(r):
    return (r["head_dim"], r["causal"], r["seqlen"])


def medians(paths):
    """grid point -> median over runs of each run's TFLOP/s."""
    by_point = {}
    for path in paths:
        with open(path) as f:
            for r in json.load(f)["results"]:
                by_point.setdefault(point(r), []).append(r["tflops"])
    return {p: statistics.median(v) for p, v in by_point.items()}


def compare(new_paths, base_paths):
    new, base = medians(new_paths), medians(base_paths)
    rows = []
    for p in sorted(set(new) & set(base)):
        d, causal, s = p
        rows.append({"head_dim": d, "causal": causal, "seqlen": s, "new_tflops": round(new[p], 1),
                     "base_tflops": round(base[p], 1), "new_over_base": round(new[p] / base[p], 3)})
    missing = sorted(set(new) ^ set(base))
    return rows, missing


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", nargs="+", required=True, help="bench_fa2 --json files of this tree")
    ap.add_argument("--base", nargs="+", required=True, help="bench_fa2 --json files of the baseline")
    ap.add_argument("--out-json", required=True)
    args = ap.parse_args(argv)
    rows, missing = compare(args.new, args.base)
    if not rows:
        print("A/B: no grid point measured on both sides", file=sys.stderr)
        return 1
    with open(args.out_json, "w") as f:
        json.dump({"rounds": {"new": len(args.new), "base": len(args.base)}, "rows": rows,
                   "only_one_side": [list(p) for p in missing]}, f, indent=1)
    print("| d | causal | seqlen | new TFLOP/s | base TFLOP/s | new / base |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['head_dim']} | {'yes' if r['causal'] else 'no'} | {r['seqlen']} | {r['new_tflops']} | "
              f"{r['base_tflops']} | {r['new_over_base']:.3f} |")
    if missing:
        print(f"measured on one side only: {missing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
