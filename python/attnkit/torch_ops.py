"""attnkit as a torch custom op (torch.ops.attnkit.attention), so it can sit
inside torch.compile graphs and CUDA graphs. Registered when torch is importable:
at `import attnkit` if torch is already loaded, else on the first torch call."""
from typing import Optional

import torch

import attnkit


@torch.library.custom_op("attnkit::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, window_left: int = -1,
                 window_right: int = -1, softcap: float = 0.0, softmax_scale: Optional[float] = None,
                 backend: str = "auto") -> torch.Tensor:
    return attnkit.attention(q, k, v, causal=causal, window_size=(window_left, window_right), softcap=softcap,
                             softmax_scale=softmax_scale, backend=backend)


@attention_op.register_fake
def _attention_fake(q, k, v, causal=False, window_left=-1, window_right=-1, softcap=0.0, softmax_scale=None,
                    backend="auto"):
    # Shape/dtype propagation for torch.compile: out is [b, sq, hq, dv] in q's dtype.
    return q.new_empty((*q.shape[:-1], v.shape[-1]))
