"""The sparse video backends from Python on the CPU: sliding_tile_attn through a
Deployment (mask strategy, video grid, dense skip steps, per-step windows),
sparge_attn and sol_attn as one-off calls, the gated MiniMax-H3 backends (the
gate kwarg, a numpy oracle of video_sparse_attn_h3, AK2118 on a checkpoint that
provides the gate), and their refusals."""
import json
import os

import numpy as np

import attnkit
from reference_numpy import attention_ref, hybrid_window_ref, rel_l2
from refusals import expect_refused

HERE = os.path.dirname(__file__)
STA_PROFILE = os.path.join(HERE, "..", "..", "tests", "select", "profiles", "sta-video.yaml")
RNG = np.random.default_rng(11)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def sta_mask(tmp_path):
    windows = {f"{step}_{layer}_{head}": [1, 1, 1] for step in (2, 3) for layer in (0, 1) for head in (0, 1)}
    path = tmp_path / "mask.json"
    path.write_text(json.dumps(windows))
    return str(path)


def test_sliding_tile_deployment(tmp_path):
    config = f"mask_strategy_file_path={sta_mask(tmp_path)},skip_time_steps=2,tile_size=2,4,4"
    dep = attnkit.Deployment(model=STA_PROFILE, platform="cpu", dtype="fp32", attention_backend="sliding_tile_attn",
                             attention_backend_config=config)
    layer = dep.layer("transformer", "self", 1)
    assert layer.backend == "sliding_tile_attn"
    assert "AK3003" in dep.layer("transformer", "cross", 0).decision["fallback_reason"]
    q, k, v = randn(1, 296, 2, 32), randn(1, 296, 2, 32), randn(1, 296, 2, 32)
    dense = attention_ref(q, k, v)[0]
    with dep.request(step=1):  # before skip_time_steps: dense
        out = layer(q, k, v, video_grid=(4, 8, 8))
    assert rel_l2(out, dense) < 1e-5
    with dep.request(step=2):  # 1x1x1 windows: each video query sees its tile and the text
        sparse = layer(q, k, v, video_grid=(4, 8, 8))
    assert rel_l2(sparse, dense) > 1e-3
    # The oracle: a video token sees the tokens of its own 2x4x4 tile and every text token.
    t, y, x = np.unravel_index(np.arange(256), (4, 8, 8))
    tile = (t // 2) * 4 + (y // 4) * 2 + x // 4
    visible = np.ones((296, 296), dtype=bool)
    visible[:256, :256] = tile[:, None] == tile[None, :]
    assert rel_l2(sparse, attention_ref(q, k, v, mask=visible)[0]) < 1e-5
    # Without the grid the backend cannot tile (AK2115); a step the file lacks is AK3109.
    with dep.request(step=2):
        expect_refused("AK2115", lambda: layer(q, k, v))
    with dep.request(step=4):
        expect_refused("AK3109", lambda: layer(q, k, v, video_grid=(4, 8, 8)))
    expect_refused("AK1014", lambda: layer(q, k, v, video_grid=(4, 8)))
    expect_refused("AK1014", lambda: layer(q, k, v, video_grid=(4, 8, 8.5)))
    expect_refused("AK1016", lambda: layer(q, k, v, video_grid=(8, 8, 8)))  # more tokens than the sequence


def test_sliding_tile_needs_its_strategy():
    expect_refused("AK3104", lambda: attnkit.Deployment(model=STA_PROFILE, platform="cpu", dtype="fp32",
                                                        attention_backend="sliding_tile_attn"))


def test_sparge_one_off_calls():
    q, k, v = randn(1, 512, 2, 64), randn(1, 512, 2, 64), randn(1, 512, 2, 64)
    out = attnkit.attention(q, k, v, backend="sparge_attn")
    assert attnkit.last_backend() == "sparge_attn"
    # Half the key blocks (topk 0.5) of iid noise, whose attention is nearly uniform: far from dense.
    assert np.all(np.isfinite(out)) and rel_l2(out, attention_ref(q, k, v)[0]) > 0.1
    short = randn(1, 100, 2, 64)
    assert rel_l2(attnkit.attention(short, short, short, backend="sparge_attn"),
                  attention_ref(short, short, short)[0]) < 1e-5  # under 128 tokens: dense
    expect_refused("AK2109", lambda: attnkit.attention(q, k[:, :, :1], v[:, :, :1], backend="sparge_attn"))


def test_sol_needs_a_request_context():
    import pytest
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 256, 2, 128, dtype=torch.bfloat16)
    expect_refused("AK3021", lambda: attnkit.attention(q, q, q, backend="sol_attn"))


