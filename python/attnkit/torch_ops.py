"""attnkit as torch custom ops, so it can sit inside torch.compile graphs and
CUDA graphs. Registered when torch is importable: at `import attnkit` if torch
is already loaded, else on the first torch call.

    torch.ops.attnkit.attention(q, k, v, causal, ...)                       # [b, s, h, d]
    torch.ops.attnkit.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal, ...)   # packed
    torch.ops.attnkit.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, causal, ...)
    torch.ops.attnkit.scaled_dot_product_attention(query, key, value, is_causal, scale, backend)  # [b, h, s, d]

Each takes the keyword options of the Python functions as trailing arguments
(window_left, window_right, softcap, softmax_scale, sinks, backend) and
returns the output only (use the Python functions for the LSE)."""
from typing import Optional

import torch

import attnkit


@torch.library.custom_op("attnkit::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, window_left: int = -1,
                 window_right: int = -1, softcap: float = 0.0, softmax_scale: Optional[float] = None,
                 sinks: Optional[torch.Tensor] = None, backend: str = "auto") -> torch.Tensor:
    return attnkit.attention(q, k, v, causal=causal, window_size=(window_left, window_right), softcap=softcap,
                             softmax_scale=softmax_scale, sinks=sinks, backend=backend)


@attention_op.register_fake
def _attention_fake(q, k, v, causal=False, window_left=-1, window_right=-1, softcap=0.0, softmax_scale=None,
                    sinks=None, backend="auto"):
    # Shape/dtype propagation for torch.compile: out is [b, sq, hq, dv] in q's dtype.
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


@torch.library.custom_op("attnkit::attention_varlen", mutates_args=())
def attention_varlen_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                        cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool = False,
                        window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                        softmax_scale: Optional[float] = None, sinks: Optional[torch.Tensor] = None,
                        backend: str = "auto") -> torch.Tensor:
    return attnkit.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
                                    window_size=(window_left, window_right), softcap=softcap,
                                    softmax_scale=softmax_scale, sinks=sinks, backend=backend)


@attention_varlen_op.register_fake
def _attention_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                           window_left=-1, window_right=-1, softcap=0.0, softmax_scale=None, sinks=None,
                           backend="auto"):
    # out is [total_q, hq, dv] in q's dtype.
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


@torch.library.custom_op("attnkit::attention_with_kvcache", mutates_args=())
def attention_with_kvcache_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              cache_seqlens: torch.Tensor, block_table: torch.Tensor, causal: bool = True,
                              window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                              softmax_scale: Optional[float] = None, sinks: Optional[torch.Tensor] = None,
                              backend: str = "auto") -> torch.Tensor:
    return attnkit.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, causal=causal,
                                          window_size=(window_left, window_right), softcap=softcap,
                                          softmax_scale=softmax_scale, sinks=sinks, backend=backend)


@attention_with_kvcache_op.register_fake
def _attention_with_kvcache_fake(q, k_cache, v_cache, cache_seqlens, block_table, causal=True, window_left=-1,
                                 window_right=-1, softcap=0.0, softmax_scale=None, sinks=None, backend="auto"):
    # out is [b, sq, hq, dv] in q's dtype.
    return q.new_empty((*q.shape[:-1], v_cache.shape[-1]))


@torch.library.custom_op("attnkit::scaled_dot_product_attention", mutates_args=())
def scaled_dot_product_attention_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                    is_causal: bool = False, scale: Optional[float] = None,
                                    backend: str = "auto") -> torch.Tensor:
    return attnkit._sdpa(query, key, value, is_causal, scale, backend)


@scaled_dot_product_attention_op.register_fake
def _scaled_dot_product_attention_fake(query, key, value, is_causal=False, scale=None, backend="auto"):
    # out is [b, hq, sq, dv], contiguous, in query's dtype.
    return query.new_empty((*query.shape[:-1], value.shape[-1]))
