"""flash_attn.layers.rotary on torch: rotary position embedding as FlashAttention's apply_rotary_emb
computes it. attnkit.flash_attn_interface.install() registers this module as flash_attn.layers.rotary.

    x_rot = apply_rotary_emb(x, cos, sin, interleaved=False, seqlen_offsets=0)   # x (batch, seqlen, heads, dim)
    x_rot = apply_rotary_emb(x, cos, sin, cu_seqlens=cu, max_seqlen=m)           # x (total, heads, dim)

cos / sin are (seqlen_ro, rotary_dim / 2); the first rotary_dim channels of each head rotate by the angle
of the token's position (its index in its sequence plus seqlen_offsets), the rest pass through. Pairs are
(2i, 2i + 1) when interleaved (GPT-J), (i, i + rotary_dim / 2) otherwise (GPT-NeoX). Computed in fp32 and
rounded to x's dtype; positions past the table rotate by 0, as FlashAttention's kernel does. Differentiable
(plain torch), in place when asked.
"""
import torch

import attnkit
from attnkit.flash_attn_interface import _refuse, _rotary

__all__ = ["apply_rotary_emb", "apply_rotary_emb_func", "apply_rotary_emb_qkv_", "apply_rotary_emb_kv_"]


def _real(x, name):
    """x holds real floating-point values, or AK1104: an integer x would be rotated and truncated, a
    complex table lose its imaginary part, silently."""
    if not x.dtype.is_floating_point:
        raise attnkit._error("AK1104", name=name, dtype=str(x.dtype).replace("torch.", ""),
                             expected="a floating-point dtype (float32, float16, bfloat16)")


def _tables(cos, sin, head_dim, function):
    seqlen_ro, half = attnkit._shape(cos, 2, "cos", "(seqlen_ro, rotary_dim / 2)")
    _real(cos, "cos")
    if not isinstance(sin, torch.Tensor) or tuple(sin.shape) != (seqlen_ro, half):
        raise attnkit._error("AK1103", name="sin", shape=list(getattr(sin, "shape", [])),
                             expected=f"({seqlen_ro}, {half}): the shape of cos")
    _real(sin, "sin")
    if seqlen_ro < 1 or not 1 <= 2 * half <= head_dim:
        raise _refuse(function, f"rotary tables of {list(cos.shape)}",
                      f"(seqlen_ro >= 1, rotary_dim / 2) with 0 < rotary_dim <= head dim {head_dim}")


def _offsets(seqlen_offsets, batch, device):
    """seqlen_offsets (an int, or one per sequence) as a (batch, 1) int64 tensor."""
    if isinstance(seqlen_offsets, torch.Tensor):
        attnkit._shape(seqlen_offsets, 1, "seqlen_offsets", "(batch,)")
        if seqlen_offsets.shape[0] != batch or seqlen_offsets.dtype not in (torch.int32, torch.int64):
            raise attnkit._error("AK1103", name="seqlen_offsets", shape=list(seqlen_offsets.shape),
                                 expected=f"({batch},) int32 / int64, or an int")
        return seqlen_offsets.to(device=device, dtype=torch.int64).reshape(batch, 1)
    return torch.full((batch, 1), attnkit._integer(seqlen_offsets, "seqlen_offsets"), dtype=torch.int64, device=device)


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    """x (batch, seqlen, heads, dim), or (total, heads, dim) with cu_seqlens (batch + 1,) -> x rotated."""
    function = "apply_rotary_emb"
    rank = 3 if cu_seqlens is not None else 4
    shape = attnkit._shape(x, rank, "x", "(total, heads, dim) with cu_seqlens" if rank == 3
                           else "(batch, seqlen, heads, dim)")
    _real(x, "x")
    _tables(cos, sin, shape[-1], function)
    interleaved, inplace = attnkit._flag(interleaved, "interleaved"), attnkit._flag(inplace, "inplace")
    if cu_seqlens is None:
        batch, seqlen = shape[0], shape[1]
        positions = _offsets(seqlen_offsets, batch, x.device) + torch.arange(seqlen, device=x.device)
        rotated = _rotary(x, cos, sin, positions, interleaved)
    else:
        attnkit._shape(cu_seqlens, 1, "cu_seqlens", "(batch + 1,)")
        if cu_seqlens.shape[0] < 2:
            raise attnkit._error("AK1103", name="cu_seqlens", shape=list(cu_seqlens.shape),
                                 expected="(batch + 1,) with batch >= 1")
        # Host offsets are checked; CUDA ones are not read back (no synchronisation): a row past
        # their end is taken as part of the last sequence.
        host = cu_seqlens.device.type == "cpu"
        cu = cu_seqlens.to(device=x.device, dtype=torch.int64)
        if host and (int(cu[0]) != 0 or int(cu[-1]) != shape[0] or bool((cu[1:] < cu[:-1]).any())):
            raise attnkit._error("AK1108", name="cu_seqlens",
                                 reason=f"it must start at 0, never decrease and end at x's {shape[0]} rows")
        token = torch.arange(shape[0], device=x.device)
        sequence = torch.searchsorted(cu[1:], token, right=True).clamp(max=cu.shape[0] - 2)  # each row's
        start = _offsets(seqlen_offsets, cu.shape[0] - 1, x.device)[:, 0]
        positions = (token - cu[sequence] + start[sequence])[None, :]
        rotated = _rotary(x[None], cos, sin, positions, interleaved)[0]
    if inplace:
        x.copy_(rotated)
        return x
    return rotated


