"""FlashAttention 2's Python interface on attnkit's kernels.

    from attnkit.flash_attn_interface import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache
    out = flash_attn_func(q, k, v, causal=True)                  # q, k, v: torch [batch, seqlen, heads, dim]
    out = flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=lens, causal=True)

    attnkit.flash_attn_interface.install()                     # then `import flash_attn` is attnkit
                                                               # (and flash_attn.bert_padding, .layers.rotary)

The functions, arguments, shapes and return values of flash_attn.flash_attn_interface (2.x), so that
code written against FlashAttention runs on attnkit unchanged: the packed variants, varlen,
and the KV-cache call with its in-place append of new keys and values, rotary embedding of q and the new
keys, cache_batch_idx, cache_leftpad and paged caches (block_table). Each call runs what attnkit selects
for it (attnkit.last_backend() names it, attnkit.force_backend pins one); num_splits and deterministic
are accepted and have no effect (attnkit's planner splits, its forward is deterministic).

Gradients: the dense, packed and varlen calls are differentiable. attnkit's kernels are forward-only,
so the backward pass is an exact recomputation in torch (fp32 softmax of the recomputed scores, query
rows in chunks of at most 256 MiB of scores): correct, O(seqlen^2) work, meant for tests and small
fine-tuning, not for training at scale. Inference (torch.no_grad(), torch.inference_mode()) never
touches it. The KV-cache call and the varlen call over pages are forward-only, as in FlashAttention.

Refused with AK1011, rather than computed differently: dropout_p > 0, alibi_slopes, gradients through
the KV-cache call, a backward pass through a paged varlen call (its forward runs), and the combinations
FlashAttention refuses itself. A KV-cache append past the cache's end is refused (AK1111) when the lengths are host tensors;
CUDA lengths are not read back (no synchronisation, so the call stays capturable): there, rows past
the cache's end are not written and keys past it not attended.
"""
import sys
import types

import torch

import attnkit

__all__ = ["install", "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache"]


def install(replace=False):
    """Makes `import flash_attn` and `import flash_attn.flash_attn_interface` give these functions, so that
    code written for FlashAttention 2 runs on attnkit without an edit. Call it before anything imports
    flash_attn: a real flash_attn imported earlier is refused (AK1017) unless replace=True."""
    present = sys.modules.get("flash_attn")
    if present is not None and not getattr(present, "__attnkit__", False) and not replace:
        raise attnkit._error("AK1017", origin=getattr(present, "__file__", None) or repr(present))
    package = types.ModuleType("flash_attn", "FlashAttention 2's interface, served by attnkit.flash_attn_interface")
    package.__path__ = []  # a package, so `import flash_attn.flash_attn_interface` resolves
    package.__version__ = "2.7.4+attnkit"  # the FlashAttention release whose interface this follows
    package.__attnkit__ = True
    package.flash_attn_interface = sys.modules[__name__]
    for name in __all__[1:]:
        setattr(package, name, globals()[name])
    # The helper modules FlashAttention's users import beside the interface (Hugging Face transformers
    # takes pad_input / unpad_input from flash_attn.bert_padding, FA's tests apply_rotary_emb too).
    from attnkit import flash_attn_padding, flash_attn_rotary
    layers = types.ModuleType("flash_attn.layers", "FlashAttention's layers, served by attnkit")
    layers.__path__ = []
    layers.rotary = flash_attn_rotary
    package.bert_padding, package.layers = flash_attn_padding, layers
    sys.modules["flash_attn"] = package
    sys.modules["flash_attn.flash_attn_interface"] = sys.modules[__name__]
    sys.modules["flash_attn.bert_padding"] = flash_attn_padding
    sys.modules["flash_attn.layers"] = layers
    sys.modules["flash_attn.layers.rotary"] = flash_attn_rotary
    return package


def _refuse(function, argument, reason):
    return attnkit._unsupported(argument, reason, function=function)


def _inference_only(function, dropout_p, alibi_slopes, *tensors):
    """FlashAttention's training-side arguments, refused: dropout, ALiBi and, for the calls given
    `tensors`, gradients."""
    try:
        dropout = float("nan") if isinstance(dropout_p, (str, bytes)) else float(dropout_p)
    except (TypeError, ValueError, OverflowError):
        dropout = float("nan")
    if dropout != 0.0:
        raise _refuse(function, f"dropout_p={attnkit._shown(dropout_p)}",
                      "attnkit is an inference library: dropout_p must be 0.0")
    if alibi_slopes is not None:
        raise _refuse(function, "alibi_slopes", "attnkit's kernels have no ALiBi bias")
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
        raise _refuse(function, "inputs that require grad",
                      "FlashAttention's KV-cache call has no backward pass; call it under torch.no_grad() or "
                      "torch.inference_mode()")


