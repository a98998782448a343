"""A tiny GQA decoder LLM on attnkit: a batch of prompts is prefilled (packed
varlen, causal) and then decoded token by token over a paged KV cache, every
attention call going through a Deployment of the shipped `llama` profile
(decoder.prefill and decoder.decode layers). The same model with PyTorch SDPA
over the gathered cache is the reference; the script prints each layer's
Decision and the relative L2 difference of the final hidden states.

    python python/examples/llm_decode.py [--device cuda] [--steps 32]
"""
import argparse
import sys

import torch
import torch.nn.functional as F

import attnkit
import attnkit.torch

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

    def append(self, b, k, v):  # k, v: [n, KV_HEADS, HEAD_DIM] for sequence b
        for row in range(k.shape[0]):
            pos = int(self.lens[b]) + row
            page = int(self.block_table[b, pos // PAGE])
            self.k[page, pos % PAGE], self.v[page, pos % PAGE] = k[row], v[row]
        self.lens[b] += k.shape[0]

    def gathered(self, b):
        n, pages = int(self.lens[b]), self.block_table[b].long()
        return self.k[pages].flatten(0, 1)[:n], self.v[pages].flatten(0, 1)[:n]


def sdpa(q, k, v, causal):
    """q [sq, h, d], k/v [sk, hkv, d] of one sequence; causal with sq == sk."""
    k, v = (t.repeat_interleave(HEADS // KV_HEADS, 1) for t in (k, v))
    return F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                          is_causal=causal).transpose(0, 1)


class SdpaAttention:
    """The reference: prefill per sequence, decode over the cache gathered into a dense tensor."""

    def prefill(self, q, k, v, cu):
        return torch.cat([sdpa(q[a:b], k[a:b], v[a:b], True) for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())])

    def decode(self, q, cache):  # q [batch, 1, h, d]
        return torch.stack([sdpa(q[b], *cache.gathered(b), False) for b in range(q.shape[0])])


class DeploymentAttention:
    """Layer i of the deployment: decoder.prefill on the packed prompts, decoder.decode on the pages."""

    def __init__(self, dep, i):
        self.prefill_attn = attnkit.torch.Attention(dep, "decoder", "prefill", i)  # causal: the profile's mask
        self.decode_attn = attnkit.torch.Attention(dep, "decoder", "decode", i)

    def prefill(self, q, k, v, cu):
        longest = int((cu[1:] - cu[:-1]).max())
        return self.prefill_attn(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest)

    def decode(self, q, cache):
        return self.decode_attn(q, cache.k, cache.v, cache_seqlens=cache.lens, block_table=cache.block_table)


def generate(attention, prompt_lens, steps, device, dtype, layers=2):
    """Prefills the prompts, then decodes `steps` tokens; returns the last hidden states."""
    g = torch.Generator(device="cpu").manual_seed(0)
    weights = [[(torch.randn(DIM, n, generator=g) / DIM**0.5).to(device, dtype)
                for n in (DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, DIM)] for _ in range(layers)]
    batch = len(prompt_lens)
    caches = [PagedCache(batch, max(prompt_lens) + steps, device, dtype) for _ in range(layers)]
    cu = torch.tensor([0] + prompt_lens, device=device).cumsum(0).to(torch.int32)
    x = torch.randn(int(cu[-1]), DIM, generator=g).to(device, dtype)  # the prompts' embeddings, packed

    def layer(i, x, attend):
        wq, wk, wv, wo = weights[i]
        q, k, v = (x @ wq).unflatten(-1, (HEADS, HEAD_DIM)), *((x @ w).unflatten(-1, (KV_HEADS, HEAD_DIM)) for w in (wk, wv))
        return torch.tanh(x + attend(q, k, v).flatten(-2) @ wo)

    def prefill_attend(i):
        def attend(q, k, v):
            for b in range(batch):
                caches[i].append(b, k[cu[b]:cu[b + 1]], v[cu[b]:cu[b + 1]])
            return attention[i].prefill(q, k, v, cu)
        return attend

    def decode_attend(i):
        def attend(q, k, v):  # one token per sequence: q [batch, 1, h, d]
            for b in range(batch):
                caches[i].append(b, k[b], v[b])
            return attention[i].decode(q, caches[i])
        return attend

    for i in range(layers):
        x = layer(i, x, prefill_attend(i))
    x = x[(cu[1:] - 1).long()][:, None]  # each sequence's last position starts decoding
    for _ in range(steps):
        for i in range(layers):
            x = layer(i, x, decode_attend(i))
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    dtype = torch.float32
    dep = attnkit.Deployment(model="llama", platform=args.device, dtype="fp32")
    layers = [DeploymentAttention(dep, i) for i in range(2)]
    for layer in dep.layers():
        print(f"  {layer}")
    prompt_lens = [5, 23, 12]
    with torch.no_grad():
        expected = generate([SdpaAttention()] * 2, prompt_lens, args.steps, args.device, dtype)
        got = generate(layers, prompt_lens, args.steps, args.device, dtype)
    err = ((got - expected).norm() / expected.norm()).item()
    print(f"prefill {prompt_lens} + decode {args.steps} steps on {args.device}: attnkit backend "
          f"{attnkit.last_backend()}, relative L2 difference vs SDPA {err:.2e}")
    return 0 if err < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
