"""attnkit on NumPy arrays against an independent float64 NumPy reference."""
import numpy as np
import pytest

import attnkit
from reference_numpy import attention_ref, expand_block_mask, rel_l2
from refusals import expect_refused

RNG = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(1, 1), (17, 17), (33, 100), (100, 33)])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2), (7, 1)])
def test_matches_reference_fp32(causal, sq, sk, hq, hkv):
    q, k, v = randn(2, sq, hq, 64), randn(2, sk, hkv, 64), randn(2, sk, hkv, 64)
    out, lse = attnkit.attention(q, k, v, causal=causal, return_lse=True)
    ref, ref_lse = attention_ref(q, k, v, causal=causal)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (2, sq, hq, 64)
    assert np.all(np.isfinite(out))
    assert rel_l2(out, ref) < 1e-5
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), finite)  # empty causal rows: -inf
    assert rel_l2(lse[finite], ref_lse[finite]) < 1e-5


def test_window_softcap_sinks_scale():
    q, k, v = randn(1, 50, 4, 32), randn(1, 70, 2, 32), randn(1, 70, 2, 48)
    sinks = randn(4)
    out = attnkit.attention(q, k, v, window_size=(8, 3), softcap=4.0, softmax_scale=0.3, sinks=sinks)
    ref, _ = attention_ref(q, k, v, window=(8, 3), softcap=4.0, scale=0.3, sinks=sinks)
    assert out.shape == (1, 50, 4, 48)
    assert rel_l2(out, ref) < 1e-5


def test_fp16_inputs():
    q, k, v = (randn(2, 64, 4, 128, dtype=np.float16) for _ in range(3))
    out = attnkit.attention(q, k, v, causal=True)
    assert out.dtype == np.float16
    ref, _ = attention_ref(q, k, v, causal=True)
    assert rel_l2(out, ref) < 1e-2


def test_varlen_with_an_empty_sequence():
    lens_q, lens_k = [5, 0, 20], [9, 4, 20]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, k, v = randn(sum(lens_q), 4, 64), randn(sum(lens_k), 2, 64), randn(sum(lens_k), 2, 64)
    out, lse = attnkit.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True, return_lse=True)
    assert out.shape == q.shape and lse.shape == (4, sum(lens_q))
    for b in range(3):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if lens_q[b] == 0:
            continue
        ref, ref_lse = attention_ref(q[None, qs], k[None, ks], v[None, ks], causal=True)
        assert rel_l2(out[qs], ref[0]) < 1e-5
        assert rel_l2(lse[:, qs], ref_lse[0]) < 1e-5


def test_paged_kv_cache_decode():
    page, pages, b, hkv, d = 16, 12, 2, 2, 64
    k_cache, v_cache = randn(pages, page, hkv, d), randn(pages, page, hkv, d)
    table = np.array([[3, 7, 1, 0], [10, 2, 0, 0]], dtype=np.int32)
    seqlens = np.array([50, 20], dtype=np.int32)
    q = randn(b, 1, 8, d)
    out = attnkit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table)
    for i in range(b):
        kk = k_cache[table[i]].reshape(-1, hkv, d)[: seqlens[i]]
        vv = v_cache[table[i]].reshape(-1, hkv, d)[: seqlens[i]]
        ref, _ = attention_ref(q[i : i + 1], kk[None], vv[None], causal=True)
        assert rel_l2(out[i], ref[0]) < 1e-5


def test_force_backend_and_explicit_backend():
    q, k, v = randn(1, 8, 2, 32), randn(1, 8, 2, 32), randn(1, 8, 2, 32)
    with attnkit.force_backend("reference"):
        attnkit.attention(q, k, v)
        assert attnkit.last_backend() == "reference"
    attnkit.attention(q, k, v)
    assert attnkit.last_backend() != "reference"  # the oracle is never auto-picked
    attnkit.attention(q, k, v, backend="reference")
    assert attnkit.last_backend() == "reference"


def test_strided_inputs_are_read_in_place():
    base = randn(1, 16, 4, 2 * 64)
    q = base[..., :64]  # strided along the head dim's parent
    k, v = randn(1, 16, 4, 64), randn(1, 16, 4, 64)
    out = attnkit.attention(q, k, v)
    ref, _ = attention_ref(q, k, v)
    assert rel_l2(out, ref) < 1e-5


