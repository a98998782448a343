"""The sparse video backends from Python on the CPU: sliding_tile_attn through a
Deployment (mask strategy, video grid, dense skip steps, per-step windows),
sparge_attn and sol_attn as one-off calls, and their refusals."""
import json
import os

import numpy as np

import attnkit
from reference_numpy import attention_ref, rel_l2
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
