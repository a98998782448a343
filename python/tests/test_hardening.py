"""Issue 20 through the Python module, class by class: each input used to crash
the interpreter, read past a buffer, return a wrong result or raise a bare
TypeError / OverflowError / MemoryError; now it is an AttnkitError with a
catalogued code, or the right result."""
import numpy as np
import pytest

import attnkit
from guarded import SparseRegion, guarded
from reference_numpy import attention_ref, rel_l2
from refusals import expect_refused

RNG = np.random.default_rng(20)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def varlen_inputs(lens_q=(4, 0, 9), lens_k=(12, 3, 5)):
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    return randn(sum(lens_q), 2, 16), randn(sum(lens_k), 1, 16), randn(sum(lens_k), 1, 16), cu_q, cu_k


# ---- 32-bit overflow ----------------------------------------------------------------

@pytest.mark.parametrize("backend", ["reference", "cpu_flash"])
def test_huge_window_sides_are_unbounded_not_wrapped(backend):
    q, k, v = randn(1, 17, 2, 32), randn(1, 40, 2, 32), randn(1, 40, 2, 32)
    out = attnkit.attention(q, k, v, window_size=(2**31 - 1, 2**31 - 1), backend=backend)
    assert rel_l2(out, attention_ref(q, k, v)[0]) < 1e-5
    out = attnkit.attention(q, k, v, window_size=(2**31 - 1, 0), backend=backend)
    assert rel_l2(out, attention_ref(q, k, v, causal=True)[0]) < 1e-5


@pytest.mark.parametrize("window", [(2**31, 0), (0, -2**31 - 1), (2**63, 0), (2**80, 5)])
def test_window_sides_past_int32_are_refused(window):
    q = randn(1, 8, 2, 32)
    expect_refused("AK1012", attnkit.attention, q, q, q, window_size=window)


def test_sizes_past_int32_and_the_sequence_limit_are_refused():
    q, k, v, cu_q, cu_k = varlen_inputs()
    expect_refused("AK1012", attnkit.attention_varlen, q, k, v, cu_q, cu_k, 2**31, 12)
    expect_refused("AK1012", attnkit.attention_varlen, q, k, v, cu_q, cu_k, 2**64, 12)
    expect_refused("AK1012", attnkit.attention_varlen, q, k, v, cu_q, cu_k, 2**30 + 1, 12)


def test_offsets_past_2_to_31_elements_through_strides():
    """q, k and v whose second sequence starts 2^31 + 64 elements after the first,
    in a sparse mapping (only the touched pages exist): computed, not wrapped."""
    b, s, h, d = 2, 24, 2, 16
    stride0 = 2**31 + 64
    block = s * h * d  # one sequence of one tensor, contiguous
    region = SparseRegion((stride0 + 3 * block) * 4)
    try:
        def place(slot, values):
            view = np.lib.stride_tricks.as_strided(region.floats[slot * block:], shape=(b, s, h, d),
                                                   strides=(stride0 * 4, h * d * 4, d * 4, 4))
            view[...] = values
            return view
        q0, k0, v0 = randn(b, s, h, d), randn(b, s, h, d), randn(b, s, h, d)
        q, k, v = place(0, q0), place(1, k0), place(2, v0)
        assert q.strides[0] // 4 > 2**31
        for backend in ("reference", "cpu_flash"):
            out = attnkit.attention(q, k, v, causal=True, backend=backend)
            assert rel_l2(out, attention_ref(q0, k0, v0, causal=True)[0]) < 1e-5, backend
        del q, k, v
    finally:
        region.close()


def test_parallel_degrees_do_not_wrap():
    r = attnkit.check(["--model", "wan", "--platform", "cuda:sm90", "--ring-degree", "65536",
                       "--ulysses-degree", "65537", "--sp-degree", "65536"])
    assert not r["ok"]
    assert any(d["code"] == "AK5001" and "4295032832" in d["message"] for d in r["diagnostics"])
    r = attnkit.check(["--model", "wan", "--platform", "cuda:sm4294967386"])
    assert [d["code"] for d in r["diagnostics"]] == ["AK2112"]


