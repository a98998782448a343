"""attnkit: attention backend selection, validation and kernels.

    import attnkit
    out = attnkit.attention(q, k, v, causal=True)          # q, k, v: [batch, seq, heads, dim]
    out, lse = attnkit.attention(q, k, v, return_lse=True)

    dep = attnkit.Deployment(model="wan", platform="cpu")  # the selection of `attnkit check`, run
    out = dep.layer("transformer", "self", 0)(q, k, v)

Arrays may be numpy, torch or cupy (anything that speaks DLPack); the result
comes back in the caller's framework, on the caller's device and stream.
Every refusal raises attnkit.AttnkitError with the catalogued code and fixes.
"""
import contextlib
import contextvars
import sys

from . import _arrays
from ._attnkit import backends, explain
from ._attnkit import block_sparse_dense_mask as _block_sparse_dense_mask
from ._attnkit import block_sparse_from_mask as _block_sparse_from_mask
from ._attnkit import check as _check
from ._attnkit import global_force as _global_force
from ._attnkit import set_global_force as _set_global_force
from ._attnkit import make_problem as _make_problem
from ._attnkit import plan as _plan
from ._errors import AttnkitError
from .deployment import Deployment, Layer, engine_args as _engine_args

__all__ = ["attention", "attention_varlen", "attention_with_kvcache", "scaled_dot_product_attention", "force_backend",
           "backends", "explain", "check", "select", "AttnkitError", "last_backend", "Deployment", "Layer",
           "block_sparse_from_mask", "block_sparse_dense_mask"]

_plans = {}
_last_backend = contextvars.ContextVar("attnkit_last_backend", default=None)


@contextlib.contextmanager
def force_backend(name):
    """Within the block, calls that do not name a backend use `name` (the process-wide
    global-force level of the selection order; an explicit backend= still wins)."""
    previous = _global_force()
    _set_global_force(name)
    try:
        yield
    finally:
        _set_global_force(previous)


def check(args):
    """Validates a deployment exactly like `attnkit check ARGS...` (engine flags as a list
    of strings). Returns {"ok", "platform", "selections", "diagnostics"}; never touches a GPU."""
    return _check([str(a) for a in args])


def select(*, model, platform="", **flags):
    """The Decision for every attention layer of `model` on `platform`, as a list of dicts.
    Keyword flags use the engine names with underscores (attention_backend="fa",
    component_attention_backends="text_encoder=sdpa", ring_degree=2, enable_torch_compile=True).
    Raises AttnkitError when the deployment is invalid."""
    result = check(_engine_args(model, platform, flags))
    if not result["ok"]:
        raise AttnkitError(result["diagnostics"])
    return result["selections"]


def last_backend():
    """The backend that ran the most recent attnkit call in this context."""
    return _last_backend.get()


def _register_torch_ops():
    """Registers the torch.ops.attnkit custom ops once torch is loaded."""
    if "attnkit.torch_ops" not in sys.modules:
        from . import torch_ops  # noqa: F401


def __getattr__(name):
    # attnkit.torch (Attention, an nn.Module on a Deployment layer) loads torch: only when asked for.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")


if "torch" in sys.modules:
    _register_torch_ops()


def _error(code, message, solutions):
    return AttnkitError([{"code": code, "severity": "error", "message": message, "solutions": solutions}])


_LAYOUT_HINTS = {
    "bshd": "flash-attention layout: q, k, v are [batch, seqlen, heads, head_dim]",
    "thd": "packed layout: q, k, v are [total_tokens, heads, head_dim]",
    "bhsd": "SDPA layout: query, key, value are [batch, heads, seqlen, head_dim]",
    "cu_seqlens": "cu_seqlens_q / cu_seqlens_k are int32 [batch + 1] prefix sums",
    "block_table": "block_table is int32 [batch, max_pages]",
}


def _require_array(x, name):
    if x is None:
        raise _error("AK1101", f"tensor '{name}' is required: got None", [f"pass {name} as a numpy, torch or cupy array"])
    if not (hasattr(x, "__dlpack__") and hasattr(x, "shape") and hasattr(x, "dtype")):
        raise _error("AK1112", f"'{name}' is a {type(x).__name__}, not an array",
                     ["pass a numpy, torch or cupy array (anything with __dlpack__); convert lists with numpy.asarray"])


