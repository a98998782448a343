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
import operator
import sys

from . import _arrays
from ._attnkit import backends
from ._attnkit import block_sparse_dense_mask as _block_sparse_dense_mask
from ._attnkit import block_sparse_from_mask as _block_sparse_from_mask
from ._attnkit import check as _check
from ._attnkit import explain as _explain
from ._attnkit import diagnose as _diagnose
from ._attnkit import global_force as _global_force
from ._attnkit import set_global_force as _set_global_force
from ._attnkit import make_problem as _make_problem
from ._attnkit import plan as _plan
from ._errors import AttnkitError
from ._text import utf8 as _utf8
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
    name = _backend_name(name)  # a str (AK1014), checked before anything changes
    previous = _global_force()
    _set_global_force(name)
    try:
        yield
    finally:
        _set_global_force(previous)


def explain(text):
    """The catalog page of a diagnostic code (a dict), or for any other text the pages
    covering that error message, best first (a list of dicts with 'score' and 'matched').
    An unknown code raises AK0001 (naming the nearest), a text no page covers AK0004."""
    if not isinstance(text, str):
        raise _error("AK1014", name="text", expected="a diagnostic code or an error message (a str such as 'AK1002')",
                     value=_shown(text), type=type(text).__name__)
    return _explain(_utf8(text))


