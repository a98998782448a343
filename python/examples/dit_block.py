"""A small video-DiT block (self-attention over latent tokens + cross-attention
to text tokens) run twice: with PyTorch SDPA, then with attnkit. Prints the
largest difference; exits non-zero if they disagree beyond the dtype's bound.

    python python/examples/dit_block.py [--device cuda] [--dtype bf16]
"""
import argparse
import sys

import torch
import torch.nn.functional as F

import attnkit


def sdpa(q, k, v):
    # SDPA takes [b, h, s, d]; the block keeps [b, s, h, d] like flash-attention.
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)


class DiTBlock(torch.nn.Module):
    def __init__(self, dim=512, heads=8):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.norm1, self.norm2, self.norm3 = (torch.nn.LayerNorm(dim) for _ in range(3))
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.q_cross = torch.nn.Linear(dim, dim)
        self.kv_cross = torch.nn.Linear(dim, 2 * dim)
        self.proj1, self.proj2 = torch.nn.Linear(dim, dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))
        self.attend = sdpa  # swapped for attnkit below

    def split(self, x):
        return x.unflatten(-1, (self.heads, self.head_dim))

    def forward(self, x, text):
        q, k, v = (self.split(t) for t in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        x = x + self.proj1(self.attend(q, k, v).flatten(-2))
        q = self.split(self.q_cross(self.norm2(x)))
        k, v = (self.split(t) for t in self.kv_cross(text).chunk(2, dim=-1))
        x = x + self.proj2(self.attend(q, k, v).flatten(-2))
        return x + self.mlp(self.norm3(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    args = ap.parse_args()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    torch.manual_seed(0)
    block = DiTBlock().to(args.device, dtype).eval()
    latents = torch.randn(2, 4 * 16 * 16, 512, device=args.device, dtype=dtype)  # 4 frames of 16x16 patches
    text = torch.randn(2, 77, 512, device=args.device, dtype=dtype)
    with torch.no_grad():
        expected = block(latents, text)
        block.attend = lambda q, k, v: attnkit.attention(q, k, v)
        got = block(latents, text)
    err = ((got.double() - expected.double()).norm() / expected.double().norm()).item()
    bound = 1e-5 if dtype == torch.float32 else 2e-2
    print(f"DiT block on {args.device} {args.dtype}: attnkit backend {attnkit.last_backend()}, "
          f"relative L2 difference vs SDPA {err:.2e} (bound {bound:.0e})")
    return 0 if err < bound else 1


if __name__ == "__main__":
    sys.exit(main())
