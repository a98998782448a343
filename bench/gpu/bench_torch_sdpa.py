#!/usr/bin/env python3
"""PyTorch SDPA peers on the dense grid of design §6, timed like bench_fa2.

Same shapes (seqlen 512..16k, batch = 16384/seqlen, heads = 2048/head_dim, bf16,
BSHD memory viewed as BHSD, causal and not), CUDA events around each call after
warm-up, median of the timed calls, two rotated random input sets.

  bench_torch_sdpa.py --json torch.json [--backends flash,cudnn] [--dims 64,128,256]
"""
import argparse
import json
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def ints(s):
    return [int(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--backends", default="flash,cudnn")
    ap.add_argument("--dims", type=ints, default=[64, 128, 256])
    ap.add_argument("--seqlens", type=ints, default=[512, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    torch.manual_seed(0)
    dev = torch.device("cuda")
    rows = []
    tokens, width = 16384, 2048
    for name in args.backends.split(","):
        backend = BACKENDS[name]
        for d in args.dims:
            for causal in (False, True):
                for s in args.seqlens:
                    b, h = tokens // s, width // d
                    sets = [
                        [torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16).transpose(1, 2) for _ in range(3)]
                        for _ in range(2)
                    ]
                    total = args.warmup + args.iters
                    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(total)]
                    try:
                        with sdpa_kernel([backend]):
                            for it in range(total):
                                q, k, v = sets[it % 2]
                                ev[it][0].record()
                                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                                ev[it][1].record()
                        torch.cuda.synchronize()
                    except RuntimeError as e:  # backend refuses this shape
                        print(f"skip {name} d{d} s{s} causal={causal}: {str(e).splitlines()[0]}", file=sys.stderr)
                        continue
                    ms = sorted(a.elapsed_time(z) for a, z in ev[args.warmup:])
                    med = ms[len(ms) // 2]
                    flops = 4.0 * b * h * s * s * d / (2.0 if causal else 1.0)
                    tf = flops / (med * 1e9)
                    rows.append(dict(impl=f"torch_{name}", head_dim=d, seqlen=s, batch=b, heads=h, causal=causal,
                                     ms_median=med, ms_min=ms[0], tflops=tf))
                    print(f"torch_{name:6s} d{d:<3d} {'causal' if causal else 'full':6s} s{s:<6d} {med:8.3f} ms {tf:7.1f} TFLOP/s",
                          flush=True)
                    del sets
    info = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                cudnn=torch.backends.cudnn.version(), cuda=torch.version.cuda, results=rows)
    with open(args.json, "w") as f:
        json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