def check(args):
    """Validates a deployment exactly like `attnkit check ARGS...` (engine flags as a list
    of strings). Returns {"ok", "platform", "selections", "diagnostics"}; never touches a GPU."""
    if isinstance(args, (str, bytes)) or not hasattr(args, "__iter__"):
        raise _error("AK3107", detail=f"the flags must be a list of strings such as ['--model', 'wan'], got "
                                      f"{_shown(args)} ({type(args).__name__})")
    return _check([_utf8(str(a)) for a in args])


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
    # attnkit.torch (Attention, an nn.Module on a Deployment layer) and attnkit.flash_attn_interface
    # (FlashAttention 2's functions) load torch: only when asked for.
    if name in ("torch", "flash_attn_interface"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")


if "torch" in sys.modules:
    _register_torch_ops()


def _error(code, **args):
    """AttnkitError for catalogued `code`, its message filled from `args` (the C++ catalog's page)."""
    return AttnkitError([_diagnose(code, {k: str(v) for k, v in args.items()})])


def _shown(value):
    """A value as quoted in a message: its repr, at most 48 characters."""
    text = repr(value)
    return text if len(text) <= 48 else text[:45] + "..."


def _require_array(x, name):
    if x is None:
        raise _error("AK1101", name=name, reason=f"got None; pass {name} as a numpy, torch or cupy array")
    try:
        readable = hasattr(x, "__dlpack__") and hasattr(x, "shape") and hasattr(x, "dtype")
    except RuntimeError:  # a torch nested tensor raises on .shape
        readable = False
    if not readable:
        raise _error("AK1112", name=name, type=type(x).__name__)


def _integer(value, name, code="AK1014", **args):
    """`value` as an int (Python or numpy integers; not 2.5, not "4"), or the catalogued refusal.
    Past int64 it is AK1012 here; the native layer refuses what does not fit an int32."""
    try:
        number = operator.index(value)
    except TypeError:
        if code == "AK1014":
            raise _error(code, name=name, expected="an integer", value=_shown(value), type=type(value).__name__) from None
        raise _error(code, **args) from None
    if not -2**63 <= number < 2**63:
        raise _error("AK1012", what=name, value=number, limit="the int64 range")
    return number


def _number(value, code, name):
    """`value` as a float (not a string, not a list), or the catalogued refusal `code`."""
    if not isinstance(value, (str, bytes)):
        try:
            return float(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int past the double range (2**1024)
            pass
    raise _error(code, value=f"{name}={_shown(value)}")


def _flag(value, name):
    """A bool (also numpy's bool_ and the ints 0 / 1); "no" is not silently True."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _error("AK1014", name=name, expected="True or False", value=_shown(value), type=type(value).__name__)


def _backend_name(backend):
    if not isinstance(backend, str):
        raise _error("AK1014", name="backend", expected="a backend name (a str: 'auto' or one of attnkit.backends())",
                     value=_shown(backend), type=type(backend).__name__)
    return _utf8(backend)


def _options(window_size, softcap, softmax_scale):
    """(left, right, softcap, scale) as numbers, or the catalogued refusal of a value that is not one."""
    if type(window_size) is tuple and window_size == (-1, -1) and type(softcap) is float and softmax_scale is None:
        return -1, -1, softcap, None  # the defaults, without the checks (~15 us a call)
    if window_size is None:
        left, right = -1, -1
    else:
        bad = {"left": _shown(window_size), "right": "..."}
        try:
            pair = tuple(window_size)
        except TypeError:
            raise _error("AK1004", **bad) from None
        if len(pair) != 2 or isinstance(window_size, (str, bytes)):
            raise _error("AK1004", **bad)
        left, right = (_integer(x, "window_size", "AK1004", left=_shown(pair[0]), right=_shown(pair[1])) for x in pair)
    softcap = _number(softcap, "AK1005", "softcap")
    scale = None if softmax_scale is None else _number(softmax_scale, "AK1006", "softmax_scale")
    return left, right, softcap, scale


def _shape(x, rank, name, layout):
    _require_array(x, name)
    if len(x.shape) != rank:
        raise _error("AK1102", name=name, rank=len(x.shape), expected=rank, layout=layout)
    return tuple(map(int, x.shape))


_MAX_PLANS = 256  # plans cached per distinct call shape; a server with ever-new shapes must not grow without bound


def _block_sizes(block_q, block_k):
    """(block_q, block_k) as ints, AK1008 when one is not a positive integer (before any division by it)."""
    sizes = tuple(_integer(x, name, "AK1008", block_q=_shown(block_q), block_k=_shown(block_k))
                  for x, name in ((block_q, "block_q"), (block_k, "block_k")))
    if min(sizes) < 1:
        raise _error("AK1008", block_q=sizes[0], block_k=sizes[1])
    return sizes


def _int_tuple(value, name, fields):
    """`value` as a tuple of len(fields) ints, or AK1014 naming the fields."""
    try:
        items = () if isinstance(value, (str, bytes)) else tuple(value)
    except TypeError:
        items = ()
    if len(items) != len(fields):
        kind = {2: "a pair", 3: "a triple"}[len(fields)]
        raise _error("AK1014", name=name, expected=f"{kind} ({', '.join(fields)})", value=_shown(value),
                     type=type(value).__name__)
    return tuple(_integer(x, name) for x in items)


def _video_grid(video_grid):
    """video_grid as (frames, height, width) ints, None when not given, or AK1014."""
    return None if video_grid is None else _int_tuple(video_grid, "video_grid", ("frames", "height", "width"))


def _block_layout(block_layout):
    """block_layout as (lists_batch, lists_heads) ints, or AK1014."""
    return _int_tuple(block_layout, "block_layout", ("lists_batch", "lists_heads"))


def block_sparse_from_mask(block_mask, seqlen_q, seqlen_k, block_q=128, block_k=128):
    """Block-sparse lists from a dense uint8 block mask [lists_batch, lists_heads, ceil(seqlen_q / block_q),
    ceil(seqlen_k / block_k)] on the host (non-zero: the query block attends to the key block).
    lists_batch is 1 (shared by the sequences) or batch, lists_heads 1 or heads_q. Returns the int32
    numpy arrays (block_offsets [rows + 1], block_indices [nnz]) that attention() takes."""
    import numpy
    _require_array(block_mask, "block_mask")
    block_q, block_k = _block_sizes(block_q, block_k)
    mask = block_mask.cpu() if _arrays.framework(block_mask) == "torch" else block_mask
    offsets, indices = _block_sparse_from_mask(mask, _integer(seqlen_q, "seqlen_q"), _integer(seqlen_k, "seqlen_k"),
                                               block_q, block_k)
    return numpy.asarray(offsets, dtype=numpy.int32), numpy.asarray(indices, dtype=numpy.int32)


def block_sparse_dense_mask(block_offsets, block_indices, block_layout, seqlen_q, seqlen_k, block_q=128,
                            block_k=128):
    """The dense uint8 block mask [lists_batch, lists_heads, q blocks, k blocks] of host lists
    (block_layout = (lists_batch, lists_heads)): the inverse of block_sparse_from_mask."""
    import numpy
    _require_array(block_offsets, "block_offsets")
    _require_array(block_indices, "block_indices")
    lists_batch, lists_heads = _block_layout(block_layout)
    block_q, block_k = _block_sizes(block_q, block_k)
    seqlen_q, seqlen_k = _integer(seqlen_q, "seqlen_q"), _integer(seqlen_k, "seqlen_k")
    flat = _block_sparse_dense_mask(block_offsets, block_indices, lists_batch, lists_heads, seqlen_q, seqlen_k,
                                    block_q, block_k)
    nq, nk = -(-seqlen_q // block_q), -(-seqlen_k // block_k)
    return numpy.asarray(flat, dtype=numpy.uint8).reshape(lists_batch, lists_heads, nq, nk)


def _block_sparse(q, block_offsets, block_indices, block_q, block_k, block_layout, block_mask, *, batch, heads_q,
                  seqlen_q, seqlen_k):
    """(block_sparse problem tuple, offsets, indices) of a call, or (None, None, None) when dense.
    block_layout (lists_batch, lists_heads) defaults to what the number of offsets implies."""
    if block_mask is not None:
        if block_offsets is not None or block_indices is not None:
            raise _error("AK1115", reason="give block_mask or block_offsets / block_indices, not both")
        _require_array(block_mask, "block_mask")
        block_layout = (int(block_mask.shape[0]), int(block_mask.shape[1])) if len(block_mask.shape) == 4 else None
        offsets, indices = block_sparse_from_mask(block_mask, seqlen_q, seqlen_k, block_q, block_k)
        block_offsets, block_indices = _arrays.like(q, offsets), _arrays.like(q, indices)
    if block_offsets is None and block_indices is None:
        return None, None, None
    _require_array(block_offsets, "block_offsets")
    _require_array(block_indices, "block_indices")
    block_q, block_k = _block_sizes(block_q, block_k)
    if block_layout is None:
        rows = int(block_offsets.shape[0]) - 1 if len(block_offsets.shape) == 1 else -1
        q_blocks = max(1, -(-seqlen_q // block_q))
        fits = sorted({(b, h) for b in {1, batch} for h in {1, heads_q} if b * h * q_blocks == rows})
        if len(fits) != 1:
            candidates = sorted({(b, h) for b in {1, batch} for h in {1, heads_q}})
            expected = (" or ".join(f"({b}, {h})" for b, h in fits) + " given as block_layout: both fit" if fits else
                        " or ".join(f"[{b * h * q_blocks + 1}] (block_layout=({b}, {h}))" for b, h in candidates))
            raise _error("AK1103", name="block_offsets", shape=f"[{rows + 1}]", expected=expected)
        block_layout = fits[0]
    return (block_q, block_k) + _block_layout(block_layout), block_offsets, block_indices


def _as_is(x):
    return x


def _run(layout, q, k, v, *, batch, seqlen_q, seqlen_k, heads_q, heads_kv, out_shape, lse_shape, causal,
         window_size, softcap, softmax_scale, sinks, return_lse, backend, page_size=None,
         cu_seqlens_q=None, cu_seqlens_k=None, block_table=None, seqlens_k=None, make_out=None, layer=None,
         block_sparse=None, block_offsets=None, block_indices=None, video_grid=None, gate=None):
    """Plans (once per call shape) and runs one call: with the selection for one call, or,
    for a Deployment `layer`, with the plan of the layer's decision in force. The problem
    is validated before any output is allocated; `make_out(dtype)` returns (result, the
    [b, s, h, d] view the kernel writes)."""
    for name, x in (("sinks", sinks), ("gate", gate), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                    ("block_table", block_table), ("cache_seqlens", seqlens_k)):
        if x is not None:  # q, k, v were checked by the caller's _shape
            _require_array(x, name)
    torch_arrays = _arrays.framework(q) == "torch"
    if torch_arrays:
        _register_torch_ops()
    dtype = _arrays.dtype_name(q)
    device = _arrays.device_kind(q)
    requested = _backend_name(backend)
    causal, return_lse = _flag(causal, "causal"), _flag(return_lse, "return_lse")
    left, right, softcap, softmax_scale = _options(window_size, softcap, softmax_scale)
    head_dim_qk, head_dim_v = int(q.shape[-1]), int(v.shape[-1])
    video_grid = _video_grid(video_grid)
    key = (layout, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim_qk, head_dim_v, dtype, causal,
           left, right, softcap, softmax_scale, sinks is not None, gate is not None, return_lse, page_size, block_sparse,
           video_grid, requested, _global_force() if requested == "auto" else "", device)
    plans = _plans if layer is None else layer._calls
    plan = plans.get(key)
    if plan is None:
        problem = _make_problem(layout, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim_qk, head_dim_v,
                                dtype, causal, (left, right), softcap, softmax_scale, sinks is not None,
                                gate is not None, return_lse, page_size, block_sparse, video_grid)
        plan = _plan(problem, requested, device) if layer is None else layer._bind(problem)
        if len(plans) >= _MAX_PLANS:
            plans.clear()
        plans[key] = plan
    result, out = make_out(plan.out_dtype) if make_out else (None, None)
    # Packed rows past cu_seqlens_q[-1] (padding) belong to no sequence and are not
    # written: they read as a row that sees no key (output 0, LSE -inf), not old memory.
    out_fill, lse_fill = (0.0, float("-inf")) if layout == "thd" else (None, None)
    if out is None:
        result = out = _arrays.empty(q, out_shape, plan.out_dtype, "out", out_fill)
    lse = _arrays.empty(q, lse_shape, "fp32", "lse", lse_fill) if return_lse else None
    workspace = _arrays.empty(q, (plan.workspace_bytes,), "uint8", "workspace") if plan.workspace_bytes else None
    n = _arrays.native if torch_arrays else _as_is
    refused = plan.run(n(q), n(k), n(v), n(out), n(lse), n(sinks), n(gate), n(cu_seqlens_q), n(cu_seqlens_k),
                       n(block_table), n(seqlens_k), n(block_offsets), n(block_indices), n(workspace),
                       _arrays.current_stream(q))
    if refused:
        raise AttnkitError(refused)
    _last_backend.set(plan.backend)
    return (result, lse) if return_lse else result


def attention(q, k, v, *, causal=False, window_size=(-1, -1), softcap=0.0, softmax_scale=None, sinks=None,
              return_lse=False, backend="auto", block_offsets=None, block_indices=None, block_q=128, block_k=128,
              block_layout=None, block_mask=None, video_grid=None, gate=None):
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

    video_grid=(frames, height, width): the first frames * height * width tokens of each
    sequence are video latents in raster order (the rest text tokens), what the sparse video
    backends (sliding_tile_attn, ...) read; dense backends ignore it.

    gate: a float32 [batch, seqlen_q, heads_q] per-token, per-head gate of the backends with a
    gated second branch (video_sparse_attn_h3: out = fine + gate * coarse; hybrid_window_attn_h3:
    out = window softmax + gate * linear; docs/sparse.md). Other backends refuse it (AK2109).
    """
    return _attention(q, k, v, causal=causal, window_size=window_size, softcap=softcap, softmax_scale=softmax_scale,
                      sinks=sinks, return_lse=return_lse, backend=backend, block_offsets=block_offsets,
                      block_indices=block_indices, block_q=block_q, block_k=block_k, block_layout=block_layout,
                      block_mask=block_mask, video_grid=video_grid, gate=gate)


def _attention(q, k, v, *, causal, window_size, softcap, softmax_scale, sinks, return_lse, backend, layer=None,
               block_offsets=None, block_indices=None, block_q=128, block_k=128, block_layout=None, block_mask=None,
               video_grid=None, gate=None):
    b, sq, hq, _ = _shape(q, 4, "q", "bshd")
    _, sk, hkv, _ = _shape(k, 4, "k", "bshd")
    dv = _shape(v, 4, "v", "bshd")[-1]
    sparse, offsets, indices = _block_sparse(q, block_offsets, block_indices, block_q, block_k, block_layout,
                                             block_mask, batch=b, heads_q=hq, seqlen_q=sq, seqlen_k=sk)
    return _run("bshd", q, k, v, batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv,
                out_shape=(b, sq, hq, dv), lse_shape=(b, hq, sq), causal=causal, window_size=window_size,
                softcap=softcap, softmax_scale=softmax_scale, sinks=sinks, return_lse=return_lse, backend=backend,
                layer=layer, block_sparse=sparse, block_offsets=offsets, block_indices=indices, video_grid=video_grid,
                gate=gate)


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
    max_q, max_k = _integer(max_seqlen_q, "max_seqlen_q"), _integer(max_seqlen_k, "max_seqlen_k")
    sparse, offsets, indices = _block_sparse(q, block_offsets, block_indices, block_q, block_k, block_layout,
                                             block_mask, batch=batch, heads_q=hq, seqlen_q=max_q, seqlen_k=max_k)
    return _run("thd", q, k, v, batch=batch, seqlen_q=max_q, seqlen_k=max_k, heads_q=hq,
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


def _unsupported(argument, reason, function="scaled_dot_product_attention"):
    return _error("AK1011", function=function, argument=argument, reason=reason)


def _sdpa(query, key, value, is_causal, scale, backend):
    """[b, h, s, d] in, a contiguous [b, h, sq, dv] out: the kernels read and write
    the same memory through [b, s, h, d] views (strides, no copies)."""
    b, hq, sq, _ = _shape(query, 4, "query", "bhsd")
    _, hkv, sk, _ = _shape(key, 4, "key", "bhsd")
    dv = _shape(value, 4, "value", "bhsd")[-1]
    is_causal = _flag(is_causal, "is_causal")
    if is_causal and sq != sk:
        raise _unsupported("is_causal with seq_q != seq_k", "PyTorch aligns that mask top-left, attnkit bottom-right")

    def make_out(dtype):  # a contiguous [b, h, sq, dv] result, written through its [b, s, h, d] view
        out = _arrays.empty(query, (b, hq, sq, dv), dtype, "out")
        return out, out.swapaxes(1, 2)

    q, k, v = (x.swapaxes(1, 2) for x in (query, key, value))
    return _run("bshd", q, k, v, batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv, out_shape=None,
                lse_shape=None, causal=is_causal, window_size=None, softcap=0.0, softmax_scale=scale, sinks=None,
                return_lse=False, backend=backend, make_out=make_out)


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
        raise _unsupported("attn_mask", "arbitrary masks are not part of the SDPA drop-in")
    try:
        dropout = 0.0 if isinstance(dropout_p, (str, bytes)) else float(dropout_p)
    except (TypeError, ValueError, OverflowError):
        dropout = float("nan")
    _flag(enable_gqa, "enable_gqa")  # GQA runs either way; "no" is not silently True
    if isinstance(dropout_p, (str, bytes)) or dropout != 0.0:
        raise _unsupported(f"dropout_p={_shown(dropout_p)}", "attnkit is an inference library: dropout_p must be 0.0")
    if _arrays.framework(query) == "torch":
        _register_torch_ops()
        import torch
        return torch.ops.attnkit.scaled_dot_product_attention(query, key, value, _flag(is_causal, "is_causal"),
                                                              None if scale is None else _number(scale, "AK1006", "scale"),
                                                              _backend_name(backend))
    return _sdpa(query, key, value, is_causal, scale, backend)
