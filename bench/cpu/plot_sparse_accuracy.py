#!/usr/bin/env python3
"""docs/sparse.md's error-vs-sparsity table (with times, when the lines have them) and plot
from bench_sparse_accuracy's lines.

    build/bench/cpu/bench_sparse_accuracy > acc.jsonl
    python3 bench/cpu/plot_sparse_accuracy.py acc.jsonl docs/sparse_accuracy.png

Prints the markdown table; writes the plot when matplotlib is installed
(pip install matplotlib==3.9.2: only this script needs it).
"""
import json
import sys


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    timed = all("ms" in r for r in rows)  # lines from a bench_sparse_accuracy that times (2026-12-02 on)
    print("| method | setting | work skipped | rel. L2 vs dense |" + (" ms | dense ms | time / dense |" if timed else ""))
    print("|---|---|---:|---:|" + ("---:|---:|---:|" if timed else ""))
    for r in rows:
        cells = f"| {r['method']} | {r['setting']} | {100 * r['skipped']:.1f}% | {r['rel_l2']:.4f} |"
        if timed:
            cells += f" {r['ms']:.0f} | {r['dense_ms']:.0f} | {r['time_over_dense']:.2f} |"
        print(cells)
    if len(sys.argv) < 3:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for method in dict.fromkeys(r["method"] for r in rows):
        pts = sorted((r["skipped"], r["rel_l2"]) for r in rows if r["method"] == method)
        ax.plot([100 * s for s, _ in pts], [e for _, e in pts], marker="o", label=method)
    ax.set_yscale("log")
    ax.set_xlabel("work skipped (%)")
    ax.set_ylabel("relative L2 error vs dense")
    r0 = rows[0]
    ax.set_title(f"video-like inputs, {r0['tokens']} tokens, {r0['heads']} heads, d128, bf16 (CPU)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2])


if __name__ == "__main__":
    main()
