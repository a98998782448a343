"""An independent float64 NumPy attention, the oracle of the Python tests."""
import numpy as np


def attention_ref(q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None, sinks=None, mask=None):
    """q [b, sq, h, d], k/v [b, sk, hkv, d]; mask: bool, broadcast to [b, h, sq, sk], True = visible.
    Returns (out [b, sq, h, dv], lse [b, h, sq])."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    k = np.repeat(k, h // hkv, axis=2)
    v = np.repeat(v, h // hkv, axis=2)
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    left, right = window
    if causal:
        right = 0
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    diag = i + sk - sq
    visible = np.ones((sq, sk), dtype=bool)
    if left >= 0:
        visible &= j >= diag - left
    if right >= 0:
        visible &= j <= diag + right
    visible = visible[None, None]
    if mask is not None:
        visible = visible & np.asarray(mask, dtype=bool)
    s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    if sinks is not None:
        m = np.maximum(m, np.asarray(sinks, np.float64)[None, :, None, None])
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    denom = p.sum(axis=-1, keepdims=True)
    if sinks is not None:
        denom = denom + np.exp(np.asarray(sinks, np.float64)[None, :, None, None] - m_safe)
    out = np.einsum("bhqk,bkhd->bqhd", np.where(denom > 0, p / np.where(denom > 0, denom, 1), 0.0), v)
    with np.errstate(divide="ignore"):
        lse = np.where(denom[..., 0] > 0, m_safe[..., 0] + np.log(np.where(denom[..., 0] > 0, denom[..., 0], 1)),
                       -np.inf)
    return out, lse


def expand_block_mask(block_mask, block_q, block_k, sq, sk):
    """A [lb, lh, q blocks, k blocks] block mask as the element mask [lb, lh, sq, sk] it stands for."""
    m = np.repeat(np.repeat(np.asarray(block_mask, dtype=bool), block_q, axis=2), block_k, axis=3)
    return m[:, :, :sq, :sk]


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def hybrid_window_ref(q, k, v, gate, window, scale=None):
    """hybrid_window_attn_h3 (docs/sparse.md 5c) in float64: softmax over the window (left, right)
    plus gate * linear attention with phi = elu + 1, causal when right == 0. gate [b, sq, h]."""
    soft = attention_ref(q, k, v, window=window, scale=scale)[0]
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    h = q.shape[2]
    k = np.repeat(k, h // k.shape[2], axis=2)
    v = np.repeat(v, h // v.shape[2], axis=2)
    phi = lambda x: np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))  # noqa: E731
    w = np.einsum("bqhd,bkhd->bhqk", phi(q), phi(k))  # phi(q_i) . phi(k_j)
    if window[1] == 0:
        w = np.where(np.tril(np.ones(w.shape[-2:], bool))[None, None], w, 0.0)
    lin = np.einsum("bhqk,bkhd->bqhd", w, v) / w.sum(-1).transpose(0, 2, 1)[..., None]
    return soft + np.asarray(gate, np.float64)[..., None] * lin