def _last_dim_contiguous(x):
    """x with a unit last stride (a copy when it has none). Sparse and nested tensors have no strides:
    they pass as they are, to be refused as arrays DLPack cannot read (AK1112)."""
    if isinstance(x, torch.Tensor) and x.layout == torch.strided and not x.is_nested and x.stride(-1) != 1:
        return x.contiguous()
    return x


def _results(out_lse, return_attn_probs):
    """FlashAttention's returns: out, or (out, softmax_lse, S_dmask) with no S_dmask (dropout is refused)."""
    out, lse = out_lse
    return (out, lse, None) if attnkit._flag(return_attn_probs, "return_attn_probs") else out


def _dense(function, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
           return_attn_probs):
    _inference_only(function, dropout_p, alibi_slopes)
    q, k, v = (_last_dim_contiguous(x) for x in (q, k, v))
    options = dict(causal=causal, window_size=window_size, softcap=softcap, softmax_scale=softmax_scale)
    if _needs_grad(q, k, v):
        return _results(_Differentiable.apply(q, k, v, None, options), return_attn_probs)
    return _results(attnkit.attention(q, k, v, return_lse=True, **options), return_attn_probs)


def _needs_grad(*tensors):
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (batch, seqlen_q, heads, dim), k / v (batch, seqlen_k, kv_heads, dim) -> out (batch, seqlen_q,
    heads, dim); with return_attn_probs, (out, softmax_lse (batch, heads, seqlen_q), None)."""
    return _dense("flash_attn_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                  alibi_slopes, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv (batch, seqlen, 3, heads, dim): read in place through strided views."""
    q, k, v = _unpack(qkv, 3, "qkv", 5)
    return _dense("flash_attn_qkvpacked_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                  alibi_slopes, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """kv (batch, seqlen_k, 2, kv_heads, dim)."""
    k, v = _unpack(kv, 2, "kv", 5)
    return _dense("flash_attn_kvpacked_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                  alibi_slopes, return_attn_probs)


def _unpack(packed, parts, name, rank):
    """The views of a packed tensor along its stacking dim (dim -3), or the catalogued refusal."""
    shape = attnkit._shape(packed, rank, name, f"{rank}-d with {parts} stacked at dim -3")
    if shape[-3] != parts:
        raise attnkit._error("AK1103", name=name, shape=list(shape),
                             expected=f"{parts} at dim -3 (FlashAttention's packed layout)")
    return packed.unbind(dim=-3)


def _varlen(function, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
            causal, window_size, softcap, alibi_slopes, return_attn_probs, block_table=None, seqused_k=None):
    _inference_only(function, dropout_p, alibi_slopes)
    options = dict(causal=causal, window_size=window_size, softcap=softcap, softmax_scale=softmax_scale)
    if block_table is not None:  # forward only, as in FlashAttention: a backward through it is refused
        paged = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, block_table, options, seqused_k)
        if _needs_grad(q, k, v):
            return _results(_ForwardOnly.apply(function, _varlen_paged, paged, q, k, v), return_attn_probs)
        return _results(_varlen_paged(q, k, v, *paged), return_attn_probs)
    q, k, v = (_last_dim_contiguous(x) for x in (q, k, v))
    varlen = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    if _needs_grad(q, k, v):
        return _results(_Differentiable.apply(q, k, v, varlen, options), return_attn_probs)
    return _results(attnkit.attention_varlen(q, k, v, *varlen, return_lse=True, **options), return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """q (total_q, heads, dim), k / v (total_k, kv_heads, dim), int32 cu_seqlens (batch + 1,) ->
    out (total_q, heads, dim); with return_attn_probs, (out, softmax_lse (heads, total_q), None)."""
    return _varlen("flash_attn_varlen_func", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                   dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs,
                   block_table)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv (total, 3, heads, dim)."""
    q, k, v = _unpack(qkv, 3, "qkv", 4)
    return _varlen("flash_attn_varlen_qkvpacked_func", q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                   dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """kv (total_k, 2, kv_heads, dim)."""
    k, v = _unpack(kv, 2, "kv", 4)
    return _varlen("flash_attn_varlen_kvpacked_func", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                   max_seqlen_k, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                   return_attn_probs)


# FlashAttention 2.7's private forwards, which libraries built on its internals call (ring-flash-attn
# among them): the public calls' forwards returning (out, softmax_lse, S_dmask, rng_state) and recording no
# autograd graph, as FA's custom ops. S_dmask is None (dropout is refused, AK1011) and rng_state a zero
# (2,) int64 tensor: there is no random state to replay.
def _private_results(out, lse, device):
    return out, lse, None, torch.zeros(2, dtype=torch.int64, device=device)


def _flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal, window_size_left=-1, window_size_right=-1,
                        softcap=0.0, alibi_slopes=None, return_softmax=False):
    """flash_attn_func's forward: q (batch, seqlen_q, heads, dim) -> out, softmax_lse (batch, heads,
    seqlen_q), None, rng_state."""
    with torch.no_grad():
        out, lse, _ = _dense("_flash_attn_forward", q, k, v, dropout_p, softmax_scale, causal,
                             (window_size_left, window_size_right), softcap, alibi_slopes, True)
    return _private_results(out, lse, q.device)


def _flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                               softmax_scale, causal, window_size_left=-1, window_size_right=-1, softcap=0.0,
                               alibi_slopes=None, return_softmax=False, block_table=None, leftpad_k=None,
                               seqused_k=None, zero_tensors=False, num_splits=0):
    """flash_attn_varlen_func's forward: q (total_q, heads, dim) -> out, softmax_lse (heads, total_q), None,
    rng_state. block_table reads k / v as a paged cache, where seqused_k (batch,) may give each sequence's
    key count; seqused_k without pages and leftpad_k are refused (AK1011). num_splits has no effect."""
    function = "_flash_attn_varlen_forward"
    if leftpad_k is not None:
        raise _refuse(function, "leftpad_k", "pass the key lengths through cu_seqlens_k")
    if seqused_k is not None and block_table is None:
        raise _refuse(function, "seqused_k without block_table", "pass the key lengths through cu_seqlens_k")
    with torch.no_grad():
        out, lse, _ = _varlen(function, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                              softmax_scale, causal, (window_size_left, window_size_right), softcap, alibi_slopes,
                              True, block_table, seqused_k)
    return _private_results(out, lse, q.device)


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    """The key-block width FlashAttention's tests decode its dropout pattern S_dmask with. attnkit never
    returns S_dmask (dropout is refused), so any positive width serves: 64 for every head dim up to 256
    (a larger one is refused, AK1011)."""
    if not isinstance(head_dim, int) or not 1 <= head_dim <= 256:
        raise _refuse("_get_block_size_n", f"head_dim={attnkit._shown(head_dim)}", "head dims are 1 to 256")
    return 64


