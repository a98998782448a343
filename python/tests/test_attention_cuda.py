"""attnkit on CUDA tensors (the GPU machine; skipped without torch or a GPU):
results against the float64 NumPy oracle, the caller's stream, CUDA graphs,
torch.compile, and refusals that raise instead of crashing."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: these tests run on the GPU machine (scripts/gpu_check.sh)", allow_module_level=True)

import attnkit  # noqa: E402
from reference_numpy import attention_ref, rel_l2  # noqa: E402
from refusals import expect_refused  # noqa: E402

BOUND = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}
CUDA_BACKENDS = {"fa3", "fa2", "cuda_sdpa"}


def randn(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g, dtype=torch.float32).to(dtype)


def host(x):
    return x.float().cpu().numpy()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "b,sq,sk,hq,hkv,d",
    [(2, 300, 300, 8, 2, 128),  # GQA 4:1, not a multiple of any tile
     (1, 1, 777, 8, 1, 64),  # one decode row over many keys, MQA
     (2, 129, 65, 6, 3, 256),  # more queries than keys: causal leaves rows empty
     (1, 200, 1000, 4, 4, 96)],
)
def test_matches_reference(dtype, causal, b, sq, sk, hq, hkv, d):
    q, k, v = randn(b, sq, hq, d, dtype=dtype, seed=1), randn(b, sk, hkv, d, dtype=dtype, seed=2), \
        randn(b, sk, hkv, d, dtype=dtype, seed=3)
    out, lse = attnkit.attention(q, k, v, causal=causal, return_lse=True)
    assert out.is_cuda and out.dtype == dtype and out.shape == (b, sq, hq, d)
    assert attnkit.last_backend() in CUDA_BACKENDS
    ref, ref_lse = attention_ref(host(q), host(k), host(v), causal=causal)
    assert rel_l2(host(out), ref) < BOUND[dtype]
    lse = lse.cpu().numpy()
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), finite)  # rows with no visible key: -inf
    assert rel_l2(lse[finite], ref_lse[finite]) < 1e-4


def test_window_softcap_sinks_scale():
    q, k, v = randn(1, 150, 4, 128, seed=1), randn(1, 170, 2, 128, seed=2), randn(1, 170, 2, 128, seed=3)
    sinks = randn(4, dtype=torch.float32, seed=4)
    out = attnkit.attention(q, k, v, window_size=(40, 7), softcap=4.0, softmax_scale=0.3, sinks=sinks)
    ref, _ = attention_ref(host(q), host(k), host(v), window=(40, 7), softcap=4.0, scale=0.3, sinks=host(sinks))
    assert rel_l2(host(out), ref) < 1e-2


def test_varlen_with_an_empty_sequence():
    lens_q, lens_k = [50, 0, 200], [90, 40, 200]
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lens_q)]), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lens_k)]), dtype=torch.int32, device="cuda")
    q, k, v = randn(sum(lens_q), 8, 128, seed=1), randn(sum(lens_k), 2, 128, seed=2), randn(sum(lens_k), 2, 128, seed=3)
    out = attnkit.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True)
    assert out.shape == q.shape and out.is_cuda
    cq, ck = cu_q.cpu().numpy(), cu_k.cpu().numpy()
    for i in range(3):
        if lens_q[i] == 0:
            continue
        qs, ks = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        ref, _ = attention_ref(host(q[qs])[None], host(k[ks])[None], host(v[ks])[None], causal=True)
        assert rel_l2(host(out[qs]), ref[0]) < 1e-2


def test_paged_kv_cache_decode():
    page, pages, hkv, d = 16, 12, 2, 128
    k_cache, v_cache = randn(pages, page, hkv, d, seed=1), randn(pages, page, hkv, d, seed=2)
    table = torch.tensor([[3, 7, 1, 0], [10, 2, 0, 0]], dtype=torch.int32, device="cuda")
    seqlens = torch.tensor([50, 20], dtype=torch.int32, device="cuda")
    q = randn(2, 1, 8, d, seed=3)
    out = attnkit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table)
    assert out.is_cuda
    t, n = table.cpu().numpy(), seqlens.cpu().numpy()
    for i in range(2):
        kk = host(k_cache)[t[i]].reshape(-1, hkv, d)[: n[i]]
        vv = host(v_cache)[t[i]].reshape(-1, hkv, d)[: n[i]]
        ref, _ = attention_ref(host(q[i : i + 1]), kk[None], vv[None], causal=True)
        assert rel_l2(host(out[i]), ref[0]) < 1e-2


def test_runs_on_the_callers_stream():
    # The side stream first sleeps, then writes new q; attnkit, called on the
    # same stream, must see the new q. Had it queued on another stream (the
    # legacy default stream does not wait for a non-blocking torch stream), it
    # would read the old q while the side stream still sleeps.
    q_old, q_new = randn(1, 256, 8, 128, seed=1), randn(1, 256, 8, 128, seed=9)
    k, v = randn(1, 256, 8, 128, seed=2), randn(1, 256, 8, 128, seed=3)
    q = q_old.clone()
    expected = attnkit.attention(q_new, k, v)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of spinning on the side stream
        q.copy_(q_new)
        out = attnkit.attention(q, k, v)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert torch.equal(out, expected)


def test_custom_op_replays_in_a_cuda_graph():
    q, k, v = randn(2, 200, 8, 128, seed=1), randn(2, 200, 2, 128, seed=2), randn(2, 200, 2, 128, seed=3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (plans are built here)
        torch.ops.attnkit.attention(q, k, v, True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.ops.attnkit.attention(q, k, v, True)
    for seed in (11, 12):  # new inputs written into the captured buffers, then replay
        q.copy_(randn(2, 200, 8, 128, seed=seed))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, attnkit.attention(q, k, v, causal=True))


def test_paged_decode_op_replays_in_a_cuda_graph():
    # The decode step engines capture: new cache lengths are written into the
    # captured tensors between replays.
    page, hkv, d = 16, 2, 128
    k_cache, v_cache = randn(12, page, hkv, d, seed=1), randn(12, page, hkv, d, seed=2)
    table = torch.tensor([[3, 7, 1, 0], [10, 2, 0, 0]], dtype=torch.int32, device="cuda")
    seqlens = torch.tensor([50, 20], dtype=torch.int32, device="cuda")
    q = randn(2, 1, 8, d, seed=3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.ops.attnkit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table, True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.ops.attnkit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table, True)
    for lens in ([51, 21], [60, 33]):
        seqlens.copy_(torch.tensor(lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, attnkit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table))


def test_inside_torch_compile_with_inductor():
    q, k, v = randn(1, 128, 8, 64, seed=1), randn(1, 128, 8, 64, seed=2), randn(1, 128, 8, 64, seed=3)

    def block(q, k, v):
        return torch.ops.attnkit.attention(q * 2.0, k, v, False) + 1.0

    compiled = torch.compile(block, fullgraph=True)
    assert rel_l2(host(compiled(q, k, v)), host(block(q, k, v))) < 1e-2


def test_sdpa_drop_in_on_cuda():
    import torch.nn.functional as F
    q, k, v = randn(2, 16, 500, 128, seed=1), randn(2, 4, 500, 128, seed=2), randn(2, 4, 500, 128, seed=3)
    out = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True, enable_gqa=True)
    assert out.is_cuda and out.is_contiguous() and out.dtype == torch.bfloat16
    assert attnkit.last_backend() in CUDA_BACKENDS
    assert rel_l2(host(out), expected.cpu().numpy()) < 1e-2


@pytest.mark.parametrize(
    "make, code",
    [
        (lambda: (randn(1, 4, 3, 64), randn(1, 4, 2, 64), randn(1, 4, 2, 64)), "AK1002"),  # 3 q heads over 2
        (lambda: (randn(1, 4, 2, 64), randn(1, 4, 2, 64).cpu(), randn(1, 4, 2, 64)), "AK1105"),  # k on the host
        (lambda: (randn(1, 4, 2, 64), randn(1, 4, 2, 64, dtype=torch.float16), randn(1, 4, 2, 64)), "AK1104"),
        (lambda: (randn(1, 4, 2, 128)[..., ::2], randn(1, 4, 2, 64), randn(1, 4, 2, 64)), "AK1106"),
    ],
)
def test_bad_input_raises_catalogued_error(make, code):
    expect_refused(code, attnkit.attention, *make())
    torch.cuda.synchronize()  # and the context is still healthy
    assert attnkit.attention(randn(1, 4, 2, 64), randn(1, 4, 2, 64), randn(1, 4, 2, 64)).is_cuda


def test_deployment_request_skip_softmax_on_fa3():
    """A request's skip-softmax reaches fa3 through a Deployment layer: from its
    start step on, key tiles far below a row's running max are skipped (the
    result moves a little from dense); before it, the dense kernel runs exactly."""
    dep = attnkit.Deployment(model="wan", platform="cuda", dtype="bf16", attention_backend="fa")
    layer = dep.layer("transformer", "self", 0)
    if layer.backend != "fa3":
        pytest.skip(f"skip-softmax runs on fa3 (sm_90); this GPU's fa is {layer.backend}")
    # Concentrated attention: each query's own key dominates (q = k), so the
    # tiles after a row's diagonal fall far below its running max.
    x = randn(1, 2048, 4, 128, seed=3)
    v = randn(1, 2048, 4, 128, seed=4)
    dense = layer(x, x, v)
    settings = {"threshold_scale_factor": 100.0, "start_step": 2}
    with dep.request(skip_softmax_params=settings, step=1):
        assert torch.equal(layer(x, x, v), dense)  # before start_step: the dense kernel
    with dep.request(skip_softmax_params=settings, step=2):
        skipped = layer(x, x, v)
    moved = ((skipped.float() - dense.float()).norm() / dense.float().norm()).item()
    assert 1e-3 < moved < 0.1, moved
    assert torch.equal(layer(x, x, v), dense)  # the request is over
