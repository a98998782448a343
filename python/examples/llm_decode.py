"""A tiny GQA decoder layer generating tokens with a paged KV cache, run twice:
attention by PyTorch SDPA over the gathered cache, then by attnkit directly on
the pages. Prints the largest difference of the final hidden states.

    python python/examples/llm_decode.py [--device cuda] [--steps 32]
"""
import argparse
import sys

import torch
import torch.nn.functional as F

import attnkit

HEADS, KV_HEADS, HEAD_DIM, PAGE = 8, 2, 64, 16
DIM = HEADS * HEAD_DIM


class PagedCache:
    """K/V pages [num_pages, PAGE, KV_HEADS, HEAD_DIM] with a per-sequence block table."""

    def __init__(self, batch, max_len, device, dtype):
        pages_per_seq = (max_len + PAGE - 1) // PAGE
        self.k = torch.zeros(batch * pages_per_seq, PAGE, KV_HEADS, HEAD_DIM, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        # Interleaved page order, so pages of one sequence are not contiguous.
        order = torch.arange(batch * pages_per_seq, device=device).view(pages_per_seq, batch).t()
        self.block_table = order.contiguous().to(torch.int32)
        self.lens = torch.zeros(batch, dtype=torch.int32, device=device)

    def append(self, k, v):  # k, v: [batch, 1, KV_HEADS, HEAD_DIM]
        for b in range(k.shape[0]):
            pos = int(self.lens[b])
            page = int(self.block_table[b, pos // PAGE])
            self.k[page, pos % PAGE] = k[b, 0]
            self.v[page, pos % PAGE] = v[b, 0]
        self.lens += 1

    def gathered(self, b):
        n = int(self.lens[b])
        pages = self.block_table[b].long()
        return (self.k[pages].flatten(0, 1)[:n], self.v[pages].flatten(0, 1)[:n])


def sdpa_decode(q, cache):
    outs = []
    for b in range(q.shape[0]):
        k, v = cache.gathered(b)
        k, v = (t.repeat_interleave(HEADS // KV_HEADS, 1).transpose(0, 1)[None] for t in (k, v))
        outs.append(F.scaled_dot_product_attention(q[b : b + 1].transpose(1, 2), k, v).transpose(1, 2))
    return torch.cat(outs)


def attnkit_decode(q, cache):
    return attnkit.attention_with_kvcache(q, cache.k, cache.v, cache.lens, cache.block_table)


def generate(attend, steps, device, dtype):
    torch.manual_seed(0)
    wq, wk, wv, wo = (torch.randn(DIM, n, device=device, dtype=dtype) / DIM**0.5
                      for n in (DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, DIM))
    x = torch.randn(3, 1, DIM, device=device, dtype=dtype)
    cache = PagedCache(3, steps, device, dtype)
    for _ in range(steps):
        q = (x @ wq).view(3, 1, HEADS, HEAD_DIM)
        cache.append((x @ wk).view(3, 1, KV_HEADS, HEAD_DIM), (x @ wv).view(3, 1, KV_HEADS, HEAD_DIM))
        x = torch.tanh(x + attend(q, cache).flatten(-2) @ wo)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    dtype = torch.float32
    with torch.no_grad():
        expected = generate(sdpa_decode, args.steps, args.device, dtype)
        got = generate(attnkit_decode, args.steps, args.device, dtype)
    err = ((got - expected).norm() / expected.norm()).item()
    print(f"decode {args.steps} steps on {args.device}: attnkit backend {attnkit.last_backend()}, "
          f"relative L2 difference vs SDPA {err:.2e}")
    return 0 if err < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