# ---- index tensors of the wrong dtype or length, at the end of a guarded page --------

@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.float16, np.uint16])
@pytest.mark.parametrize("which", ["cu_seqlens_q", "cu_seqlens_k"])
def test_narrow_cu_seqlens_are_refused_before_a_read(dtype, which):
    q, k, v, cu_q, cu_k = varlen_inputs()
    args = {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
    args[which] = guarded(args[which], dtype)
    expect_refused("AK1104", attnkit.attention_varlen, q, k, v, args["cu_seqlens_q"], args["cu_seqlens_k"], 9, 12)


@pytest.mark.parametrize("length", [0, 1, 2, 3])
def test_short_cu_seqlens_are_refused_before_a_read(length):
    q, k, v, cu_q, cu_k = varlen_inputs()
    short = guarded(cu_k[:length], np.int32)
    with pytest.raises(attnkit.AttnkitError) as e:
        attnkit.attention_varlen(q, k, v, cu_q, short, 9, 12)
    assert e.value.code in ("AK1103", "AK1001")


@pytest.mark.parametrize("backend", ["reference", "cpu_flash"])
def test_exact_index_tensors_at_a_guard_page_run(backend):
    q, k, v, cu_q, cu_k = varlen_inputs()
    out = attnkit.attention_varlen(q, k, v, guarded(cu_q, np.int32), guarded(cu_k, np.int32), 9, 12, backend=backend)
    assert out.shape == q.shape


def paged_inputs():
    page, pages, hkv, d = 16, 6, 2, 16
    k_cache, v_cache = randn(pages, page, hkv, d), randn(pages, page, hkv, d)
    table = np.array([[3, 1, 0], [5, 2, 4]], np.int32)
    seqlens = np.array([40, 20], np.int32)
    return randn(2, 1, 4, d), k_cache, v_cache, seqlens, table


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.float16])
def test_narrow_paged_tables_are_refused_before_a_read(dtype):
    q, kc, vc, seqlens, table = paged_inputs()
    expect_refused("AK1104", attnkit.attention_with_kvcache, q, kc, vc, guarded(seqlens, dtype), table)
    expect_refused("AK1104", attnkit.attention_with_kvcache, q, kc, vc, seqlens, guarded(table, dtype))


@pytest.mark.parametrize("backend", ["reference", "cpu_flash"])
def test_guarded_paged_tables_run_and_agree(backend):
    q, kc, vc, seqlens, table = paged_inputs()
    out = attnkit.attention_with_kvcache(q, kc, vc, guarded(seqlens, np.int32), guarded(table, np.int32), backend=backend)
    for i in range(2):
        kk = kc[table[i]].reshape(-1, 2, 16)[: seqlens[i]]
        vv = vc[table[i]].reshape(-1, 2, 16)[: seqlens[i]]
        assert rel_l2(out[i], attention_ref(q[i:i + 1], kk[None], vv[None], causal=True)[0][0]) < 1e-5


# ---- metadata that lies ----------------------------------------------------------------

@pytest.mark.parametrize("backend", ["reference", "cpu_flash"])
def test_max_seqlen_below_the_real_lengths_is_refused(backend):
    q, k, v, cu_q, cu_k = varlen_inputs()
    expect_refused("AK1108", attnkit.attention_varlen, q, k, v, cu_q, cu_k, 5, 12, backend=backend)
    expect_refused("AK1108", attnkit.attention_varlen, q, k, v, cu_q, cu_k, 9, 4, backend=backend)


@pytest.mark.parametrize("backend", ["reference", "cpu_flash"])
@pytest.mark.parametrize("which", ["k", "v"])
def test_nonfinite_values_in_the_read_pages_are_refused(backend, which):
    q, kc, vc, seqlens, table = paged_inputs()
    cache = kc if which == "k" else vc
    cache[table[1, 1], 3, 1, 7] = np.inf  # sequence 1, key 19 (read)
    expect_refused("AK1109", attnkit.attention_with_kvcache, q, kc, vc, seqlens, table, backend=backend)