class _ForwardOnly(torch.autograd.Function):
    """A forward pass with no backward: inputs may require grad (FlashAttention's tests make them so), and a
    backward through the result is refused with AK1011 instead of giving no gradient silently."""

    @staticmethod
    def forward(ctx, function, compute, arguments, *tensors):
        ctx.function = function
        out, lse = compute(*(t.detach() for t in tensors), *arguments)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, *grads):
        raise _refuse(ctx.function, "a backward pass over a paged cache",
                      "FlashAttention has none either; compute gradients with a contiguous cache (the varlen call "
                      "without block_table)")


_MAX_SEQLEN = 2**30  # attnkit's sequence length limit (AK1012)


def _check_padding(device, rows, bytes_per_row):
    """The padded copy of the queries fits the host's memory, or AK1013 before torch's allocator fails."""
    if device.type == "cpu":
        attnkit._arrays.require_host_bytes("the padded queries of a paged varlen call", rows * bytes_per_row)


def _varlen_paged(q, k_cache, v_cache, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, block_table, options,
                  seqused_k=None):
    """Packed queries over a paged cache (FlashAttention's varlen call with a block_table): sequence b's
    keys are the first cu_seqlens_k[b + 1] - cu_seqlens_k[b] tokens (seqused_k[b] when given) of the pages
    block_table[b]. Runs as
    attention_with_kvcache on the queries padded to (batch, max_seqlen_q): each sequence's rows go last in
    its padded block, so that bottom-right causal and window masks align them with its last key; the
    padding rows are computed and dropped. Index arithmetic on the device, no synchronisation."""
    total, h, d = attnkit._shape(q, 3, "q", "thd")
    attnkit._shape(k_cache, 4, "k", "paged cache (num_blocks, page_size, kv_heads, dim)")
    attnkit._shape(v_cache, 4, "v", "paged cache (num_blocks, page_size, kv_heads, dim)")
    attnkit._shape(block_table, 2, "block_table", "(batch, max_blocks)")
    device = _device_of(q, k=k_cache, v=v_cache, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                        block_table=block_table)
    batch = int(block_table.shape[0])
    cu_q = _index_tensor(cu_seqlens_q, "cu_seqlens_q", batch + 1, device)
    cu_k = _index_tensor(cu_seqlens_k, "cu_seqlens_k", batch + 1, device)
    max_q = attnkit._integer(max_seqlen_q, "max_seqlen_q")
    lens_q, lens_k = cu_q[1:] - cu_q[:-1], cu_k[1:] - cu_k[:-1]
    if seqused_k is not None:
        lens_k = _index_tensor(seqused_k, "seqused_k", batch, device)
        if device.type == "cpu" and bool((lens_k < 0).any()):
            raise attnkit._error("AK1108", name="seqused_k", reason=f"{lens_k.tolist()} has a negative length")
    if device.type == "cpu":  # host offsets: checked before they index anything
        for name, cu, lens, bound in (("cu_seqlens_q", cu_q, lens_q, total), ("cu_seqlens_k", cu_k, lens_k, None)):
            if int(cu[0]) != 0 or bool((lens < 0).any()) or (bound is not None and int(cu[-1]) > bound):
                raise attnkit._error("AK1108", name=name, reason=f"{cu.tolist()} must start at 0, never decrease"
                                     + (f" and end within the {bound} packed rows" if bound is not None else ""))
        if batch and int(lens_q.max()) > max_q:
            raise attnkit._error("AK1108", name="cu_seqlens_q",
                                 reason=f"a sequence of {int(lens_q.max())} queries is longer than max_seqlen_q {max_q}")
    if max_q < 0:
        raise attnkit._error("AK1108", name="max_seqlen_q", reason=f"{max_q} is negative")
    if max_q > _MAX_SEQLEN:
        raise attnkit._error("AK1012", what="max_seqlen_q", value=max_q, limit=_MAX_SEQLEN)
    _check_padding(device, batch * max_q, h * d * q.element_size() * 2 + 17)  # q_pad, the gather, the indices
    # Padded slot (b, t) holds packed row cu_q[b] + t - (max_q - lens_q[b]) when t >= max_q - lens_q[b].
    t = torch.arange(max_q, device=device)
    first = (max_q - lens_q.long())[:, None]
    source = cu_q[:-1, None].long() + t - first
    real = (t >= first) & (source < total)
    q_pad = torch.where(real[..., None, None], q[source.clamp(0, max(total - 1, 0))], 0).to(q.dtype) if total else \
        q.new_zeros(batch, max_q, h, d)
    result = attnkit.attention_with_kvcache(q_pad, k_cache, v_cache, lens_k, block_table, return_lse=True, **options)
    out_pad, lse_pad = result
    # Packed row r: sequence b = the last with cu_q[b] <= r, slot r - cu_q[b] + max_q - lens_q[b].
    r = torch.arange(total, device=device)
    b_of = (torch.searchsorted(cu_q[1:].contiguous(), r.to(torch.int32), right=True)).clamp(max=max(batch - 1, 0))
    slot = (r - cu_q[b_of].long() + max_q - lens_q[b_of].long()).clamp(0, max(max_q - 1, 0))
    inside = r < cu_q[-1].long()
    if total == 0 or batch == 0 or max_q == 0:
        out = q.new_zeros(total, h, v_cache.shape[-1])
        lse = torch.full((h, total), float("-inf"), device=device)
    else:
        out = torch.where(inside[:, None, None], out_pad[b_of, slot], 0).to(out_pad.dtype)
        lse = torch.where(inside[None, :], lse_pad[b_of, :, slot].transpose(0, 1), float("-inf"))
    return out, lse