def _options(window_size, softcap, softmax_scale):
    """(left, right, softcap, scale) as numbers, or the catalogued refusal of a value that is not one."""
    try:
        left, right = (-1, -1) if window_size is None else (int(window_size[0]), int(window_size[1]))
        if len(window_size or ()) not in (0, 2):
            raise ValueError
    except (TypeError, ValueError, IndexError):
        raise _error("AK1004", f"window_size={window_size!r} is not a pair of integers",
                     ["pass window_size=(left, right), with -1 for an unbounded side"]) from None
    try:
        softcap = float(softcap)
    except (TypeError, ValueError):
        raise _error("AK1005", f"softcap={softcap!r} is not a number", ["pass 0.0 (off) or a positive float"]) from None
    try:
        scale = None if softmax_scale is None else float(softmax_scale)
    except (TypeError, ValueError):
        raise _error("AK1006", f"softmax_scale={softmax_scale!r} is not a number",
                     ["pass None (1/sqrt(head_dim)) or a positive float"]) from None
    return left, right, softcap, scale


def _output_dtype(dtype):
    """The output's attnkit dtype for inputs of `dtype`: the same 16-bit type, else fp32."""
    return dtype if dtype in ("fp32", "fp16") else "bf16"


def _shape(x, rank, name, layout):
    _require_array(x, name)
    if len(x.shape) != rank:
        raise _error("AK1102", f"tensor '{name}' has rank {len(x.shape)}, expected {rank}", [_LAYOUT_HINTS[layout]])
    return tuple(int(s) for s in x.shape)


def block_sparse_from_mask(block_mask, seqlen_q, seqlen_k, block_q=128, block_k=128):
    """Block-sparse lists from a dense uint8 block mask [lists_batch, lists_heads, ceil(seqlen_q / block_q),
    ceil(seqlen_k / block_k)] on the host (non-zero: the query block attends to the key block).
    lists_batch is 1 (shared by the sequences) or batch, lists_heads 1 or heads_q. Returns the int32
    numpy arrays (block_offsets [rows + 1], block_indices [nnz]) that attention() takes."""
    import numpy
    mask = block_mask.cpu() if _arrays.framework(block_mask) == "torch" else block_mask
    offsets, indices = _block_sparse_from_mask(mask, int(seqlen_q), int(seqlen_k), int(block_q), int(block_k))
    return numpy.asarray(offsets, dtype=numpy.int32), numpy.asarray(indices, dtype=numpy.int32)