@pytest.mark.parametrize("backend", ["reference", "cpu_flash"])
def test_nonfinite_values_outside_the_read_pages_are_ignored(backend):
    q, kc, vc, seqlens, table = paged_inputs()
    kc[table[1, 1], 4:] = np.nan  # sequence 1 reads 20 keys: slots 4.. of its second page are unused
    vc[table[0, 2], 8:] = np.nan  # sequence 0 reads 40 keys: slots 8.. of its third page are unused
    out = attnkit.attention_with_kvcache(q, kc, vc, seqlens, table, backend=backend)
    assert np.all(np.isfinite(out))


# ---- silently accepted values -----------------------------------------------------------

def test_a_degree_of_zero_is_passed_to_the_check_not_dropped():
    with pytest.raises(attnkit.AttnkitError) as e:
        attnkit.select(model="wan", platform="cuda:sm90", ring_degree=0)
    assert e.value.code == "AK5005"


@pytest.mark.parametrize("kwargs, code", [
    ({"softcap": 1e-30}, "AK1005"), ({"softcap": 1e30}, "AK1005"), ({"softcap": float("nan")}, "AK1005"),
    ({"softmax_scale": 1e-30}, "AK1006"), ({"softmax_scale": 1e30}, "AK1006"), ({"softmax_scale": -0.1}, "AK1006"),
])
def test_extreme_softcap_and_scale_are_refused(kwargs, code):
    q = randn(1, 8, 2, 32)
    expect_refused(code, attnkit.attention, q, q, q, **kwargs)


def test_scores_that_overflow_fp32_are_refused_not_returned():
    q = np.full((1, 8, 1, 16), 1e20, np.float32)
    q[..., ::2] = -1e20
    k = np.full((1, 8, 1, 16), 1e20, np.float32)
    v = randn(1, 8, 1, 16)
    expect_refused("AK1114", attnkit.attention, q, k, v, backend="cpu_flash")
    out = attnkit.attention(q, k, v, backend="reference")  # fp64: exact
    assert rel_l2(out, attention_ref(q, k, v)[0]) < 1e-5


def test_strided_sinks_are_read_through_their_stride():
    q, k, v = randn(1, 12, 4, 32), randn(1, 12, 2, 32), randn(1, 12, 2, 32)
    spread = randn(12)
    out = attnkit.attention(q, k, v, sinks=spread[::3])
    assert rel_l2(out, attention_ref(q, k, v, sinks=spread[::3])[0]) < 1e-5


# ---- refusals with a code ---------------------------------------------------------------

def test_read_only_inputs_are_inputs():
    q, k, v = randn(1, 8, 2, 32), randn(1, 8, 2, 32), randn(1, 8, 2, 32)
    for x in (q, k, v):
        x.setflags(write=False)
    assert rel_l2(attnkit.attention(q, k, v), attention_ref(q, k, v)[0]) < 1e-5


@pytest.mark.parametrize("backend", [None, 3, b"cpu_flash", ["cpu_flash"]])
def test_backend_names_that_are_not_strings(backend):
    q = randn(1, 8, 2, 32)
    expect_refused("AK1014", attnkit.attention, q, q, q, backend=backend)


@pytest.mark.parametrize("value", [2.5, "4", None, [4]])
def test_max_seqlen_that_is_not_an_integer(value):
    q, k, v, cu_q, cu_k = varlen_inputs()
    expect_refused("AK1014", attnkit.attention_varlen, q, k, v, cu_q, cu_k, value, 12)


@pytest.mark.parametrize("window", [(2.5, 0), (0, 1.0), ("8", 0), (1, 2, 3), (4,), 7])
def test_window_sides_that_are_not_integers_are_refused_not_truncated(window):
    q = randn(1, 8, 2, 32)
    expect_refused("AK1004", attnkit.attention, q, q, q, window_size=window)


