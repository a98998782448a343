"""Block-sparse video attention on the GPU: attnkit's fa3 over block-sparse KV
lists against FlexAttention with the same block mask, FastVideo's sliding-tile
kernels (when the fastvideo-kernel wheel imports) and dense cuDNN, in one
process, interleaved per point (design section 6: device events, warm-up,
median). Issue 19's shapes:

  sta_wan      latents 18x48x80 (69120 tokens), tiles 6x8x8 (384 tokens), a 3x3x3
               tile kernel shifted inward at the borders (STA's rule): 85% skipped
  window_cut   latents 20x32x48 (30720 tokens), tiles 2x8x8 (128 tokens), a window
               of (2, 1, 2) tiles each side, cut at the borders: 82% skipped
  *_raster     the same masks on tokens in raster (t, h, w) order: attnkit's
               sliding_tile_attn reads them in place on sm_90 (fa3bsr), a torch gather
               around fa3 and FlexAttention reorder to tiles and back (the reorder is timed)
  density      30720 tokens, random block lists at 10..90% density: time should
               follow density, effective TFLOP/s (listed blocks only) vs dense
  video_backends  latents 20x32x48 (30720 tokens, whole 4x4x4 cubes), smooth video-like
               q / k / v: sparge_attn, sol_attn (step 20, layer 5: past its dense steps and
               layers), video_sparse_attn_h3 and hybrid_window_attn_h3 (with gates) through
               attnkit, against fa3 and cuDNN dense; time, and each output's error against fa3 dense

  PYTHONPATH=build/python python3 bench/gpu/bench_sparse.py --json sparse.json [--only sta_wan,density]
"""
import argparse
import itertools
import json
import math
import random
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attnkit
from timing import Timer

HEADS, DIM = 24, 128


