#!/usr/bin/env python3
"""Merges bench_fa2 and bench_torch_sdpa JSON into one summary (JSON + markdown)
and prints the short table: TFLOP/s of fa2 and its peers, fa2's ratio to each,
and fa2's fraction of the 709 TFLOP/s bf16 matmul ceiling of design §6.

fa2's number is the one timed in the peers' own process, interleaved with them
(bench_torch_sdpa.py --attnkit, impl attnkit_fa2_py) when present; bench_fa2's
(C++, Plan::run, a separate process) is shown beside it and used only when the
Python module was not available."""
import argparse
import json

CEILING = 709.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnkit", required=True)
    ap.add_argument("--torch", required=True)
    ap.add_argument("--out-json", required=True)
    ap.add_argument("--out-md", required=True)
    args = ap.parse_args()
    ak = json.load(open(args.attnkit))
    th = json.load(open(args.torch))
    table = {}
    for r in ak["results"] + th["results"]:
        key = (r["head_dim"], r["causal"], r["seqlen"])
        table.setdefault(key, {})[r["impl"]] = r["tflops"]
    # Optional peers get a column (and fa2's ratio to them) only when measured.
    extra = [(impl, label) for impl, label in (("torch_efficient", "efficient"), ("torch_flex", "flex"))
             if any(impl in t for t in table.values())]
    head = ["d", "causal", "seqlen", "batch x heads", "fa2 TFLOP/s", "fa2 (C++ bench)", "torch flash", "torch cuDNN"]
    head += [f"torch {label}" for _, label in extra] + ["fa2/flash", "fa2/cuDNN"]
    head += [f"fa2/{label}" for _, label in extra] + ["fa2 / 709"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows, misses = [], []
    f = lambda x, p=1: "-" if x is None else f"{x:.{p}f}"
    ratio = lambda a, b: a / b if a and b else None
    for (d, causal, s) in sorted(table):
        t = table[(d, causal, s)]
        fa2_cpp, fl, cu = t.get("attnkit_fa2"), t.get("torch_flash"), t.get("torch_cudnn")
        fa2 = t.get("attnkit_fa2_py", fa2_cpp)
        r_fl, r_cu = ratio(fa2, fl), ratio(fa2, cu)
        peers = [t.get(impl) for impl, _ in extra]
        row = dict(head_dim=d, causal=causal, seqlen=s, fa2=fa2, fa2_same_process="attnkit_fa2_py" in t,
                   fa2_cpp_bench=fa2_cpp, torch_flash=fl, torch_cudnn=cu, fa2_over_flash=r_fl,
                   fa2_over_cudnn=r_cu, fa2_fraction_of_709=fa2 / CEILING if fa2 else None)
        for (impl, label), x in zip(extra, peers):
            row[impl], row[f"fa2_over_{label}"] = x, ratio(fa2, x)
        rows.append(row)
        if r_fl is not None and r_fl < 1.0:
            misses.append(f"d{d} {'causal' if causal else 'full'} s{s}: {r_fl:.2f}x")
        cells = [str(d), "yes" if causal else "no", str(s), f"{16384 // s} x {2048 // d}", f(fa2), f(fa2_cpp), f(fl), f(cu)]
        cells += [f(x) for x in peers] + [f(r_fl, 2), f(r_cu, 2)] + [f(ratio(fa2, x), 2) for x in peers]
        cells += [f(fa2 / CEILING if fa2 else None, 2)]
        lines.append("| " + " | ".join(cells) + " |")
    summary = dict(device=th.get("device"), torch=th.get("torch"), cudnn=th.get("cudnn"), cuda=th.get("cuda"),
                   ceiling_tflops=CEILING, rows=rows, misses_vs_flash=misses)
    json.dump(summary, open(args.out_json, "w"), indent=1)
    md = "\n".join(lines) + "\n"
    open(args.out_md, "w").write(md)
    print(f"device {summary['device']}, torch {summary['torch']}, cuDNN {summary['cudnn']}, CUDA {summary['cuda']}")
    print(md)
    print("points below 1.0x torch flash:", ", ".join(misses) if misses else "none")


if __name__ == "__main__":
    main()
