"""Which kernels each implementation launches for the same call, with their
launch configuration (grid, block, shared memory, registers) and median time
(torch.profiler, same process, same tensors), plus the libcudnn files this
process has mapped. By default PyTorch's cuDNN SDPA against attnkit's cudnn
backend (where the two differ when the dense-grid bench shows a gap);
`--impls` adds attnkit's fa3 and FlashAttention-3's kernel (fa3_fwd, when
installed), to read how a faster peer splits the work (tile shape, grid).

  PYTHONPATH=build/python python3 bench/gpu/cudnn_kernels.py [--shapes 128:16384:1:16:causal,...]
      [--impls torch_cudnn,attnkit_cudnn,attnkit_fa3,fa3_fwd]
"""
import argparse
import json
import tempfile
import time
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import attnkit


def host_us(fn, iters):
    """Host microseconds per call (no synchronisation inside; the launch queue absorbs the kernels):
    when this is above the kernel's time, back-to-back calls leave the GPU idle between kernels."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6 / iters


def kernels(fn, iters):
    """name -> (launches per call, median us, launch configuration) of every kernel fn launches."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    per, launch = defaultdict(list), {}
    for e in trace.get("traceEvents", []):
        if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy"):
            per[e["name"]].append(e.get("dur", 0.0))
            a = e.get("args", {})
            launch[e["name"]] = " ".join(f"{k}={a[k]}" for k in ("grid", "block", "shared memory", "registers per thread")
                                         if k in a)
    return {n: (len(t) / iters, sorted(t)[len(t) // 2], launch[n]) for n, t in per.items()}


def torch_cudnn(q, k, v, causal):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=causal).transpose(1, 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="128:16384:1:16:full,256:16384:1:8:full,64:512:32:32:causal,128:32760:1:24:full")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--impls", default="torch_cudnn,attnkit_cudnn",
                    help="comma list of torch_cudnn, attnkit_cudnn, attnkit_fa3, fa3_fwd (the first is the reference)")
    args = ap.parse_args()
    for spec in args.shapes.split(","):
        d, s, b, h, mask = spec.split(":")
        d, s, b, h, causal = int(d), int(s), int(b), int(h), mask == "causal"
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))

        impls = {
            "torch_cudnn": lambda: torch_cudnn(q, k, v, causal),
            "attnkit_cudnn": lambda: attnkit.attention(q, k, v, causal=causal, backend="cudnn"),
            "attnkit_fa3": lambda: attnkit.attention(q, k, v, causal=causal, backend="fa3"),
        }
        try:
            from fa3_fwd_interface import flash_attn_func  # BSHD in and out, bottom-right causal
            impls["fa3_fwd"] = lambda: flash_attn_func(q, k, v, causal=causal)
        except ImportError:
            pass
        asked = args.impls.split(",")
        chosen = [n for n in asked if n in impls]
        missing = [n for n in asked if n not in impls]
        if missing:
            print(f"  not available here: {', '.join(missing)}")
        if not chosen:
            continue
        outs = {n: impls[n]() for n in chosen}
        ref = outs[chosen[0]].float()
        diffs = ", ".join(f"{n} {((outs[n].float() - ref).norm() / ref.norm()).item():.2e}" for n in chosen[1:])
        print(f"== d{d} s{s} b{b} h{h} {mask}: rel_l2 against {chosen[0]}: {diffs or '-'}; output strides "
              + ", ".join(f"{n} {outs[n].stride()}" for n in chosen))
        del outs
        # Twice each, alternated: a difference that follows the order is the clock, not the kernel.
        for name in chosen * 2:
            fn = impls[name]
            print(f"  {name:14s} host {host_us(fn, args.iters):9.1f} us per call")
            for kname, (count, us, cfg) in sorted(kernels(fn, args.iters).items(), key=lambda x: -x[1][1]):
                print(f"  {name:14s} {us:9.1f} us  x{count:.0f}  {kname[:160]}  {cfg}")
    maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libcudnn" in line})
    print("libcudnn mapped:", *maps, sep="\n  ")


if __name__ == "__main__":
    main()
