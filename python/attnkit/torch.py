"""attnkit.torch: a Deployment layer as a torch nn.Module, for DiT and LLM blocks.

    dep = attnkit.Deployment(model="wan")
    class Block(torch.nn.Module):
        def __init__(self, i):
            self.attn = attnkit.torch.Attention(dep, "transformer", "self", i)
        def forward(self, q, k, v):                      # [batch, seq, heads, dim]
            return self.attn(q, k, v)

The module calls torch.ops.attnkit.layer_attention (and _varlen /
_with_kvcache), custom ops like those of attnkit.torch_ops: torch.compile sees
one opaque op (its fake implementation gives the output's shape), and on CUDA
the work is queued on the current stream, so a CUDA graph captures it. Plan each
shape before capturing (run it once): a captured graph replays the plan it saw,
so a request applied later does not reach it. The layer is passed to the op as
an int handle (Layer.id)."""
from typing import List, Optional

import torch

from . import _error, _flag, _integer, _options, _require_array, _video_grid
from .deployment import Layer, _layers


def _layer(handle):
    return _layers[handle]


@torch.library.custom_op("attnkit::layer_attention", mutates_args=())
def layer_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, causal: bool,
                       window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                       softmax_scale: Optional[float] = None, sinks: Optional[torch.Tensor] = None,
                       video_grid: Optional[List[int]] = None, gate: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _layer(layer)(q, k, v, causal=causal, window_size=(window_left, window_right), softcap=softcap,
                         softmax_scale=softmax_scale, sinks=sinks, video_grid=video_grid, gate=gate)


@layer_attention_op.register_fake
def _layer_attention_fake(q, k, v, layer, causal, window_left=-1, window_right=-1, softcap=0.0, softmax_scale=None,
                          sinks=None, video_grid=None, gate=None):
    return q.new_empty((*q.shape[:-1], v.shape[-1]))  # [b, sq, hq, dv]


@torch.library.custom_op("attnkit::layer_attention_varlen", mutates_args=())
def layer_attention_varlen_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                              cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, layer: int,
                              causal: bool, window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                              softmax_scale: Optional[float] = None,
                              sinks: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _layer(layer).varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
                                window_size=(window_left, window_right), softcap=softcap, softmax_scale=softmax_scale,
                                sinks=sinks)


@layer_attention_varlen_op.register_fake
def _layer_attention_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, layer, causal,
                                 window_left=-1, window_right=-1, softcap=0.0, softmax_scale=None, sinks=None):
    return q.new_empty((*q.shape[:-1], v.shape[-1]))  # [total_q, hq, dv]


@torch.library.custom_op("attnkit::layer_attention_with_kvcache", mutates_args=())
def layer_attention_with_kvcache_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                    cache_seqlens: torch.Tensor, block_table: torch.Tensor, layer: int, causal: bool,
                                    window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                                    softmax_scale: Optional[float] = None,
                                    sinks: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _layer(layer).with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, causal=causal,
                                      window_size=(window_left, window_right), softcap=softcap,
                                      softmax_scale=softmax_scale, sinks=sinks)


@layer_attention_with_kvcache_op.register_fake
def _layer_attention_with_kvcache_fake(q, k_cache, v_cache, cache_seqlens, block_table, layer, causal,
                                       window_left=-1, window_right=-1, softcap=0.0, softmax_scale=None, sinks=None):
    return q.new_empty((*q.shape[:-1], v_cache.shape[-1]))  # [b, sq, hq, dv]


class Attention(torch.nn.Module):
    """Attention for layer `index` of (component, role) in `deployment`. The mask and
    options are the layer's (causal=None: the mask the profile declares for the role).

    forward(q, k, v)                                        dense, [batch, seq, heads, dim]
    forward(q, k, v, video_grid=(T, H, W), gate=g)          the sparse video backends: the call's latent
                                                            grid, and the gate of the gated ones (float32
                                                            [batch, seq, heads]; docs/sparse.md)
    forward(q, k, v, cu_seqlens_q=, cu_seqlens_k=, max_seqlen_q=, max_seqlen_k=)   packed varlen
    forward(q, k_cache, v_cache, cache_seqlens=, block_table=)                     paged KV cache
    """

    def __init__(self, deployment, component, role, index=0, *, causal=None, window_size=(-1, -1), softcap=0.0,
                 softmax_scale=None):
        super().__init__()
        self.layer: Layer = deployment.layer(component, role, index)
        # Checked as attnkit.attention checks them (AK1014, AK1004, AK1005, AK1006), not bool() / int() /
        # float(): causal="no" was True, window_size=(1.7, 0) was (1, 0).
        self.causal = self.layer.causal if causal is None else _flag(causal, "causal")
        self.window_left, self.window_right, self.softcap, self.softmax_scale = _options(window_size, softcap,
                                                                                         softmax_scale)

    def forward(self, q, k, v, *, sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                max_seqlen_k=None, cache_seqlens=None, block_table=None, video_grid=None, gate=None):
        if sinks is not None and not isinstance(sinks, torch.Tensor):
            _require_array(sinks, "sinks")  # AK1101 / AK1112; a numpy array is still no tensor for the op
            raise _error("AK1105", name="sinks", device=type(sinks).__name__, expected="a torch tensor")
        options = (self.causal, self.window_left, self.window_right, self.softcap, self.softmax_scale, sinks)
        if video_grid is not None or gate is not None:
            if block_table is not None or cu_seqlens_q is not None:
                raise _error("AK1011", function="attnkit.torch.Attention.forward", argument="video_grid / gate",
                             reason="they belong to dense [batch, seq, heads, dim] calls of the sparse video "
                                    "backends, not to packed or paged ones")
            grid = _video_grid(video_grid)  # a triple of ints (AK1014 otherwise); the layer checks its sides
            return torch.ops.attnkit.layer_attention(q, k, v, self.layer.id, *options,
                                                     None if grid is None else list(grid), gate)
        if block_table is not None:
            return torch.ops.attnkit.layer_attention_with_kvcache(q, k, v, cache_seqlens, block_table, self.layer.id,
                                                                  *options)
        if cu_seqlens_q is not None:
            lengths = [_integer(x, name) for x, name in ((max_seqlen_q, "max_seqlen_q"), (max_seqlen_k, "max_seqlen_k"))]
            return torch.ops.attnkit.layer_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *lengths,
                                                            self.layer.id, *options)
        return torch.ops.attnkit.layer_attention(q, k, v, self.layer.id, *options)

    def extra_repr(self):
        d = self.layer.decision
        return f"{self.layer.component}.{self.layer.role}[{self.layer.index}], {d['backend']} ({d['decided_by']})"