@pytest.mark.parametrize("flag", ["yes", 2, None, [True]])
def test_flags_that_are_not_booleans(flag):
    q = randn(1, 8, 2, 32)
    expect_refused("AK1014", attnkit.attention, q, q, q, causal=flag)
    expect_refused("AK1014", attnkit.scaled_dot_product_attention, q, q, q, is_causal=flag)


def test_explain_of_a_typo_names_the_nearest_code():
    err = expect_refused("AK0001", attnkit.explain, "AK1O02")
    assert "AK1002" in str(err)
    assert attnkit.explain(" ak1002 ")["code"] == "AK1002"


@pytest.mark.parametrize("args", ["--model wan", None, 7])
def test_check_wants_a_list_of_flags(args):
    expect_refused("AK3107", attnkit.check, args)


def test_host_allocations_past_memory_are_refused_before_allocating():
    # A broadcast (stride 0 except the head dim) view: a 2^42-element q that costs
    # nothing, whose 16 TiB output no machine has.
    q = np.broadcast_to(randn(1, 1, 1, 64), (1, 2**30, 64, 64))
    expect_refused("AK1013", attnkit.attention, q, q, q, backend="reference")


# ---- consistency ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_, np.complex64])
def test_attention_and_sdpa_refuse_a_dtype_with_the_same_code(dtype):
    x = randn(1, 2, 8, 32).astype(dtype)
    a = expect_refused("AK1007", attnkit.attention, x.swapaxes(1, 2), x.swapaxes(1, 2), x.swapaxes(1, 2))
    b = expect_refused("AK1007", attnkit.scaled_dot_product_attention, x, x, x)
    assert a.code == b.code


def test_strings_that_are_not_utf8_are_catalogued_not_type_errors():
    q = randn(1, 8, 2, 32)
    expect_refused("AK2002", attnkit.attention, q, q, q, backend="\udcff")
    expect_refused("AK0004", attnkit.explain, "\udcff")  # U+FFFD: a text no page covers
    expect_refused("AK1014", attnkit.explain, 1002)
    r = attnkit.check(["--model", "\udcffwan", "--platform", "cpu"])
    assert [d["code"] for d in r["diagnostics"]] == ["AK4020"]


def test_lone_surrogates_that_surrogateescape_cannot_carry_are_replaced_too():
    # '\ud800' (not one of surrogateescape's '\udc80'..'\udcff') raised UnicodeEncodeError.
    q = randn(1, 8, 2, 32)
    expect_refused("AK2002", attnkit.attention, q, q, q, backend="\ud800")
    expect_refused("AK0004", attnkit.explain, "\ud800\udcff")
    r = attnkit.check(["--model", "\ud800wan", "--platform", "cpu"])
    assert [d["code"] for d in r["diagnostics"]] == ["AK4020"]


# ---- Python arguments past what the native layer takes --------------------------------

def test_numbers_past_the_double_range_are_refused_not_overflow_errors():
    q = randn(1, 8, 2, 32)
    expect_refused("AK1005", attnkit.attention, q, q, q, softcap=2**1024)
    expect_refused("AK1006", attnkit.attention, q, q, q, softmax_scale=-2**2000)
    x = q.swapaxes(1, 2)
    expect_refused("AK1006", attnkit.scaled_dot_product_attention, x, x, x, scale=2**2000)
    expect_refused("AK1011", attnkit.scaled_dot_product_attention, x, x, x, dropout_p=2**2000)
    expect_refused("AK1014", attnkit.scaled_dot_product_attention, x, x, x, enable_gqa="no")  # was ignored


def test_force_backend_takes_a_name_and_auto_forces_nothing():
    q = randn(1, 8, 2, 32)
    for name in (None, 5):
        with pytest.raises(attnkit.AttnkitError) as e:
            with attnkit.force_backend(name):
                pass
        assert e.value.code == "AK1014"  # was a nanobind TypeError
    with attnkit.force_backend("auto"):  # was AK2002: unknown attention backend 'auto'
        attnkit.attention(q, q, q)
    with attnkit.force_backend("AUTO"):
        attnkit.attention(q, q, q)
    assert attnkit.last_backend() == "cpu_flash"