def block_sparse_dense_mask(block_offsets, block_indices, block_layout, seqlen_q, seqlen_k, block_q=128,
                            block_k=128):
    """The dense uint8 block mask [lists_batch, lists_heads, q blocks, k blocks] of host lists
    (block_layout = (lists_batch, lists_heads)): the inverse of block_sparse_from_mask."""
    import numpy
    lists_batch, lists_heads = (int(x) for x in block_layout)
    flat = _block_sparse_dense_mask(block_offsets, block_indices, lists_batch, lists_heads, int(seqlen_q),
                                    int(seqlen_k), int(block_q), int(block_k))
    nq, nk = -(-int(seqlen_q) // int(block_q)), -(-int(seqlen_k) // int(block_k))
    return numpy.asarray(flat, dtype=numpy.uint8).reshape(lists_batch, lists_heads, nq, nk)


def _block_sparse(q, block_offsets, block_indices, block_q, block_k, block_layout, block_mask, *, batch, heads_q,
                  seqlen_q, seqlen_k):
    """(block_sparse problem tuple, offsets, indices) of a call, or (None, None, None) when dense.
    block_layout (lists_batch, lists_heads) defaults to what the number of offsets implies."""
    if block_mask is not None:
        if block_offsets is not None or block_indices is not None:
            raise _error("AK1115", "block-sparse lists are invalid: give block_mask or block_offsets / block_indices, "
                         "not both", ["pass the lists alone, or the dense block_mask alone"])
        _require_array(block_mask, "block_mask")
        block_layout = (int(block_mask.shape[0]), int(block_mask.shape[1])) if len(block_mask.shape) == 4 else None
        offsets, indices = block_sparse_from_mask(block_mask, seqlen_q, seqlen_k, block_q, block_k)
        block_offsets, block_indices = _arrays.like(q, offsets), _arrays.like(q, indices)
    if block_offsets is None and block_indices is None:
        return None, None, None
    _require_array(block_offsets, "block_offsets")
    _require_array(block_indices, "block_indices")
    if block_layout is None:
        rows = int(block_offsets.shape[0]) - 1 if len(block_offsets.shape) == 1 else -1
        q_blocks = max(1, -(-seqlen_q // int(block_q)))
        fits = sorted({(b, h) for b in {1, batch} for h in {1, heads_q} if b * h * q_blocks == rows})
        if len(fits) != 1:
            candidates = sorted({(b, h) for b in {1, batch} for h in {1, heads_q}})
            expected = (" or ".join(f"({b}, {h})" for b, h in fits) + " given as block_layout: both fit" if fits else
                        " or ".join(f"[{b * h * q_blocks + 1}] (block_layout=({b}, {h}))" for b, h in candidates))
            raise _error("AK1103", f"tensor 'block_offsets' has shape [{rows + 1}], expected {expected}",
                         ["pass block_layout=(lists_batch, lists_heads): (1, 1) shared by every sequence and head, "
                          "(batch, heads_q) one list set per sequence and per head",
                          f"block_offsets has (lists_batch * lists_heads * {q_blocks} query blocks) + 1 entries"])
        block_layout = fits[0]
    return (int(block_q), int(block_k), int(block_layout[0]), int(block_layout[1])), block_offsets, block_indices


def _run(layout, q, k, v, *, batch, seqlen_q, seqlen_k, heads_q, heads_kv, out_shape, lse_shape, causal,
         window_size, softcap, softmax_scale, sinks, return_lse, backend, page_size=None,
         cu_seqlens_q=None, cu_seqlens_k=None, block_table=None, seqlens_k=None, out=None, layer=None,
         block_sparse=None, block_offsets=None, block_indices=None):
    """Plans (once per call shape) and runs one call: with the selection for one call, or,
    for a Deployment `layer`, with the plan of the layer's decision in force."""
    for name, x in (("sinks", sinks), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                    ("block_table", block_table), ("cache_seqlens", seqlens_k)):
        if x is not None:  # q, k, v were checked by the caller's _shape
            _require_array(x, name)
    if _arrays.framework(q) == "torch":
        _register_torch_ops()
    dtype = _arrays.dtype_name(q)
    device = _arrays.device_kind(q)
    requested = backend
    left, right, softcap, softmax_scale = _options(window_size, softcap, softmax_scale)
    head_dim_qk, head_dim_v = int(q.shape[-1]), int(v.shape[-1])
    key = (layout, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim_qk, head_dim_v, dtype, bool(causal),
           left, right, softcap, softmax_scale, sinks is not None, bool(return_lse), page_size, block_sparse,
           requested, _global_force() if requested == "auto" else "", device)
    plans = _plans if layer is None else layer._calls
    plan = plans.get(key)
    if plan is None:
        problem = _make_problem(layout, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim_qk, head_dim_v,
                                dtype, bool(causal), (left, right), softcap, softmax_scale, sinks is not None,
                                bool(return_lse), page_size, block_sparse)
        plan = _plan(problem, requested, device) if layer is None else layer._bind(problem)
        plans[key] = plan
    if out is None:
        out = _arrays.empty(q, out_shape, _output_dtype(dtype))
    lse = _arrays.empty(q, lse_shape, "fp32") if return_lse else None
    workspace = _arrays.empty(q, (plan.workspace_bytes,), "uint8") if plan.workspace_bytes else None
    refused = plan.run(q, k, v, out, lse, sinks, cu_seqlens_q, cu_seqlens_k, block_table, seqlens_k, block_offsets,
                       block_indices, workspace, _arrays.current_stream(q))
    if refused:
        raise AttnkitError(refused)
    _last_backend.set(plan.backend)
    return (out, lse) if return_lse else out


def attention(q, k, v, *, causal=False, window_size=(-1, -1), softcap=0.0, softmax_scale=None, sinks=None,
              return_lse=False, backend="auto", block_offsets=None, block_indices=None, block_q=128, block_k=128,
              block_layout=None, block_mask=None):
    """Scaled dot-product attention over [batch, seqlen, heads, head_dim] arrays.

    k and v may have fewer heads than q (GQA/MQA); causal is bottom-right aligned
    when seqlen_q != seqlen_k; window_size=(left, right) with -1 for unbounded;
    softcap > 0 applies softcap * tanh(s / softcap); sinks is a float32 [heads_q]
    logit per head; return_lse also returns the float32 natural-log LSE [batch, heads, seqlen_q].

    Block sparsity: block_offsets (int32 [rows + 1]) and block_indices (int32 [nnz]) list, per
    block of block_q queries, the blocks of block_k keys it attends to (CSR; the causal or window
    mask still applies inside them; a row with nothing to see outputs 0 and LSE -inf).
    block_layout = (lists_batch, lists_heads): 1 or batch lists per sequence, 1 or heads_q per
    head (default: what the number of offsets implies). block_mask, a dense uint8
    [lists_batch, lists_heads, q blocks, k blocks] host mask, is converted for you.
    """
    return _attention(q, k, v, causal=causal, window_size=window_size, softcap=softcap, softmax_scale=softmax_scale,
                      sinks=sinks, return_lse=return_lse, backend=backend, block_offsets=block_offsets,
                      block_indices=block_indices, block_q=block_q, block_k=block_k, block_layout=block_layout,
                      block_mask=block_mask)


def _attention(q, k, v, *, causal, window_size, softcap, softmax_scale, sinks, return_lse, backend, layer=None,
               block_offsets=None, block_indices=None, block_q=128, block_k=128, block_layout=None, block_mask=None):
    b, sq, hq, _ = _shape(q, 4, "q", "bshd")
    _, sk, hkv, _ = _shape(k, 4, "k", "bshd")
    dv = _shape(v, 4, "v", "bshd")[-1]
    sparse, offsets, indices = _block_sparse(q, block_offsets, block_indices, block_q, block_k, block_layout,
                                             block_mask, batch=b, heads_q=hq, seqlen_q=sq, seqlen_k=sk)
    return _run("bshd", q, k, v, batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv,
                out_shape=(b, sq, hq, dv), lse_shape=(b, hq, sq), causal=causal, window_size=window_size,
                softcap=softcap, softmax_scale=softmax_scale, sinks=sinks, return_lse=return_lse, backend=backend,
                layer=layer, block_sparse=sparse, block_offsets=offsets, block_indices=indices)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False,
                     window_size=(-1, -1), softcap=0.0, softmax_scale=None, sinks=None, return_lse=False,
                     backend="auto", block_offsets=None, block_indices=None, block_q=128, block_k=128,
                     block_layout=None, block_mask=None):
    """Attention over packed sequences: q [total_q, heads, dim], k/v [total_k, kv_heads, dim],
    int32 cu_seqlens of length batch + 1 (empty sequences allowed). LSE is [heads, total_q].
    Block-sparse lists as in attention(), over blocks of max_seqlen_q / max_seqlen_k (the
    blocks past a shorter sequence's end are ignored)."""
    return _attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
                             window_size=window_size, softcap=softcap, softmax_scale=softmax_scale, sinks=sinks,
                             return_lse=return_lse, backend=backend, block_offsets=block_offsets,
                             block_indices=block_indices, block_q=block_q, block_k=block_k,
                             block_layout=block_layout, block_mask=block_mask)


def _attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal, window_size, softcap,
                      softmax_scale, sinks, return_lse, backend, layer=None, block_offsets=None, block_indices=None,
                      block_q=128, block_k=128, block_layout=None, block_mask=None):
    tq, hq, _ = _shape(q, 3, "q", "thd")
    _, hkv, _ = _shape(k, 3, "k", "thd")
    dv = _shape(v, 3, "v", "thd")[-1]
    batch = _shape(cu_seqlens_q, 1, "cu_seqlens_q", "cu_seqlens")[0] - 1
    sparse, offsets, indices = _block_sparse(q, block_offsets, block_indices, block_q, block_k, block_layout,
                                             block_mask, batch=batch, heads_q=hq, seqlen_q=int(max_seqlen_q),
                                             seqlen_k=int(max_seqlen_k))
    return _run("thd", q, k, v, batch=batch, seqlen_q=int(max_seqlen_q), seqlen_k=int(max_seqlen_k), heads_q=hq,
                heads_kv=hkv, out_shape=(tq, hq, dv), lse_shape=(hq, tq), causal=causal, window_size=window_size,
                softcap=softcap, softmax_scale=softmax_scale, sinks=sinks, return_lse=return_lse, backend=backend,
                cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, layer=layer, block_sparse=sparse,
                block_offsets=offsets, block_indices=indices)


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, *, causal=True, window_size=(-1, -1),
                           softcap=0.0, softmax_scale=None, sinks=None, return_lse=False, backend="auto"):
    """Decode / chunked prefill over a paged KV cache: q [batch, seqlen_q, heads, dim],
    caches [num_pages, page_size, kv_heads, dim], int32 cache_seqlens [batch] and
    block_table [batch, max_pages]. Causal aligns the queries with the last cached keys."""
    return _attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, causal=causal,
                                   window_size=window_size, softcap=softcap, softmax_scale=softmax_scale, sinks=sinks,
                                   return_lse=return_lse, backend=backend)