def vsa_ref(q, k, v, gate, grid, sparsity):
    """video_sparse_attn_h3 (docs/sparse.md 5b) in float64 from token coordinates, one kv head per q head."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b, s, h, d = q.shape
    t, y, x = np.unravel_index(np.arange(s), grid)
    cube = ((t // 4) * (grid[1] // 4) + y // 4) * (grid[2] // 4) + x // 4
    nc = cube.max() + 1
    members = np.eye(nc)[cube] / 64.0  # [s, nc]: the mean over a cube's tokens
    qm, km, vm = (np.einsum("sc,bshd->bchd", members, a) for a in (q, k, v))
    scores = np.einsum("bahd,bchd->bhac", qm, km) / np.sqrt(d)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    coarse = np.einsum("bhac,bchd->bahd", p / p.sum(-1, keepdims=True), vm)
    keep = max(1, int(np.ceil((1 - sparsity) * nc - 1e-9)))
    order = np.argsort(-scores, axis=-1, kind="stable")[..., :keep]  # [b, h, a, keep]
    kept = np.zeros(scores.shape, bool)
    np.put_along_axis(kept, order, True, axis=-1)
    visible = kept[:, :, cube][:, :, :, cube]  # [b, h, s, s]: key j's cube kept by query i's cube
    fine = attention_ref(q, k, v, mask=visible)[0]
    return fine + np.asarray(gate, np.float64)[..., None] * coarse[:, cube]


def test_video_sparse_h3_with_and_without_gates():
    q, k, v = randn(1, 512, 2, 64), randn(1, 512, 2, 64), randn(1, 512, 2, 64)
    gate = RNG.uniform(size=(1, 512, 2)).astype(np.float32)
    out = attnkit.attention(q, k, v, backend="video_sparse_attn_h3", video_grid=(8, 8, 8), gate=gate)
    assert rel_l2(out, vsa_ref(q, k, v, gate, (8, 8, 8), 0.9)) < 1e-5
    plain = attnkit.attention(q, k, v, backend="video_sparse_attn_h3", video_grid=(8, 8, 8))
    zeros = attnkit.attention(q, k, v, backend="video_sparse_attn_h3", video_grid=(8, 8, 8), gate=np.zeros_like(gate))
    assert np.array_equal(plain, zeros) and rel_l2(plain, vsa_ref(q, k, v, 0 * gate, (8, 8, 8), 0.9)) < 1e-5
    expect_refused("AK1103", lambda: attnkit.attention(q, k, v, backend="video_sparse_attn_h3", video_grid=(8, 8, 8),
                                                       gate=gate.transpose(0, 2, 1)))
    expect_refused("AK1104", lambda: attnkit.attention(q, k, v, backend="video_sparse_attn_h3", video_grid=(8, 8, 8),
                                                       gate=gate.astype(np.float16)))
    expect_refused("AK2109", lambda: attnkit.attention(q, k, v, backend="cpu_flash", gate=gate))
    expect_refused("AK2116", lambda: attnkit.attention(q, k, v, backend="video_sparse_attn_h3", video_grid=(8, 8, 4)))


def test_h3_deployments_need_the_checkpoints_gates():
    q, k, v = randn(1, 512, 24, 128), randn(1, 512, 24, 128), randn(1, 512, 24, 128)
    gate = RNG.uniform(size=(1, 512, 24)).astype(np.float32)
    fast = attnkit.Deployment(model="fast-h3", platform="cpu", dtype="fp32", attention_backend="video_sparse_attn_h3")
    layer = fast.layer("transformer", "self", 0)
    assert layer.backend == "video_sparse_attn_h3"
    expect_refused("AK2118", lambda: layer(q, k, v, video_grid=(8, 8, 8)))
    assert np.all(np.isfinite(layer(q, k, v, video_grid=(8, 8, 8), gate=gate)))
    base = attnkit.Deployment(model="minimax-h3", platform="cpu", dtype="fp32", attention_backend="video_sparse_attn_h3")
    assert np.all(np.isfinite(base.layer("transformer", "self", 0)(q, k, v, video_grid=(8, 8, 8))))  # zero gates
    vdn = attnkit.Deployment(model="vdn-h3", platform="cpu", dtype="fp32")
    hybrid = vdn.layer("transformer", "self", 0)
    assert hybrid.backend == "hybrid_window_attn_h3"
    expect_refused("AK2118", lambda: hybrid(q, k, v))
    assert rel_l2(hybrid(q, k, v, gate=gate), hybrid_window_ref(q, k, v, gate, (512, 512))) < 1e-5
