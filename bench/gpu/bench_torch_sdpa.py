#!/usr/bin/env python3
"""Peers on the dense grid of design §6 -- PyTorch SDPA (flash, cuDNN,
efficient), FlexAttention (--flex) and FlashAttention-3's hopper forward
(--fa3, the fa3-fwd wheel) -- and, with --attnkit, attnkit's backends through
its Python module in the same process (design §6: peers run in the same
process). For attnkit's cudnn the row also records the cuDNN graph build
time of that shape.

Same shapes as bench_fa2 (seqlen 512..16k, batch = 16384/seqlen, heads =
2048/head_dim, bf16, BSHD memory, viewed as BHSD for SDPA, causal and not),
CUDA events around each call after warm-up, each call after an L2 flush
(timing.py), median of the timed calls, two rotated random input sets. Each implementation's output is checked against
the first one's (relative L2 <= 2e-2, else MISMATCH and exit status 1). Per
grid point the implementations take turns call by call in rotated order
(A B C, B C A, C A B, ...), so clock, power and thermal drift within a run
falls on all of them alike.

  bench_torch_sdpa.py --json torch.json [--backends flash,cudnn,efficient] [--attnkit [--attnkit-backend fa3,fa2]]
                      [--flex] [--fa3] [--dims 64,128,256]
  bench_torch_sdpa.py --json /tmp/x.json --device cpu --attnkit --tokens 256 --width 128   # smoke test, no GPU
"""
import argparse
import json
import random
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

from report import UNSTEADY
import timing
from timing import Timer

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


def ints(s):
    return [int(x) for x in s.split(",") if x]


def flex_attention_impl(causal):
    """FlexAttention (torch.compile'd, one compilation per shape during warm-up)
    on the BHSD views, causal through a block mask (q >= k: sq = sk here)."""
    import torch._dynamo
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # Every grid point is a new static shape of the same function: past
    # dynamo's recompile limit (8) it silently runs flex_attention eagerly,
    # 20-80x slower (seen on the H200: 4 TFLOP/s from the 9th shape on).
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 1024))
    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def run(q, k, v):
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        mask = None
        if causal:
            key = (qh.shape[2], kh.shape[2], q.device)
            if key not in masks:
                masks[key] = create_block_mask(lambda b, h, qi, ki: qi >= ki, B=None, H=None, Q_LEN=qh.shape[2],
                                               KV_LEN=kh.shape[2], device=q.device)
            mask = masks[key]
        return compiled(qh, kh, vh, block_mask=mask).transpose(1, 2)  # BSHD view, like attnkit's output

    return run


def implementations(args, causal):
    """name -> callable(q, k, v) on BSHD tensors, for every implementation asked for."""
    impls = {}
    for name in args.backends.split(","):
        if not name:
            continue
        backend = BACKENDS[name]

        def sdpa(q, k, v, backend=backend):
            with sdpa_kernel([backend]):  # BHSD views of the same BSHD memory; the output viewed back as BSHD
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=causal).transpose(1, 2)

        impls[f"torch_{name}"] = sdpa
    if args.flex:
        impls["torch_flex"] = flex_attention_impl(causal)
    if args.fa3:
        from fa3_fwd_interface import flash_attn_func  # BSHD in and out, bottom-right causal

        impls["fa3_fwd"] = lambda q, k, v: flash_attn_func(q, k, v, causal=causal)
    if args.attnkit:
        import attnkit

        for backend in args.attnkit_backend.split(","):
            impls[f"attnkit_{backend}_py"] = lambda q, k, v, backend=backend: attnkit.attention(
                q, k, v, causal=causal, backend=backend)
    return impls


def cudnn_graphs_built():
    """(graphs built or read from the plan store, latest build ms) of attnkit's cuDNN graph
    cache, None without the module."""
    try:
        import attnkit._attnkit as native
    except ImportError:
        return None
    s = native.cudnn_graph_stats()
    return s["built"] + s.get("loaded", 0), s["last_build_ms"]