@pytest.mark.parametrize(
    "make, code",
    [
        (lambda: (randn(1, 4, 3, 32), randn(1, 4, 2, 32), randn(1, 4, 2, 32)), "AK1002"),  # 3 q heads over 2
        (lambda: (randn(4, 3, 32), randn(4, 3, 32), randn(4, 3, 32)), "AK1102"),  # rank 3 for bshd
        (lambda: (randn(1, 4, 2, 32), randn(1, 4, 2, 16), randn(1, 4, 2, 32)), "AK1103"),  # k head dim
        (lambda: (randn(1, 4, 2, 32), randn(1, 4, 2, 32).astype(np.float16), randn(1, 4, 2, 32)), "AK1104"),
        (lambda: (np.full((1, 4, 2, 32), np.nan, np.float32), randn(1, 4, 2, 32), randn(1, 4, 2, 32)), "AK1109"),
        (lambda: (randn(1, 4, 2, 64)[..., ::2], randn(1, 4, 2, 32), randn(1, 4, 2, 32)), "AK1106"),
    ],
)
def test_bad_input_raises_catalogued_error(make, code):
    expect_refused(code, attnkit.attention, *make())


def test_unknown_backend_names_the_nearest():
    q = randn(1, 4, 2, 32)
    with pytest.raises(attnkit.AttnkitError) as e:
        attnkit.attention(q, q, q, backend="refrence")
    assert e.value.code == "AK2002"
    assert "reference" in str(e.value)


def test_empty_batch_is_refused_not_crashed():
    q = np.zeros((0, 4, 2, 32), np.float32)
    with pytest.raises(attnkit.AttnkitError) as e:
        attnkit.attention(q, q, q)
    assert e.value.code == "AK1001"


def test_explain_returns_the_catalog_page():
    page = attnkit.explain("AK1002")
    assert page["code"] == "AK1002" and page["solutions"] and page["meaning"]
    assert "reference" in attnkit.backends()


def test_explicit_backend_beats_the_global_force():
    q = randn(1, 8, 2, 32)
    with attnkit.force_backend("reference"):
        attnkit.attention(q, q, q, backend="cpu_flash")
        assert attnkit.last_backend() == "cpu_flash"
        attnkit.attention(q, q, q)
        assert attnkit.last_backend() == "reference"
    attnkit.attention(q, q, q)
    assert attnkit.last_backend() == "cpu_flash"


def test_family_names_resolve_per_platform():
    q = randn(1, 8, 2, 32)
    attnkit.attention(q, q, q, backend="sdpa")  # the sdpa family is cpu_flash on the CPU
    assert attnkit.last_backend() == "cpu_flash"


def test_check_validates_a_deployment_without_a_gpu():
    ok = attnkit.check(["--model", "wan", "--platform", "cuda:sm90"])
    assert ok["ok"] and ok["platform"] == "cuda:sm90"
    assert {s["backend"] for s in ok["selections"]} == {"fa3"}
    bad = attnkit.check(["--model", "wan", "--platform", "cuda:sm80", "--attention-backend", "fa3"])
    assert not bad["ok"]
    assert "AK2102" in [d["code"] for d in bad["diagnostics"]]
    with pytest.raises(attnkit.AttnkitError) as e:
        attnkit.check(["--model", "wan", "--ring", "2"])
    assert e.value.code == "AK3107"


def test_select_returns_decisions_or_raises():
    decisions = attnkit.select(model="llama", platform="cuda:sm90")
    assert [d["role"] for d in decisions] == ["prefill", "decode"]
    assert all(d["decided_by"] == "auto" for d in decisions)
    with pytest.raises(attnkit.AttnkitError) as e:
        attnkit.select(model="minimax-h3", platform="cuda:sm90", ring_degree=2, attention_backend="sdpa")
    assert e.value.code.startswith("AK")


@pytest.mark.parametrize("hq,hkv,causal", [(4, 4, False), (8, 2, True)])
def test_sdpa_drop_in_takes_bhsd(hq, hkv, causal):
    q, k, v = randn(2, hq, 33, 64), randn(2, hkv, 33, 64), randn(2, hkv, 33, 64)
    out = attnkit.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.2)
    ref, _ = attention_ref(q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2), causal=causal, scale=0.2)
    assert out.shape == (2, hq, 33, 64) and out.flags["C_CONTIGUOUS"]
    assert rel_l2(out, ref.swapaxes(1, 2)) < 1e-5