# ---------------------------------------------------------------------------------------------------------------
# The backward pass: exact, in torch


class _Differentiable(torch.autograd.Function):
    """attnkit's forward; the backward recomputes P = softmax(S) per head in fp32 and applies
        dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dO * O)) [* (1 - tanh^2(S_raw / softcap))],
        dQ = scale * dS K,  dK = scale * dS^T Q,
    summing dK and dV over the query heads that share a kv head (GQA)."""

    @staticmethod
    def forward(ctx, q, k, v, varlen, options):
        q_, k_, v_ = (x.detach() for x in (q, k, v))
        if varlen is None:
            out, lse = attnkit.attention(q_, k_, v_, return_lse=True, **options)
        else:
            out, lse = attnkit.attention_varlen(q_, k_, v_, *varlen, return_lse=True, **options)
        ctx.save_for_backward(q_, k_, v_, out)
        ctx.varlen, ctx.options = varlen, options
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out = ctx.saved_tensors
        if ctx.varlen is None:
            dq, dk, dv = _attention_grads(q, k, v, out, dout, ctx.options)
        else:  # per sequence, on the host's copy of the offsets
            dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
            cu_q, cu_k = (torch.as_tensor(c).tolist() for c in ctx.varlen[:2])
            for i in range(len(cu_q) - 1):
                rq, rk = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
                grads = _attention_grads(q[None, rq], k[None, rk], v[None, rk], out[None, rq], dout[None, rq],
                                         ctx.options)
                dq[rq], dk[rk], dv[rk] = (g[0] for g in grads)
        return dq, dk, dv, None, None


