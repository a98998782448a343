"""Which cuDNN kernels PyTorch's cuDNN SDPA and attnkit's cudnn backend launch
for the same call, and how long each takes (torch.profiler, same process,
same tensors), plus the libcudnn files this process has mapped. Used to find
where the two differ when the dense-grid bench shows a gap.

  PYTHONPATH=build/python python3 bench/gpu/cudnn_kernels.py [--shapes 128:16384:1:16:causal,...]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="128:16384:1:16:full,256:16384:1:8:full,64:512:32:32:causal,128:32760:1:24:full")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    for spec in args.shapes.split(","):
        d, s, b, h, mask = spec.split(":")
        d, s, b, h, causal = int(d), int(s), int(b), int(h), mask == "causal"
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))

        def torch_cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=causal).transpose(1, 2)

        def attnkit_cudnn():
            return attnkit.attention(q, k, v, causal=causal, backend="cudnn")

        diff = (torch_cudnn().float() - attnkit_cudnn().float()).norm() / torch_cudnn().float().norm()
        print(f"== d{d} s{s} b{b} h{h} {mask}: rel_l2(torch, attnkit) {diff.item():.2e}, output strides "
              f"torch {torch_cudnn().stride()} attnkit {attnkit_cudnn().stride()}")
        # Twice each, alternated: a difference that follows the order is the clock, not the kernel.
        for name, fn in (("torch cuDNN", torch_cudnn), ("attnkit cudnn", attnkit_cudnn)) * 2:
            print(f"  {name:14s} host {host_us(fn, args.iters):9.1f} us per call")
            for kname, (count, us, cfg) in sorted(kernels(fn, args.iters).items(), key=lambda x: -x[1][1]):
                print(f"  {name:14s} {us:9.1f} us  x{count:.0f}  {kname[:100]}  {cfg}")
    maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libcudnn" in line})
    print("libcudnn mapped:", *maps, sep="\n  ")


if __name__ == "__main__":
    main()
