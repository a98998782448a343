"""flash_attn.bert_padding on torch: a padded batch and its attention mask to the packed (varlen) rows
that FlashAttention's varlen calls take, and back. attnkit.flash_attn_interface.install() registers this
module as flash_attn.bert_padding, where Hugging Face transformers' flash-attention path imports it from.

    packed, indices, cu_seqlens, max_seqlen, used = unpad_input(x, mask)    # x (batch, seqlen, ...)
    out = flash_attn_varlen_func(q_packed, k_packed, v_packed, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen)
    padded = pad_input(out, indices, batch, seqlen)                          # zeros at the masked rows

Everything is differentiable torch indexing; the arguments are checked before any indexing (AK1102 /
AK1103 / AK1104 for a wrong rank, shape or dtype, AK1108 for indices outside their rows, AK1014 for a
size that is not a non-negative integer).
"""
import math

import torch
import torch.nn.functional as F

import attnkit

__all__ = ["index_first_axis", "index_put_first_axis", "unpad_input", "pad_input"]


def _count(value, name):
    number = attnkit._integer(value, name)
    if number < 0:
        raise attnkit._error("AK1014", name=name, expected="a non-negative integer", value=number,
                             type=type(value).__name__)
    return number


def _indices(indices, rows, name="indices"):
    """`indices` as int64 rows of a first axis of `rows`: each in [0, rows), checked before any indexing
    (on a GPU this reads their range back, as unpad_input's max_seqlen does)."""
    attnkit._shape(indices, 1, name, "(rows,) integer indices")
    if indices.dtype not in (torch.int32, torch.int64):
        raise attnkit._error("AK1104", name=name, dtype=str(indices.dtype).replace("torch.", ""),
                             expected="int32 or int64")
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= rows):
        raise attnkit._error("AK1108", name=name,
                             reason=f"indices from {int(indices.min())} to {int(indices.max())} leave the {rows} rows")
    return indices.long()


def index_first_axis(x, indices):
    """The rows of x (its first axis) at `indices`: x[indices]."""
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        raise attnkit._error("AK1102", name="x", rank=getattr(x, "ndim", 0), expected=">= 1",
                             layout="(rows, ...)")
    return x[_indices(indices, int(x.shape[0]))]


def index_put_first_axis(values, indices, first_axis_dim):
    """A zero tensor of first_axis_dim rows (the rest of values' shape) with values' rows at `indices`."""
    rows = _count(first_axis_dim, "first_axis_dim")
    indices = _indices(indices, rows)
    if not isinstance(values, torch.Tensor) or values.dim() < 1 or values.shape[0] != indices.shape[0]:
        raise attnkit._error("AK1103", name="values", shape=list(getattr(values, "shape", [])),
                             expected=f"({indices.shape[0]}, ...): one row per index")
    shape = (rows, *values.shape[1:])
    if values.device.type == "cpu":  # checked before torch's allocator fails (a bare RuntimeError)
        attnkit._arrays.require_host_bytes(f"the padded output {list(shape)}", values.element_size() * math.prod(shape))
    out = torch.zeros(shape, device=values.device, dtype=values.dtype)
    return out.index_put((indices,), values)  # out of place, so gradients reach `values`


def _mask(mask, name, batch, seqlen):
    shape = attnkit._shape(mask, 2, name, "(batch, seqlen)")
    if shape != (batch, seqlen):
        raise attnkit._error("AK1103", name=name, shape=list(shape),
                             expected=f"({batch}, {seqlen}): the batch and sequence of hidden_states")
    return mask.bool()


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """hidden_states (batch, seqlen, ...), attention_mask (batch, seqlen) with True / 1 at the real tokens ->
    (rows (n, ...), indices (n,) into batch * seqlen, cu_seqlens (batch + 1,) int32, max_seqlen (int),
    seqused (batch,) int32). `unused_mask` marks rows that are kept (allocated) but not attended: they
    count in cu_seqlens and max_seqlen, not in seqused (FlashAttention 2.7's five returns)."""
    if not isinstance(hidden_states, torch.Tensor) or hidden_states.dim() < 2:
        raise attnkit._error("AK1102", name="hidden_states", rank=getattr(hidden_states, "ndim", 0),
                             expected=">= 2", layout="(batch, seqlen, ...)")
    batch, seqlen = int(hidden_states.shape[0]), int(hidden_states.shape[1])
    used = _mask(attention_mask, "attention_mask", batch, seqlen)
    kept = used if unused_mask is None else used | _mask(unused_mask, "unused_mask", batch, seqlen)
    seqlens = kept.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(kept.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    max_seqlen = int(seqlens.max().item()) if batch > 0 else 0
    rows = hidden_states.reshape(batch * seqlen, *hidden_states.shape[2:])[indices]
    return rows, indices, cu_seqlens, max_seqlen, used.sum(dim=-1, dtype=torch.int32)


def pad_input(hidden_states, indices, batch, seqlen):
    """The inverse of unpad_input: rows (n, ...) at `indices` -> (batch, seqlen, ...), zeros elsewhere."""
    batch, seqlen = _count(batch, "batch"), _count(seqlen, "seqlen")
    out = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])