_GRAD_SCORES = 1 << 26  # score elements (fp32) one step of the backward holds: 256 MiB, query rows chunked to fit


def _attention_grads(q, k, v, out, dout, options):
    """(dq, dk, dv) of [batch, seq, heads, dim] attention, in the inputs' dtypes. The query rows go in
    chunks, so that a step holds at most _GRAD_SCORES scores; dk and dv sum over the chunks."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    group = h // hk
    left, right, softcap, scale = attnkit._options(options["window_size"], options["softcap"],
                                                   options["softmax_scale"])
    scale = d ** -0.5 if scale is None else scale
    if options["causal"]:
        right = 0
    qf, of, dof = (x.float().transpose(1, 2) for x in (q, out, dout))                # [b, h, s, d]
    kf, vf = (x.float().transpose(1, 2).repeat_interleave(group, dim=1) for x in (k, v))
    dq = torch.zeros_like(qf)
    dk = torch.zeros_like(kf)
    dv = torch.zeros(*vf.shape[:-1], of.shape[-1], device=vf.device)
    j = torch.arange(sk, device=q.device)[None, :]
    rows = max(1, _GRAD_SCORES // max(1, b * h * sk))
    for r0 in range(0, sq, rows):
        r = slice(r0, min(sq, r0 + rows))
        raw = scale * qf[:, :, r] @ kf.transpose(-1, -2)                               # [b, h, rows, sk]
        logits = softcap * torch.tanh(raw / softcap) if softcap > 0 else raw
        i = torch.arange(r.start, r.stop, device=q.device)[:, None] + (sk - sq)       # bottom-right diagonal
        visible = torch.ones(r.stop - r.start, sk, dtype=torch.bool, device=q.device)
        if left >= 0:
            visible &= j >= i - left
        if right >= 0:
            visible &= j <= i + right
        # P from these fp32 logits (not the kernel's LSE, a few ulps away: with one visible key P is exactly 1);
        # a row that sees no key has P = 0.
        p = torch.softmax(logits.masked_fill(~visible, float("-inf")), dim=-1).nan_to_num(0.0)
        do = dof[:, :, r]
        dv += p.transpose(-1, -2) @ do
        ds = p * (do @ vf.transpose(-1, -2) - (do * of[:, :, r]).sum(-1, keepdim=True))
        if softcap > 0:
            ds = ds * (1 - torch.tanh(raw / softcap) ** 2)
        dq[:, :, r] = scale * ds @ kf
        dk += scale * ds.transpose(-1, -2) @ qf[:, :, r]

    def per_kv_head(x):  # [b, h, s, d] -> [b, s, hk, d], summed over each group
        return x.reshape(b, hk, group, *x.shape[2:]).sum(2).transpose(1, 2)

    return dq.transpose(1, 2).to(q.dtype), per_kv_head(dk).to(k.dtype), per_kv_head(dv).to(v.dtype)


# ---------------------------------------------------------------------------------------------------------------
# flash_attn_with_kvcache


def _rotary(x, cos, sin, positions, interleaved):
    """x (batch, seqlen, heads, dim) with its first rotary_dim = 2 * cos.shape[1] channels rotated by the
    angles at `positions` (batch, seqlen): pairs (2i, 2i + 1) when interleaved, (i, i + rotary_dim / 2)
    otherwise (GPT-NeoX). Computed in fp32, rounded to x's dtype; positions past the table rotate by 0."""
    half = cos.shape[1]
    inside = positions < cos.shape[0]
    at = positions.clamp(0, cos.shape[0] - 1).long()
    c = torch.where(inside[..., None], cos.float()[at], 1.0)[:, :, None, :]  # (batch, seqlen, 1, half)
    s = torch.where(inside[..., None], sin.float()[at], 0.0)[:, :, None, :]
    rotated = x[..., :2 * half].float()
    if interleaved:
        x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
        rotated = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    else:
        x1, x2 = rotated[..., :half], rotated[..., half:]
        rotated = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    return torch.cat((rotated.to(x.dtype), x[..., 2 * half:]), dim=-1)