@pytest.mark.parametrize(
    "kwargs, what",
    [({"attn_mask": np.ones((5, 5), bool)}, "attn_mask"), ({"dropout_p": 0.1}, "dropout_p"),
     ({"is_causal": True, "sq": 4}, "is_causal with seq_q != seq_k")],
)
def test_sdpa_drop_in_refuses_what_it_would_compute_differently(kwargs, what):
    sq = kwargs.pop("sq", 5)
    q, k = randn(1, 2, sq, 32), randn(1, 2, 5, 32)
    error = expect_refused("AK1011", attnkit.scaled_dot_product_attention, q, k, k, **kwargs)
    assert what in str(error)


@pytest.mark.parametrize(
    "call, code",
    [
        (lambda q: attnkit.attention([[1.0]], q, q), "AK1112"),  # a list is not an array
        (lambda q: attnkit.attention(q, None, q), "AK1101"),
        (lambda q: attnkit.attention(q, q, q, window_size="wide"), "AK1004"),
        (lambda q: attnkit.attention(q, q, q, softcap="soft"), "AK1005"),
        (lambda q: attnkit.attention(q, q, q, softmax_scale=[0.1]), "AK1006"),
        (lambda q: attnkit.attention(q, q, q, sinks=[0.0, 0.0]), "AK1112"),
        (lambda q: attnkit.attention_varlen(q[0], q[0], q[0], [0, 4], [0, 4], 4, 4), "AK1112"),
        (lambda q: attnkit.attention_with_kvcache(q, q, q, np.array([4], np.int32), np.array([0], np.int32)), "AK1102"),
    ],
)
def test_python_arguments_of_the_wrong_kind_are_catalogued(call, code):
    expect_refused(code, call, randn(1, 4, 2, 32))


@pytest.mark.parametrize("layout", [(1, 1), (2, 1), (1, 4), (2, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_block_sparse_lists(layout, causal):
    b, sq, sk, hq, hkv, bq, bk = 2, 100, 130, 4, 2, 32, 16
    q, k, v = randn(b, sq, hq, 64), randn(b, sk, hkv, 64), randn(b, sk, hkv, 64)
    mask = (RNG.random((*layout, -(-sq // bq), -(-sk // bk))) < 0.5).astype(np.uint8)
    mask[0, 0, 1, :] = 0  # an empty row: output 0, LSE -inf
    offsets, indices = attnkit.block_sparse_from_mask(mask, sq, sk, bq, bk)
    assert offsets.dtype == np.int32 and offsets.shape == (mask.shape[0] * mask.shape[1] * mask.shape[2] + 1,)
    assert np.array_equal(attnkit.block_sparse_dense_mask(offsets, indices, layout, sq, sk, bq, bk), mask)
    out, lse = attnkit.attention(q, k, v, causal=causal, return_lse=True, block_offsets=offsets,
                                 block_indices=indices, block_q=bq, block_k=bk, block_layout=layout)
    ref, ref_lse = attention_ref(q, k, v, causal=causal, mask=expand_block_mask(mask, bq, bk, sq, sk))
    assert rel_l2(out, ref) < 1e-5
    assert np.all(out[:, bq:2 * bq, 0] == 0) if layout == (1, 1) else np.all(out[0, bq:2 * bq, 0] == 0)
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), finite)
    assert rel_l2(lse[finite], ref_lse[finite]) < 1e-5
    # The dense mask convenience gives the same result.
    again = attnkit.attention(q, k, v, causal=causal, block_mask=mask, block_q=bq, block_k=bk)
    assert np.array_equal(again, out)


def test_block_sparse_refusals():
    q = k = v = randn(2, 64, 2, 32)
    offsets, indices = attnkit.block_sparse_from_mask(np.ones((1, 1, 2, 4), np.uint8), 64, 64, 32, 16)
    indices[1] = 7  # past the last key block (4)
    expect_refused("AK1115", lambda: attnkit.attention(q, k, v, block_offsets=offsets, block_indices=indices,
                                                       block_q=32, block_k=16))
    expect_refused("AK1008", lambda: attnkit.attention(q, k, v, block_mask=np.ones((1, 1, 2, 2), np.uint8),
                                                       block_q=40, block_k=32))
    # 2 sequences, 2 heads: lists per sequence or per head both give 5 offsets.
    per = attnkit.block_sparse_from_mask(np.ones((2, 1, 2, 4), np.uint8), 64, 64, 32, 16)
    expect_refused("AK1103", lambda: attnkit.attention(q, k, v, block_offsets=per[0], block_indices=per[1],
                                                       block_q=32, block_k=16))
    out = attnkit.attention(q, k, v, block_offsets=per[0], block_indices=per[1], block_q=32, block_k=16,
                            block_layout=(2, 1))
    assert rel_l2(out, attention_ref(q, k, v)[0]) < 1e-5  # every block listed: dense