@pytest.fixture(scope="module")
def wan_cpu():
    return attnkit.Deployment(model="wan", platform="cpu", dtype="fp32")


@pytest.mark.parametrize("args, code", [
    ((None, "self"), "AK1014"), (("transformer", 5), "AK1014"),      # nanobind TypeErrors
    (("transformer", "self", "a"), "AK1014"),                       # ValueError of int()
    (("transformer", "self", None), "AK1014"),                      # TypeError of int()
    (("transformer", "self", 1.7), "AK1014"),                       # was layer 1, silently
    (("transformer", "self", 2**70), "AK1012"),                     # nanobind TypeError
    (("transformer", "self", 2**40), "AK3018"),
    (("\ud800", "self"), "AK3018"),
])
def test_deployment_layer_arguments_are_catalogued(wan_cpu, args, code):
    expect_refused(code, wan_cpu.layer, *args)


@pytest.mark.parametrize("kwargs, code", [
    ({"step": "x"}, "AK1014"), ({"step": 2.5}, "AK1014"), ({"step": -5}, "AK1014"), ({"step": 2**70}, "AK1012"),
    ({"attention_backend_override": 5}, "AK1014"), ({"attention_backend_override": "\ud800"}, "AK2002"),
])
def test_deployment_request_arguments_are_catalogued(wan_cpu, kwargs, code):
    def enter():
        with wan_cpu.request(**kwargs):
            pass
    expect_refused(code, enter)
    with wan_cpu.request(attention_backend_override="cpu_flash", step=np.int64(3)):  # numpy ints still serve
        assert wan_cpu.layer("transformer", "self").backend == "cpu_flash"


@pytest.mark.parametrize("config", [{"topk": {1, 2}}, {(1, 2): 0.5}])
def test_deployment_dict_flags_json_cannot_hold_are_refused(config):
    expect_refused("AK3107", attnkit.Deployment, model="wan", platform="cpu", attention_backend="sparge_attn",
                   attention_backend_config=config)


def test_a_profile_without_a_layer_is_malformed_not_an_empty_error(tmp_path):
    path = tmp_path / "no_layers.yaml"
    path.write_text("name: x\ncomponents:\n  - name: t\n    roles:\n      - {name: self, layers: 0}\n")
    expect_refused("AK4021", attnkit.Deployment, model=str(path), platform="cpu")


@pytest.mark.parametrize("kwargs, code", [
    ({"rank": 0, "ring_degree": 0}, "AK5005"),                       # SIGFPE: rank_tokens divided by 0
    ({"rank": 0, "ulysses_degree": -2}, "AK5005"),
    ({"rank": 0, "ring_degree": 2**40}, "AK1012"),                   # nanobind TypeError
    ({"rank": 2, "ring_degree": 2}, "AK5008"),                       # an empty shard, silently
    ({"rank": -1, "ring_degree": 2}, "AK5008"),
    ({"rank": 0, "ring_degree": 2, "replicated_tokens": 100}, "AK5008"),  # the whole array, silently
    ({"rank": 0, "ring_degree": 2, "replicated_tokens": -3}, "AK5008"),   # a wrong shard, silently
    ({"rank": "0", "ring_degree": 2}, "AK1014"),                     # nanobind TypeError
    ({"rank": 0, "ring_degree": 2, "seq_dim": 7}, "AK1014"),         # IndexError
    ({"rank": 0, "ring_degree": 2, "causal": "yes"}, "AK1014"),
])
def test_dist_shard_arguments_are_catalogued(kwargs, code):
    import attnkit.dist
    expect_refused(code, attnkit.dist.shard, randn(1, 8, 2, 16), **kwargs)


def test_dist_attention_needs_a_communicator():
    import attnkit.dist
    q = randn(1, 8, 2, 16)
    for comm in (None, 5):  # TypeErrors of the native all-gather
        expect_refused("AK1014", attnkit.dist.attention, q, q, q, comm)
    expect_refused("AK1101", attnkit.dist.shard, None, 0, ring_degree=2)