def _same_rows(x, name, expected):
    if tuple(x.shape) != tuple(expected):
        raise attnkit._error("AK1103", name=name, shape=list(x.shape), expected=list(expected))


def _dtype_text(dtype):
    return str(dtype).replace("torch.", "")


def _same_dtype(x, name, dtype):
    if x.dtype != dtype:
        raise attnkit._error("AK1104", name=name, dtype=_dtype_text(x.dtype), expected=_dtype_text(dtype))


def _device_of(q, **tensors):
    """q's device, every other tensor given (None: not passed) on it, or the catalogued refusal: the cache
    update and the padding run in torch."""
    if not isinstance(q, torch.Tensor):
        raise attnkit._error("AK1105", name="q", device=type(q).__name__, expected="a torch tensor")
    for name, x in tensors.items():
        if x is not None:
            _on(x, name, q.device)
    return q.device


def _on(x, name, device):
    """x is a torch tensor on `device`, or the catalogued refusal (the cache update runs in torch)."""
    if not isinstance(x, torch.Tensor):
        raise attnkit._error("AK1105", name=name, device=type(x).__name__, expected=f"a torch tensor on {device}")
    if x.device != device:
        raise attnkit._error("AK1105", name=name, device=str(x.device), expected=str(device))


def _index_tensor(x, name, batch, device):
    """An int32 (batch,) tensor on `device`, or the catalogued refusal."""
    attnkit._shape(x, 1, name, "(batch,)")
    _on(x, name, device)
    if x.shape[0] != batch:
        raise attnkit._error("AK1103", name=name, shape=list(x.shape), expected=f"({batch},)")
    if x.dtype not in (torch.int32, torch.int64):
        raise attnkit._error("AK1104", name=name, dtype=_dtype_text(x.dtype), expected="int32")
    if x.dtype == torch.int64:  # narrowed without wrapping: 2**32 + 3 is not 3
        if device.type == "cpu":
            if x.numel() and (int(x.min()) < -2**31 or int(x.max()) >= 2**31):
                raise attnkit._error("AK1012", what=name, value=f"{x.tolist()}"[:64], limit="the int32 range")
        else:  # not read back (no synchronisation): saturated, so the range checks downstream still see it
            x = x.clamp(-2**31, 2**31 - 1)
    return x.to(torch.int32)


