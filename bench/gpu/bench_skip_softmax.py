"""Request skip-softmax on fa3 (docs/sparse.md section 3): time against the
dense kernel as the threshold grows, on attention with a video DiT's locality,
through a Deployment layer as an engine calls it. Same process, interleaved
per point, device events, warm-up, median (design section 6).

Inputs: latents 21 x 30 x 52 (32760 tokens, the video shape of issue 15),
24 heads, d128, bf16; q = k = random Fourier features of each token's
(t, y, x) position (q . k falls off with distance, a few tokens' scale per
head) plus noise, v standard normal. For each threshold_scale_factor the
table gives the time, the speed-up over dense, the fraction of (row, key
tile) pairs the rule skips (computed here in PyTorch from the same scores,
an independent count) and the relative L2 error against dense.

  PYTHONPATH=build/python python3 bench/gpu/bench_skip_softmax.py --json skip.json
"""
import argparse
import json
import math

import torch

import attnkit
from timing import Timer

GRID, HEADS, DIM, TILE = (21, 30, 52), 24, 128, 128


def video_qkv(seed=0, sharpness=10.0, noise=0.1):
    g = torch.Generator(device="cuda").manual_seed(seed)
    t, y, x = torch.meshgrid(*(torch.arange(n, device="cuda", dtype=torch.float32) for n in GRID), indexing="ij")
    pos = torch.stack([t, y, x], -1).reshape(-1, 3)  # [tokens, 3]
    feats = []
    for h in range(HEADS):
        scale = 2.0 + 2.0 * h / HEADS  # the locality length, in tokens
        w = torch.randn(3, DIM // 2, device="cuda", generator=g) / scale
        phase = pos @ w
        feats.append(torch.cat([phase.cos(), phase.sin()], -1))
    f = torch.stack(feats, 1)  # [tokens, heads, dim]: f_i . f_j = sum cos(w . (p_i - p_j))
    # Peak logit (i = j) minus the far field ~ sharpness after the 1/sqrt(d) scale.
    f = f * math.sqrt(sharpness * math.sqrt(DIM) / (DIM / 2))
    q = (f + noise * torch.randn(f.shape, device="cuda", generator=g)).unsqueeze(0)
    k = (f + noise * torch.randn(f.shape, device="cuda", generator=g)).unsqueeze(0)
    v = torch.randn(q.shape, device="cuda", generator=g)
    return (z.to(torch.bfloat16).contiguous() for z in (q, k, v))


def skipped_fraction(q, k, factor, heads=(0, 12, 23), rows=4096):
    """The rule on (row, tile) pairs of a sample of rows and heads: with a
    threshold below 1 a skipped tile never raises the running max, so a tile
    skips when its max is below the max of the tiles before it + ln(threshold)."""
    n = q.shape[1]
    log_thr = math.log(factor / n)
    assert log_thr < 0, "the vectorised count needs threshold_scale_factor < tokens"
    scale = 1.0 / math.sqrt(DIM)
    decided = skipped = 0
    tiles = (n + TILE - 1) // TILE
    for h in heads:
        for r0 in range(0, n, n // (rows // 512)):
            s = (q[0, r0:r0 + 512, h].float() @ k[0, :, h].float().T) * scale  # [512, n]
            s = torch.nn.functional.pad(s, (0, tiles * TILE - n), value=-math.inf)
            tmax = s.view(s.shape[0], tiles, TILE).amax(-1)
            prev = torch.cummax(tmax, -1).values
            prev = torch.cat([torch.full_like(prev[:, :1], -math.inf), prev[:, :-1]], -1)
            skip = tmax < prev + log_thr
            decided += tmax.numel()
            skipped += int(skip.sum())
    return skipped / decided


def timed(fn, warmup, reps):
    """Median ms of `reps` calls after `warmup` (timing.Timer: CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    timer = Timer(torch.device("cuda"))
    for _ in range(reps):
        timer.time(fn)
    ms = sorted(timer.collect())
    return ms[len(ms) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factors", default="1,10,100,1000")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()

    dep = attnkit.Deployment(model="wan", platform="cuda", dtype="bf16", attention_backend="fa")
    layer = dep.layer("transformer", "self", 0)
    print("layer:", layer.backend, torch.cuda.get_device_name(), "torch", torch.__version__)
    q, k, v = video_qkv()
    flops = 4.0 * HEADS * q.shape[1] ** 2 * DIM
    factors = [float(f) for f in args.factors.split(",")]

    dense = layer(q, k, v)

    def run_skip(f):
        with dep.request(skip_softmax_params={"threshold_scale_factor": f, "start_step": 0}, step=1):
            return layer(q, k, v)

    def sdpa_cudnn():
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(*(z.transpose(1, 2) for z in (q, k, v)))

    errors = {f: ((run_skip(f).float() - dense.float()).norm() / dense.float().norm()).item() for f in factors}
    fractions = {f: skipped_fraction(q, k, f) for f in factors}
    times = {"dense": [], "cudnn": [], **{f: [] for f in factors}}
    for _ in range(args.rounds):  # interleaved
        times["dense"].append(timed(lambda: layer(q, k, v), 3, args.reps))
        times["cudnn"].append(timed(sdpa_cudnn, 3, args.reps))
        for f in factors:
            times[f].append(timed(lambda: run_skip(f), 3, args.reps))
    med = {key: sorted(ts)[len(ts) // 2] for key, ts in times.items()}
    rows = [{"what": "fa3 dense", "ms": med["dense"], "tflops": flops / med["dense"] / 1e9},
            {"what": "torch cuDNN dense", "ms": med["cudnn"], "tflops": flops / med["cudnn"] / 1e9}]
    for f in factors:
        rows.append({"what": f"fa3 skip-softmax factor {f:g}", "ms": med[f], "speedup": med["dense"] / med[f],
                     "skipped": fractions[f], "rel_l2_vs_dense": errors[f]})
    print(f"{'what':34} {'ms':>8} {'vs dense':>9} {'skipped':>8} {'rel L2':>8}")
    for r in rows:
        print(f"{r['what']:34} {r['ms']:8.2f} {r.get('speedup', med['dense'] / r['ms']):8.2f}x"
              f" {r.get('skipped', 0.0):8.1%} {r.get('rel_l2_vs_dense', 0.0):8.4f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"shape": [1, HEADS, q.shape[1], DIM], "grid": GRID, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