apply_rotary_emb_func = apply_rotary_emb  # FlashAttention's other name for it


def apply_rotary_emb_qkv_(qkv, cos, sin, cos_k=None, sin_k=None, interleaved=False, seqlen_offsets=0,
                          num_heads_q=None):
    """qkv (batch, seqlen, 3, heads, dim), or (batch, seqlen, heads_q + 2 * heads_kv, dim) with num_heads_q:
    q and k rotated in place (k by cos_k / sin_k when given); returns qkv."""
    attnkit._require_array(qkv, "qkv")
    if qkv.dim() == 5:
        if qkv.shape[2] != 3:  # FlashAttention asserts it; (.., 2, ..) would rotate v as k
            raise attnkit._error("AK1103", name="qkv", shape=list(qkv.shape), expected="(batch, seqlen, 3, heads, dim)")
        q, k = qkv[:, :, 0], qkv[:, :, 1]
    elif num_heads_q is not None and qkv.dim() == 4:
        heads_q = attnkit._integer(num_heads_q, "num_heads_q")
        heads_kv = (qkv.shape[2] - heads_q) // 2
        if not 0 < heads_q < qkv.shape[2] or heads_q + 2 * heads_kv != qkv.shape[2]:
            raise attnkit._error("AK1103", name="qkv", shape=list(qkv.shape),
                                 expected=f"(batch, seqlen, num_heads_q + 2 * heads_kv, dim) with num_heads_q={heads_q}")
        q, k = qkv[:, :, :heads_q], qkv[:, :, heads_q:heads_q + heads_kv]
    else:
        raise attnkit._error("AK1102", name="qkv", rank=qkv.dim(), expected="5 (or 4 with num_heads_q)",
                             layout="(batch, seqlen, 3, heads, dim)")
    apply_rotary_emb(q, cos, sin, interleaved, True, seqlen_offsets)
    apply_rotary_emb(k, cos if cos_k is None else cos_k, sin if sin_k is None else sin_k, interleaved, True,
                     seqlen_offsets)
    return qkv


def apply_rotary_emb_kv_(kv, cos, sin, interleaved=False, seqlen_offsets=0):
    """kv (batch, seqlen, 2, heads, dim): k rotated in place; returns kv."""
    if attnkit._shape(kv, 5, "kv", "(batch, seqlen, 2, heads, dim)")[2] != 2:
        raise attnkit._error("AK1103", name="kv", shape=list(kv.shape), expected="(batch, seqlen, 2, heads, dim)")
    apply_rotary_emb(kv[:, :, 0], cos, sin, interleaved, True, seqlen_offsets)
    return kv