def _page_size_for(seqlen_cache):
    """The page a contiguous cache is viewed in: the largest of 256 .. 16 dividing it (the sizes the GPU
    kernels tile well), else the whole sequence as one page."""
    return next((p for p in (256, 128, 64, 32, 16) if seqlen_cache % p == 0), seqlen_cache)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """Attention of q (batch, seqlen_q, heads, dim) over a KV cache: (batch_cache, seqlen_cache, kv_heads,
    dim), or pages (num_blocks, page_size, kv_heads, dim) listed per sequence by block_table (batch,
    max_blocks). k / v (batch, seqlen_new, kv_heads, dim), when given, are written into the cache at
    cache_seqlens (rotated first when rotary_cos / rotary_sin are given) and attended with it. Keys
    [cache_leftpad, cache_seqlens + seqlen_new) of each sequence are visible; causal and window masks align
    the queries with the last of them. Returns out, or (out, softmax_lse (batch, heads, seqlen_q))."""
    function = "flash_attn_with_kvcache"
    _inference_only(function, 0.0, alibi_slopes, q, k_cache, v_cache, k, v)
    b, sq, _, _ = attnkit._shape(q, 4, "q", "bshd")
    attnkit._shape(k_cache, 4, "k_cache", "bshd")
    attnkit._shape(v_cache, 4, "v_cache", "bshd")
    device = _device_of(q, k_cache=k_cache, v_cache=v_cache, k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                        block_table=block_table)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.layout != torch.strided:  # sparse: no strides to read the cache through
            raise attnkit._error("AK1112", name=name, type=f"a {cache.layout} tensor")
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise _refuse(function, "a cache whose last dim is strided", "the cache must have a contiguous last dim")
    if (k is None) != (v is None):
        raise _refuse(function, "k without v" if v is None else "v without k", "pass both new keys and values")
    if (rotary_cos is None) != (rotary_sin is None):
        raise _refuse(function, "rotary_cos without rotary_sin", "pass both tables")
    paged = block_table is not None
    if paged and (cache_batch_idx is not None or cache_leftpad is not None):
        raise _refuse(function, "cache_batch_idx or cache_leftpad with block_table",
                      "FlashAttention does not combine them: the block table already says where each sequence is")
    if paged:
        attnkit._shape(block_table, 2, "block_table", "(batch, max_blocks)")
        _same_dtype(block_table, "block_table", torch.int32)
        _same_rows(block_table, "block_table", (b, block_table.shape[1]))
        page = int(k_cache.shape[1])
        capacity = int(block_table.shape[1]) * page
    else:
        capacity = int(k_cache.shape[1])
    new = 0 if k is None else attnkit._shape(k, 4, "k", "bshd")[1]
    if k is not None:
        _same_rows(k, "k", (b, new, *k_cache.shape[2:]))
        _same_rows(v, "v", (b, new, *v_cache.shape[2:]))
        _same_dtype(k, "k", k_cache.dtype)
        _same_dtype(v, "v", v_cache.dtype)
    for name, table in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
        if table is not None:
            _same_dtype(table, name, q.dtype)  # as FlashAttention asks
    _same_rows(v_cache, "v_cache", (*k_cache.shape[:2], v_cache.shape[2], v_cache.shape[3]))
    if cache_seqlens is None:
        if k is not None:
            raise _refuse(function, "k / v without cache_seqlens", "the new keys go at cache_seqlens")
        lengths = torch.full((b,), capacity, dtype=torch.int32, device=device)
    elif isinstance(cache_seqlens, torch.Tensor):
        lengths = _index_tensor(cache_seqlens, "cache_seqlens", b, device)
    else:  # one length for every sequence, known here whatever the device
        length = attnkit._integer(cache_seqlens, "cache_seqlens")
        if not 0 <= length <= capacity - new:
            raise attnkit._error("AK1111", reason=f"cache_seqlens {length} + {new} new tokens must lie in "
                                                  f"[0, {capacity}], the cache's length")
        lengths = torch.full((b,), length, dtype=torch.int32, device=device)
    rows = None if cache_batch_idx is None else _index_tensor(cache_batch_idx, "cache_batch_idx", b, device)
    start = None if cache_leftpad is None else _index_tensor(cache_leftpad, "cache_leftpad", b, device)
    if device.type == "cpu":  # host values: check them before a single write
        _check_cache_ranges(lengths, new, capacity, rows, int(k_cache.shape[0]), start)
        if paged and block_table.numel() and (int(block_table.min()) < 0 or int(block_table.max()) >= k_cache.shape[0]):
            raise attnkit._error("AK1111", reason=f"block_table names pages outside [0, {k_cache.shape[0]})")

    q_ro = q
    if rotary_cos is not None:
        if k is None:
            raise _refuse(function, "rotary_cos without k / v", "FlashAttention rotates only with new keys")
        seqlen_ro, half = attnkit._shape(rotary_cos, 2, "rotary_cos", "(seqlen_ro, rotary_dim / 2)")
        if not 1 <= 2 * half <= q.shape[-1] or seqlen_ro < 1 or tuple(rotary_sin.shape) != tuple(rotary_cos.shape):
            raise _refuse(function, f"rotary tables of {list(rotary_cos.shape)} and {list(rotary_sin.shape)}",
                          f"both (seqlen_ro >= 1, rotary_dim / 2) with 0 < rotary_dim <= head dim {q.shape[-1]}")
        rotary_interleaved = attnkit._flag(rotary_interleaved, "rotary_interleaved")
        steps = torch.arange(new, device=device, dtype=torch.int32)
        k = _rotary(k, rotary_cos, rotary_sin, lengths[:, None] + steps, rotary_interleaved)
        left, right = attnkit._options(window_size, 0.0, None)[:2]
        per_query = causal or left >= 0 or right >= 0  # FlashAttention: one position for all of q otherwise
        q_steps = torch.arange(sq, device=device, dtype=torch.int32) if per_query else torch.zeros(
            sq, device=device, dtype=torch.int32)
        q_ro = _rotary(q, rotary_cos, rotary_sin, lengths[:, None] + q_steps, rotary_interleaved)

    checked = device.type == "cpu"
    if k is not None:
        _append(k_cache, v_cache, k, v, lengths, capacity, rows, block_table, checked)
    visible = _visible_lengths(lengths, new, start, capacity, checked)

    if paged:
        k_pages, v_pages, table = k_cache, v_cache, block_table
    else:
        k_pages, v_pages, table = _as_pages(k_cache, v_cache, rows, start, b, capacity)
    out = attnkit.attention_with_kvcache(_last_dim_contiguous(q_ro), k_pages, v_pages, visible.to(torch.int32),
                                         table, causal=causal, window_size=window_size, softcap=softcap,
                                         softmax_scale=softmax_scale, return_lse=return_softmax_lse)
    return out