def medians_by_predecessor(samples, predecessors):
    """{predecessor: (median ms, count)} over the calls that followed each predecessor (None: none)."""
    groups = {}
    for ms, p in zip(samples, predecessors):
        groups.setdefault(str(p), []).append(ms)
    return {p: (sorted(v)[len(v) // 2], len(v)) for p, v in sorted(groups.items())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--backends", default="flash,cudnn")
    ap.add_argument("--attnkit", action="store_true", help="also time attnkit.attention (same process, interleaved)")
    ap.add_argument("--attnkit-backend", default="fa2", help="attnkit backends to time, comma-separated")
    ap.add_argument("--fa3", action="store_true", help="also time FlashAttention-3's forward (fa3_fwd_interface)")
    ap.add_argument("--flex", action="store_true", help="also time FlexAttention (compiles once per shape)")
    ap.add_argument("--dims", type=ints, default=[64, 128, 256])
    ap.add_argument("--seqlens", type=ints, default=[512, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--masks", default="full,causal", choices=["full", "causal", "full,causal"],
                    help="the grid's masks (one alone for a profiler's launch count)")
    ap.add_argument("--iters", type=int, default=30, help="timed calls per implementation and point")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds the timed calls are split into")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--video", action="store_true", help="also the video DiT shape 1 x 24 x 32760 x 128")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=16384, help="batch * seqlen (design §6: 16384)")
    ap.add_argument("--width", type=int, default=2048, help="heads * head_dim (design §6: 2048)")
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_grad_enabled(False)  # inference: no autograd graph around the peers
    dev = torch.device(args.device)
    timer = Timer(dev)
    rows, mismatches = [], 0
    per_round = max(1, args.iters // args.rounds)
    shuffle = random.Random(0)  # the call order within each turn (seeded: runs are repeatable)
    def measure(b, h, s, d, causal, impls, shape):
        """Times every implementation on one shape; returns the number of output mismatches."""
        sets = [[torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16) for _ in range(3)] for _ in range(2)]
        samples, alive, agreement, build_ms = {name: [] for name in impls}, dict(impls), {}, {}
        for name, fn in list(alive.items()):  # warm-up; a backend that refuses the shape drops out here
            graphs = cudnn_graphs_built() if name.startswith("attnkit_") else None
            try:
                for it in range(args.warmup):
                    fn(*sets[it % 2])
                timer.collect()
            except (RuntimeError, ValueError) as e:  # ValueError: attnkit.AttnkitError (a refusal)
                print(f"skip {name} d{d} s{s} causal={causal}: {str(e).splitlines()[0]}", file=sys.stderr)
                del alive[name]
            after = cudnn_graphs_built() if graphs else None
            if after and after[0] > graphs[0]:  # this shape's cuDNN graph was built by its first call
                build_ms[name] = after[1]
        # Every implementation's output against the first one's on the same inputs:
        # a fast wrong answer must not end up in the table.
        bad, ref_name, ref = 0, None, None
        for name, fn in alive.items():
            out = fn(*sets[0]).float()
            if ref is None:
                ref_name, ref = name, out
                continue
            rel = ((out - ref).norm() / ref.norm()).item()
            if not rel <= 2e-2:  # NaN fails too
                print(f"MISMATCH {name} vs {ref_name} d{d} s{s} causal={causal}: rel_l2 {rel:.3g}", file=sys.stderr)
                bad += 1
            agreement[name] = rel
        ref = out = None  # free the fp32 copies before timing
        order = list(alive.items())
        timers = {name: Timer(dev) for name in alive}
        # Which implementation ran just before each timed call (None: the first), in the order
        # of the samples: an unsteady point's medians by predecessor say whether a neighbour
        # disturbs it.
        preceded, prev = {name: [] for name in alive}, None
        for r in range(args.rounds):
            # One call of each implementation in turn, in a fresh random order every
            # call: all of them run at the same clock, and none always follows the
            # same neighbour. (Runs of 10 calls of one, then the next, made the same
            # cuDNN kernel 4-15% apart at s16k, where the H200's clock drifts with the
            # heat of what ran just before; a cyclic rotation kept each one's
            # predecessor fixed, and at d128 / d256 causal s1k the medians of attnkit
            # cudnn and FA3 doubled (their minimum times equal to isolated runs):
            # 2026-12-02. The random order alone still left s512's medians to the
            # predecessors each drew: timing.py's L2 flush before every call.)
            for it in range(per_round):
                turn = list(order)
                shuffle.shuffle(turn)
                for name, fn in turn:
                    timers[name].time(lambda: fn(*sets[it % 2]))
                    preceded[name].append(prev)
                    prev = name
            for name in alive:
                samples[name] += timers[name].collect()
        flops = 4.0 * b * h * s * s * d / (2.0 if causal else 1.0)
        for name in alive:
            ms = sorted(samples[name])
            med = ms[len(ms) // 2]
            tf = flops / (med * 1e9)
            by_prev = medians_by_predecessor(samples[name], preceded[name])
            rows.append(dict(impl=name, shape=shape, head_dim=d, seqlen=s, batch=b, heads=h, causal=causal,
                             ms_median=med, ms_min=ms[0], tflops=tf, rel_l2_vs=ref_name if name in agreement else None,
                             rel_l2=agreement.get(name), graph_build_ms=build_ms.get(name),
                             ms_median_by_predecessor=by_prev))
            print(f"{name:16s} {shape:5s} d{d:<3d} {'causal' if causal else 'full':6s} s{s:<6d} {med:8.3f} ms "
                  f"{tf:7.1f} TFLOP/s", flush=True)
            if med > UNSTEADY * ms[0]:
                print(f"  unsteady ({med / ms[0]:.2f}x its minimum); median ms after each predecessor: " +
                      ", ".join(f"{p} {m:.3f} (n={n})" for p, (m, n) in by_prev.items()), flush=True)
        del sets
        return bad

    for d in args.dims:
        for causal in [m == "causal" for m in args.masks.split(",")]:
            impls = implementations(args, causal)
            for s in args.seqlens:
                if s <= args.tokens:
                    mismatches += measure(args.tokens // s, args.width // d, s, d, causal, impls, "grid")
    if args.video:  # design §6's video DiT shape: 1 x 24 heads x 32760 tokens x 128, non-causal
        mismatches += measure(1, 24, 32760, 128, False, implementations(args, False), "video")
    info = dict(device=torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", torch=torch.__version__,
                cudnn=torch.backends.cudnn.version(), cuda=torch.version.cuda, l2_flush=timing.FLUSH, results=rows)
    with open(args.json, "w") as f:
        json.dump(info, f, indent=1)
    if mismatches:
        print(f"{mismatches} output mismatch(es) above rel_l2 2e-2", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