def _attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, *, causal, window_size, softcap,
                            softmax_scale, sinks, return_lse, backend, layer=None):
    b, sq, hq, _ = _shape(q, 4, "q", "bshd")
    _, page_size, hkv, _ = _shape(k_cache, 4, "k_cache", "bshd")
    dv = _shape(v_cache, 4, "v_cache", "bshd")[-1]
    max_pages = _shape(block_table, 2, "block_table", "block_table")[1]
    return _run("bshd", q, k_cache, v_cache, batch=b, seqlen_q=sq, seqlen_k=max_pages * page_size, heads_q=hq,
                heads_kv=hkv, out_shape=(b, sq, hq, dv), lse_shape=(b, hq, sq), causal=causal,
                window_size=window_size, softcap=softcap, softmax_scale=softmax_scale, sinks=sinks,
                return_lse=return_lse, backend=backend, page_size=page_size, block_table=block_table,
                seqlens_k=cache_seqlens, layer=layer)


def _unsupported(argument, reason, fixes):
    return _error("AK1011", f"scaled_dot_product_attention: {argument} is not supported ({reason})", fixes)


def _sdpa(query, key, value, is_causal, scale, backend):
    """[b, h, s, d] in, a contiguous [b, h, sq, dv] out: the kernels read and write
    the same memory through [b, s, h, d] views (strides, no copies)."""
    b, hq, sq, _ = _shape(query, 4, "query", "bhsd")
    _, hkv, sk, _ = _shape(key, 4, "key", "bhsd")
    dv = _shape(value, 4, "value", "bhsd")[-1]
    if is_causal and sq != sk:
        raise _unsupported("is_causal with seq_q != seq_k", "PyTorch aligns that mask top-left, attnkit bottom-right",
                           ["pass equal query and key lengths, or call attnkit.attention(q, k, v, causal=True) on "
                            "[batch, seq, heads, dim] views if bottom-right alignment (flash-attn's) is what you mean"])
    dtype = _arrays.dtype_name(query)
    out = _arrays.empty(query, (b, hq, sq, dv), _output_dtype(dtype))
    q, k, v, o = (x.swapaxes(1, 2) for x in (query, key, value, out))
    _run("bshd", q, k, v, batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv, out_shape=None,
         lse_shape=None, causal=is_causal, window_size=None, softcap=0.0, softmax_scale=scale, sinks=None,
         return_lse=False, backend=backend, out=o)
    return out


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, backend="auto"):
    """A drop-in for torch.nn.functional.scaled_dot_product_attention at inference:
    the same arguments and [batch, heads, seqlen, head_dim] layout, a contiguous result.

        F.scaled_dot_product_attention = attnkit.scaled_dot_product_attention   # e.g. in a model's module

    Fewer key/value heads than query heads (GQA) work with or without enable_gqa.
    Refused with AK1011: attn_mask (use attnkit.attention's causal / window_size),
    dropout_p > 0, and is_causal when seq_q != seq_k (PyTorch aligns that mask
    top-left; attnkit aligns bottom-right, like flash-attn). Torch tensors go
    through torch.ops.attnkit.scaled_dot_product_attention, so torch.compile
    and CUDA graphs see one op."""
    if attn_mask is not None:
        raise _unsupported("attn_mask", "arbitrary masks are not part of the SDPA drop-in",
                           ["express the mask as is_causal, or call attnkit.attention with causal=True or "
                            "window_size=(left, right) on [batch, seq, heads, dim] views"])
    if dropout_p:
        raise _unsupported(f"dropout_p={dropout_p}", "attnkit is an inference library",
                           ["pass dropout_p=0.0 (the model in eval mode)"])
    if _arrays.framework(query) == "torch":
        _register_torch_ops()
        import torch
        return torch.ops.attnkit.scaled_dot_product_attention(query, key, value, bool(is_causal),
                                                              None if scale is None else float(scale), backend)
    return _sdpa(query, key, value, bool(is_causal), scale, backend)