def _check_cache_ranges(lengths, new, capacity, rows, batch_cache, start):
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) + new > capacity):
        raise attnkit._error("AK1111", reason=f"cache_seqlens {lengths.tolist()} + {new} new tokens must lie in "
                                              f"[0, {capacity}], the cache's length")
    if rows is not None and rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= batch_cache):
        raise attnkit._error("AK1111", reason=f"cache_batch_idx {rows.tolist()} must index the cache's "
                                              f"{batch_cache} sequences")
    if start is not None and start.numel() and (int(start.min()) < 0 or bool((start > lengths + new).any())):
        raise attnkit._error("AK1111", reason=f"cache_leftpad {start.tolist()} must lie in [0, cache_seqlens + new]")


def _visible_lengths(lengths, new, start, capacity, checked):
    """Keys per sequence: [start, lengths + new). Unchecked (CUDA) lengths are clamped into the cache:
    what lies past its end is not attended."""
    visible = lengths + new if start is None else lengths + new - start
    if checked:
        return visible
    return visible.clamp(0, capacity) if start is None else torch.minimum(visible.clamp(min=0), capacity - start)


def _append(k_cache, v_cache, k, v, lengths, capacity, rows, block_table, checked):
    """k / v (batch, new, kv_heads, dim) into the cache at positions lengths[b] + j, in place. Unchecked
    (CUDA) lengths are not read back: positions past the cache's end are not written."""
    b, new = k.shape[0], k.shape[1]
    # New rows that are views of the cache itself are read before anything is written.
    k, v = (x.clone() if x.untyped_storage().data_ptr() == cache.untyped_storage().data_ptr() else x
            for x, cache in ((k, k_cache), (v, v_cache)))
    positions = lengths[:, None].long() + torch.arange(new, device=k.device)  # (batch, new)
    inside = positions < capacity
    if not checked:
        # A row past the end rewrites what slot p - new holds (a no-op): those slots lie before the
        # sequence's first new row and differ from row to row, so no slot gets two writes.
        positions = torch.where(inside, positions, positions - new).clamp(0, capacity - 1)
    if block_table is None:
        seq = (torch.arange(b, device=k.device) if rows is None else rows.long())[:, None].expand(b, new)
        where = (seq, positions)
    else:
        page = k_cache.shape[1]
        where = (block_table.long().gather(1, positions // page), positions % page)
    if checked:  # every position lies inside
        k_cache[where] = k
        v_cache[where] = v
    else:  # rows past the end write back what their slot held
        keep = ~inside[..., None, None]
        k_cache[where] = torch.where(keep, k_cache[where], k)
        v_cache[where] = torch.where(keep, v_cache[where], v)


def _as_pages(k_cache, v_cache, rows, start, batch, capacity):
    """A contiguous cache (batch_cache, seqlen_cache, kv_heads, dim) as pages plus a block table, without a
    copy: pages of _page_size_for(seqlen_cache) tokens, or of one token when cache_leftpad shifts where each
    sequence starts."""
    page = 1 if start is not None else _page_size_for(capacity)
    per_seq = capacity // page

    def pages(cache):
        return cache.reshape(cache.shape[0] * per_seq, page, *cache.shape[2:])

    device = k_cache.device
    first = (torch.arange(batch, device=device) if rows is None else rows.long()) * per_seq
    if start is not None:
        first = first + start.long()
    table = first[:, None] + torch.arange(per_seq, device=device)
    table = table.clamp(max=k_cache.shape[0] * per_seq - 1).to(torch.int32)  # entries past a sequence: unread
    return pages(k_cache), pages(v_cache), table
