"""A small video DiT on attnkit: a text encoder, transformer blocks with self-
attention over latent tokens and cross-attention to the text, and a short
denoising loop, every attention call going through a Deployment of the shipped
`wan` profile. The deployment has an engine default and a component override
(text_encoder=sdpa); part-way through the loop each denoising step becomes a
request that switches the transformer to another backend (`sdpa`). The same
model with PyTorch SDPA is the reference: the script prints each layer's
Decision, the backend of every step, the relative L2 difference of the final
latents, and exits non-zero beyond the dtype's bound.

    python python/examples/dit_block.py [--device cuda] [--dtype bf16] [--steps 6] [--switch-at 3]
"""
import argparse
import contextlib
import sys

import torch
import torch.nn.functional as F

import attnkit
import attnkit.torch

DIM, HEADS = 256, 4
HEAD_DIM = DIM // HEADS


class SDPA(torch.nn.Module):
    """The reference attention: PyTorch SDPA on the [b, s, h, d] layout the blocks use."""

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)


def heads(x):
    return x.unflatten(-1, (HEADS, HEAD_DIM))


class EncoderLayer(torch.nn.Module):
    def __init__(self, attend):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(DIM), torch.nn.LayerNorm(DIM)
        self.qkv, self.proj = torch.nn.Linear(DIM, 3 * DIM), torch.nn.Linear(DIM, DIM)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 2 * DIM), torch.nn.GELU(), torch.nn.Linear(2 * DIM, DIM))
        self.attend = attend

    def forward(self, x):
        q, k, v = (heads(t) for t in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        x = x + self.proj(self.attend(q, k, v).flatten(-2))
        return x + self.mlp(self.norm2(x))


class DiTBlock(torch.nn.Module):
    """Self-attention over the latents, cross-attention to the text, an MLP; the
    timestep shifts and scales the normalised input (adaLN)."""

    def __init__(self, self_attend, cross_attend):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = (torch.nn.LayerNorm(DIM, elementwise_affine=False) for _ in range(3))
        self.ada = torch.nn.Linear(DIM, 2 * DIM)
        self.qkv, self.proj1 = torch.nn.Linear(DIM, 3 * DIM), torch.nn.Linear(DIM, DIM)
        self.q_cross, self.kv_cross, self.proj2 = (torch.nn.Linear(DIM, n) for n in (DIM, 2 * DIM, DIM))
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 4 * DIM), torch.nn.GELU(), torch.nn.Linear(4 * DIM, DIM))
        self.self_attend, self.cross_attend = self_attend, cross_attend

    def forward(self, x, t_emb, text):
        shift, scale = self.ada(t_emb)[:, None].chunk(2, dim=-1)
        q, k, v = (heads(a) for a in self.qkv(self.norm1(x) * (1 + scale) + shift).chunk(3, dim=-1))
        x = x + self.proj1(self.self_attend(q, k, v).flatten(-2))
        k, v = (heads(a) for a in self.kv_cross(text).chunk(2, dim=-1))
        x = x + self.proj2(self.cross_attend(heads(self.q_cross(self.norm2(x))), k, v).flatten(-2))
        return x + self.mlp(self.norm3(x))


class TinyVideoDiT(torch.nn.Module):
    """`attention(component, role, index)` makes each attention module: SDPA, or a
    Deployment layer (attnkit.torch.Attention). The two models share weights."""

    def __init__(self, attention, blocks=2, encoder_layers=2, vocab=1000):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, DIM)
        self.encoder = torch.nn.ModuleList(EncoderLayer(attention("text_encoder", "self", i))
                                           for i in range(encoder_layers))
        self.time = torch.nn.Sequential(torch.nn.Linear(1, DIM), torch.nn.SiLU(), torch.nn.Linear(DIM, DIM))
        self.blocks = torch.nn.ModuleList(DiTBlock(attention("transformer", "self", i),
                                                   attention("transformer", "cross", i)) for i in range(blocks))
        self.out = torch.nn.Linear(DIM, DIM)

    def encode(self, tokens):
        x = self.embed(tokens)
        for layer in self.encoder:
            x = layer(x)
        return x

    def velocity(self, x, t, text):
        t_emb = self.time(t.reshape(-1, 1).to(x.dtype))
        for block in self.blocks:
            x = block(x, t_emb, text)
        return self.out(x)


def denoise(model, noise, tokens, steps, request=lambda step: contextlib.nullcontext()):
    """Euler steps of a flow-matching sampler from t=1 to t=0; each step runs inside
    request(step) (for the Deployment: one request per denoising step)."""
    text = model.encode(tokens)
    x = noise
    for i in range(steps):
        t = torch.full((x.shape[0],), 1.0 - i / steps, device=x.device)
        with request(i):
            x = x - model.velocity(x, t, text) / steps
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, choices=["fp32", "bf16", "fp16"],
                    help="default: bf16 on a GPU (what the flash kernels run), fp32 on the CPU")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--switch-at", type=int, default=3, help="the first step that requests --request-backend")
    ap.add_argument("--attention-backend", default=None,
                    help="engine default (default: reference on the CPU, fa on a GPU)")
    ap.add_argument("--request-backend", default="sdpa")
    args = ap.parse_args()
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    engine_default = args.attention_backend or ("fa" if args.device == "cuda" else "reference")

    # The deployment: checked like `attnkit check --model wan --attention-backend ... --component-attention-backends ...`.
    dep = attnkit.Deployment(model="wan", platform=args.device, dtype=args.dtype, attention_backend=engine_default,
                             component_attention_backends="text_encoder=sdpa")
    torch.manual_seed(0)
    reference = TinyVideoDiT(lambda component, role, index: SDPA()).to(args.device, dtype).eval()
    model = TinyVideoDiT(lambda component, role, index: attnkit.torch.Attention(dep, component, role, index))
    model.load_state_dict(reference.state_dict())
    model.to(args.device, dtype).eval()
    for layer in dep.layers():
        print(f"  {layer}")
    for d in dep.audit():  # flag requests that controlled none of the layers the model built
        print(f"  audit {d['code']}: {d['message']}")

    noise = torch.randn(2, 4 * 8 * 8, DIM, device=args.device, dtype=dtype)  # 4 frames of 8x8 latent patches
    tokens = torch.randint(0, 1000, (2, 32), device=args.device)
    dit = dep.layer("transformer", "self", 0)
    ran = []

    @contextlib.contextmanager
    def request(step):
        override = args.request_backend if step >= args.switch_at else None
        with dep.request(attention_backend_override=override, step=step):
            ran.append(dit.backend)
            yield

    with torch.no_grad():
        expected = denoise(reference, noise, tokens, args.steps)
        got = denoise(model, noise, tokens, args.steps, request)
    err = ((got.double() - expected.double()).norm() / expected.double().norm()).item()
    bound = 1e-5 if dtype == torch.float32 else 2e-2
    print(f"transformer backend per step: {' '.join(ran)}; text_encoder: {dep.layer('text_encoder', 'self').backend}")
    print(f"DiT, {args.steps} denoising steps on {args.device} {args.dtype}: relative L2 difference vs SDPA "
          f"{err:.2e} (bound {bound:.0e})")
    return 0 if err < bound else 1


if __name__ == "__main__":
    sys.exit(main())