def tile_window_mask(latent, tile, half, rule):
    """Dense [n_tiles, n_tiles] uint8: query tile -> key tiles of a 3-D window
    of `half` tiles each side. rule "shift": STA's, the window moves inward at
    the borders so every query tile sees a full (2 half + 1)^3 kernel;
    rule "cut": the window is clipped at the borders."""
    grid = [l // t for l, t in zip(latent, tile)]
    coords = list(itertools.product(*(range(g) for g in grid)))
    n = len(coords)
    mask = np.zeros((n, n), np.uint8)
    index = {c: i for i, c in enumerate(coords)}
    for qi, qc in enumerate(coords):
        ranges = []
        for c, g, h in zip(qc, grid, half):
            if rule == "shift":
                lo = min(max(c - h, 0), max(g - (2 * h + 1), 0))
                ranges.append(range(lo, min(lo + 2 * h + 1, g)))
            else:
                ranges.append(range(max(c - h, 0), min(c + h + 1, g)))
        for kc in itertools.product(*ranges):
            mask[qi, index[kc]] = 1
    return mask


def raster_to_tile_order(latent, tile):
    """perm such that x_tile = x_raster[:, perm] (tokens of a tile contiguous, tiles in raster order)."""
    T, H, W = latent
    t, h, w = tile
    idx = np.arange(T * H * W).reshape(T // t, t, H // h, h, W // w, w)
    return torch.from_numpy(idx.transpose(0, 2, 4, 1, 3, 5).reshape(-1).copy())


def flex_impl(block_mask_tiles, block, seqlen, perm=None):
    """FlexAttention with the tile mask at its 128-token block granularity; `perm`: the tokens arrive in
    raster order, the mask_mod maps each token to its tile (what a user without a reorder writes)."""
    import torch._dynamo
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
    compiled = torch.compile(flex_attention, dynamic=False)
    dense = torch.from_numpy(block_mask_tiles).cuda().bool()
    if perm is None:
        mask_mod = lambda b, h, q, k: dense[q // block, k // block]
    else:
        tile_of = torch.empty(seqlen, dtype=torch.long)
        tile_of[perm] = torch.arange(seqlen) // block  # raster token -> its tile
        tile_of = tile_of.cuda()
        mask_mod = lambda b, h, q, k: dense[tile_of[q], tile_of[k]]
    bm = create_block_mask(mask_mod, B=None, H=None, Q_LEN=seqlen, KV_LEN=seqlen, device="cuda")
    return lambda q, k, v: compiled(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                    block_mask=bm).transpose(1, 2)


def fastvideo_impls(latent, half, q, k, v):
    """FastVideo's sliding-tile attention, BHSD on tile-ordered tokens, STA's shifted window: its compiled
    ThunderKittens kernel (built for a few latent shapes, 18x48x80 among them) and its Triton kernel.
    Their BHSD-contiguous inputs are made here, outside the timing. {} when the wheel does not import."""
    try:
        import fastvideo_kernel
        from fastvideo_kernel.triton_kernels.st_attn_triton import sliding_tile_attention_triton
    except Exception as e:  # noqa: BLE001 - any import failure means "peer not available"
        print(f"fastvideo-kernel not available: {type(e).__name__}: {e}")
        return {}
    shape = "x".join(str(x) for x in latent)
    window = [[2 * h + 1 for h in half]] * HEADS
    qh, kh, vh = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    out = {"fastvideo_sta_triton": lambda *_: sliding_tile_attention_triton(
        qh, kh, vh, window, 0, False, shape).transpose(1, 2)}
    if getattr(fastvideo_kernel.ops, "sta_fwd", None) is not None:
        out["fastvideo_sta_tk"] = lambda *_: fastvideo_kernel.sliding_tile_attention(
            qh, kh, vh, window, 0, False, shape).transpose(1, 2)
    else:
        print("fastvideo-kernel: its compiled ops (sta_fwd) did not load; Triton kernel only")
    return out


def bench_profile(name, latent, seqlen, layers):
    """A temporary directory and, in it, a model profile with one video self-attention role
    (HEADS x DIM, `layers` layers, sparse backends allowed): what a Deployment of the bench loads."""
    import os
    import tempfile
    d = tempfile.mkdtemp(prefix=f"ak_{name}_")
    profile = os.path.join(d, f"{name}-bench.yaml")
    with open(profile, "w") as f:
        f.write(f"name: {name}-bench\nkind: video DiT (benchmark)\ndescription: bench_sparse.py's {name} case\n"
                "components:\n  - name: transformer\n    sparse_allowed: true\n    switchable: true\n"
                f"    roles:\n      - {{name: self, layers: {layers}, heads: {HEADS}, kv_heads: {HEADS}, head_dim: {DIM}, "
                f"seqlen: {seqlen}, video: [{latent[0]}, {latent[1]}, {latent[2]}]}}\n")
    return d, profile


def sta_backend_impl(latent, tile, half, rule, seqlen):
    """attnkit's sliding_tile_attn backend through a Deployment, on raster-order tokens: on sm_90 fa3bsr
    reads them in tile-ordered boxes over its plan-time lists and writes out in raster order; elsewhere
    the backend gathers into tiles and scatters back (all timed). The profile and the mask strategy
    (one window for every head, step 20, layer 0) are written here."""
    import os
    d, profile = bench_profile("sta", latent, seqlen, layers=1)
    strategy = os.path.join(d, "mask.json")
    window = [2 * h + 1 for h in half]
    json.dump({f"20_0_{h}": window for h in range(HEADS)}, open(strategy, "w"))
    config = json.dumps({"mask_strategy_file_path": strategy, "skip_time_steps": 0,
                         "tile_size": ",".join(str(t) for t in tile), "window_border": rule})
    dep = attnkit.Deployment(model=profile, attention_backend="sliding_tile_attn", attention_backend_config=config)
    layer = dep.layer("transformer", "self")
    request = dep.request(step=20)
    request.__enter__()  # held for the whole case: the request's prepare/apply is not what is timed

    def call(q, k, v):
        return layer(q, k, v, video_grid=tuple(latent))
    call.request = request  # a collected request context ends the request: keep it with the call
    return call


def warm_up(impls, q, k, v, warmup, case):
    """{name: output} of each implementation after `warmup` calls; one that fails is reported and left out."""
    outs = {}
    for name, fn in impls.items():
        try:
            for _ in range(warmup):
                out = fn(q, k, v)
            torch.cuda.synchronize()
            outs[name] = out
        except Exception as e:  # noqa: BLE001 - report and drop the implementation
            print(f"{case}: {name} failed: {type(e).__name__}: {str(e)[:300]}")
    return outs


def smooth_video(latent, heads, dim, seed, noise=0.1):
    """[1, T*H*W, heads, dim] bf16 in raster (t, h, w) order: a random field on a 4x coarser grid,
    trilinearly upsampled, plus `noise` of iid noise (neighbouring tokens alike, as in video latents;
    on iid noise sparge_attn's similarity check attends nearly every block densely)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    T, H, W = latent
    coarse = torch.randn(1, heads * dim, max(T // 4, 1), max(H // 4, 1), max(W // 4, 1), device="cuda", generator=g)
    field = F.interpolate(coarse, size=(T, H, W), mode="trilinear", align_corners=False)
    field = field + noise * torch.randn(field.shape, device="cuda", generator=g)
    return field.reshape(heads, dim, T * H * W).permute(2, 0, 1).unsqueeze(0).contiguous().to(torch.bfloat16)


def sol_backend_impl(latent, seqlen):
    """attnkit's sol_attn through a Deployment at step 20, layer 5 (its defaults: dense for steps < 10
    and layers 0, 1), so the call routes; the profile is written here."""
    _, profile = bench_profile("sol", latent, seqlen, layers=8)
    dep = attnkit.Deployment(model=profile, attention_backend="sol_attn")
    layer = dep.layer("transformer", "self", 5)
    request = dep.request(step=20)
    request.__enter__()  # held for the whole case, as in sta_backend_impl

    def call(q, k, v):
        return layer(q, k, v, video_grid=tuple(latent))
    call.request = request
    return call


def video_backends(args, rows):
    """The four video backends of issue 19 without a timed target yet, at one shape, interleaved."""
    latent = (20, 32, 48)
    seqlen = math.prod(latent)
    q, k, v = (smooth_video(latent, HEADS, DIM, seed) for seed in (1, 2, 3))
    gate = torch.rand(1, seqlen, HEADS, device="cuda", dtype=torch.float32)
    impls = {
        "attnkit_fa3_dense": lambda q, k, v: attnkit.attention(q, k, v, backend="fa3"),
        "torch_cudnn_dense": _sdpa_cudnn,
        "attnkit_sparge_attn": lambda q, k, v: attnkit.attention(q, k, v, backend="sparge_attn"),
        "attnkit_video_sparse_attn_h3": lambda q, k, v: attnkit.attention(
            q, k, v, backend="video_sparse_attn_h3", video_grid=latent, gate=gate),
        "attnkit_hybrid_window_attn_h3": lambda q, k, v: attnkit.attention(
            q, k, v, backend="hybrid_window_attn_h3", gate=gate),
    }
    try:
        impls["attnkit_sol_attn"] = sol_backend_impl(latent, seqlen)
    except Exception as e:  # noqa: BLE001 - reported, the rest of the case still runs
        print(f"video_backends: sol_attn did not plan: {type(e).__name__}: {str(e)[:400]}")
    outs = {n: o.float() for n, o in warm_up(impls, q, k, v, args.warmup, "video_backends").items()}
    impls = {n: f for n, f in impls.items() if n in outs}
    dense = outs.get("attnkit_fa3_dense")
    errors = {n: ((o - dense).norm() / dense.norm()).item() for n, o in outs.items()} if dense is not None else {}
    outs = dense = None
    times, timer, order = {n: [] for n in impls}, Timer(torch.device("cuda")), random.Random(0)
    for _ in range(args.iters):
        names = list(impls)
        order.shuffle(names)
        for n in names:
            timer.time(lambda: impls[n](q, k, v))
        for n, ms in zip(names, timer.collect()):
            times[n].append(ms)
    base = float(np.median(times["attnkit_fa3_dense"])) if times.get("attnkit_fa3_dense") else None
    for n, t in times.items():
        ms = float(np.median(t))
        rows.append(dict(case="video_backends", impl=n, seqlen=seqlen, latent=list(latent), ms=ms, ms_min=float(min(t)),
                         over_fa3_dense=(ms / base if base else None), rel_l2_vs_fa3_dense=errors.get(n)))
        print(f"video_backends {n:30s} {ms:8.3f} ms  {ms / base if base else float('nan'):5.2f}x fa3 dense  "
              f"rel_l2 vs fa3 dense {errors.get(n, float('nan')):.2e}")
    # Where each backend's time goes: its kernels per call (torch.profiler), the slowest first.
    from cudnn_kernels import kernels
    for n, fn in impls.items():
        per = sorted(kernels(lambda: fn(q, k, v), 3).items(), key=lambda x: -x[1][0] * x[1][1])
        total = sum(count * us for count, us, _ in (x for _, x in per))
        print(f"video_backends {n} kernels, {total / 1e3:.3f} ms per call in {len(per)} kinds:")
        for kname, (count, us, cfg) in per[:6]:
            print(f"    {count * us / 1e3:8.3f} ms  x{count:g}  {kname[:90]}  {cfg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--only", default="sta_wan,window_cut,sta_wan_raster,window_cut_raster,density,video_backends")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-flex", action="store_true")
    args = ap.parse_args()
    only = set(args.only.split(","))
    torch.manual_seed(0)

    cases = []
    for name, latent, tile, half, rule in (("sta_wan", (18, 48, 80), (6, 8, 8), (1, 1, 1), "shift"),
                                           ("window_cut", (20, 32, 48), (2, 8, 8), (2, 1, 2), "cut")):
        block = math.prod(tile)
        mask = tile_window_mask(latent, tile, half, rule)
        for raster in (False, True):
            cname = name + ("_raster" if raster else "")
            if cname in only:
                cases.append(dict(name=cname, latent=latent, tile=tile, half=half, block=block, mask=mask,
                                  raster=raster, rule=rule))
    if "density" in only:
        rng = np.random.default_rng(0)
        n = 30720 // 128
        for density in (0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
            mask = (rng.random((n, n)) < density).astype(np.uint8)
            mask[np.arange(n), np.arange(n)] = 1  # no empty rows
            cases.append(dict(name=f"density_{density:.2f}", latent=None, tile=None, half=None, block=128,
                              mask=mask, raster=False))

    rows = []
    if "video_backends" in only:
        video_backends(args, rows)
    for c in cases:
        block, mask = c["block"], c["mask"]
        seqlen = mask.shape[0] * block
        density = float(mask.mean())
        q, k, v = (torch.randn(1, seqlen, HEADS, DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        offsets, indices = attnkit.block_sparse_from_mask(mask[None, None], seqlen, seqlen, block, block)
        offsets, indices = torch.from_numpy(offsets).cuda(), torch.from_numpy(indices).cuda()
        perm = raster_to_tile_order(c["latent"], c["tile"]).cuda() if c["raster"] else None
        inv = torch.argsort(perm) if perm is not None else None

        def attnkit_sparse(q, k, v, backend="fa3"):
            return attnkit.attention(q, k, v, backend=backend, block_offsets=offsets, block_indices=indices,
                                     block_q=block, block_k=block)

        impls = {}
        if perm is None:
            impls["attnkit_fa3_sparse"] = attnkit_sparse
            impls["attnkit_fa2_sparse"] = lambda q, k, v: attnkit_sparse(q, k, v, "fa2")  # the sm_80 path
        else:  # raster tokens: gather into tiles, attend, scatter back (torch gathers; timed)
            impls["attnkit_fa3_sparse+reorder"] = lambda q, k, v: attnkit_sparse(
                q[:, perm], k[:, perm], v[:, perm])[:, inv]
            try:
                impls["attnkit_sliding_tile_attn"] = sta_backend_impl(c["latent"], c["tile"], c["half"], c["rule"],
                                                                      seqlen)
            except Exception as e:  # noqa: BLE001 - reported, the rest of the case still runs
                print(f"{c['name']}: sliding_tile_attn did not plan: {type(e).__name__}: {str(e)[:400]}")
        if not args.no_flex:
            impls["flex"] = flex_impl(mask, block, seqlen, None if perm is None else perm.cpu())
        if c["name"] == "sta_wan":  # FastVideo's kernels implement STA's shifted window only
            impls.update(fastvideo_impls(c["latent"], c["half"], q, k, v))
        impls["attnkit_fa3_dense"] = lambda q, k, v: attnkit.attention(q, k, v, backend="fa3")
        impls["torch_cudnn_dense"] = lambda q, k, v: _sdpa_cudnn(q, k, v)

        # Outputs agree with the dense reference restricted to the mask (attnkit vs flex on the same mask).
        ref = None
        outs = warm_up(impls, q, k, v, args.warmup, c["name"])
        impls = {n: f for n, f in impls.items() if n in outs}
        sparse_names = [n for n in outs if "dense" not in n]
        if "flex" in outs:
            ref = outs["flex"].float()
        for n in sparse_names:
            if ref is not None and n != "flex":
                err = ((outs[n].float() - ref).norm() / ref.norm()).item()
                print(f"{c['name']}: {n} rel_l2 vs flex {err:.2e}")
        times = {n: [] for n in impls}
        timer = Timer(torch.device("cuda"))
        for r in range(args.iters):
            names = list(impls)
            names = names[r % len(names):] + names[:r % len(names)]
            for n in names:
                timer.time(lambda: impls[n](q, k, v))
            for n, ms in zip(names, timer.collect()):
                times[n].append(ms)
        dense_flops = 4.0 * HEADS * seqlen * seqlen * DIM
        for n, t in times.items():
            ms = float(np.median(t))
            flops = dense_flops * (1.0 if "dense" in n else density)
            rows.append(dict(case=c["name"], impl=n, seqlen=seqlen, block=block, density=density, ms=ms,
                             effective_tflops=flops / ms / 1e9))
            print(f"{c['name']:22s} {n:28s} density {density:5.3f}  {ms:8.3f} ms  {flops / ms / 1e9:7.1f} TFLOP/s")
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%F %T"),
                   heads=HEADS, head_dim=DIM, rows=rows), open(args.json, "w"), indent=1)


def _sdpa_cudnn(q, k, v):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)


if __name__ == "__main__":
    main()
