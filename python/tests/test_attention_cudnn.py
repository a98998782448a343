"""attnkit's cudnn backend on CUDA tensors (the GPU machine; skipped without
torch, a GPU, or a build with the cudnn backend): results against the float64
NumPy oracle, PyTorch's own cuDNN SDPA, the SDPA drop-in's transposed views (a
graph of their own, built once), packed and paged problems, CUDA graphs."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: these tests run on the GPU machine (scripts/gpu_check.sh)", allow_module_level=True)

import attnkit  # noqa: E402
import attnkit._attnkit as native  # noqa: E402
from reference_numpy import attention_ref, rel_l2  # noqa: E402


def randn(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g, dtype=torch.float32).to(dtype)


def host(x):
    return x.float().cpu().numpy()


@pytest.fixture(scope="module", autouse=True)
def cudnn_available():
    try:
        attnkit.attention(randn(1, 8, 2, 64), randn(1, 8, 2, 64), randn(1, 8, 2, 64), backend="cudnn")
    except attnkit.AttnkitError as e:
        if e.code in ("AK2110", "AK2111"):  # no libcudnn here / built without the cuDNN frontend
            pytest.skip(f"cudnn cannot run here: {e}")
        raise


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "b,sq,sk,hq,hkv,d",
    [(2, 300, 300, 8, 2, 128),  # GQA 4:1, the top-left graph when causal
     (1, 1, 777, 8, 1, 64),  # one decode row, MQA
     (2, 129, 65, 6, 3, 256),  # more queries than keys: rows without keys when causal
     (1, 200, 1000, 4, 4, 96)],
)
def test_matches_reference(dtype, causal, b, sq, sk, hq, hkv, d):
    q, k, v = randn(b, sq, hq, d, dtype=dtype, seed=1), randn(b, sk, hkv, d, dtype=dtype, seed=2), \
        randn(b, sk, hkv, d, dtype=dtype, seed=3)
    out, lse = attnkit.attention(q, k, v, causal=causal, return_lse=True, backend="cudnn")
    assert attnkit.last_backend() == "cudnn" and out.dtype == dtype and out.shape == (b, sq, hq, d)
    ref, ref_lse = attention_ref(host(q), host(k), host(v), causal=causal)
    assert rel_l2(host(out), ref) < 1e-2
    lse = lse.cpu().numpy()
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), finite)  # rows with no visible key: -inf
    assert rel_l2(lse[finite], ref_lse[finite]) < 1e-4


def test_same_answer_as_torch_cudnn_sdpa():
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = (randn(4, 1024, 16, 128, seed=s) for s in (1, 2, 3))
    for causal in (False, True):
        ours = attnkit.attention(q, k, v, causal=causal, backend="cudnn")
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            theirs = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                    is_causal=causal).transpose(1, 2)
        assert rel_l2(host(ours), host(theirs)) < 5e-3


def test_sdpa_drop_in_builds_its_strides_graph_once():
    import torch.nn.functional as F
    q, k, v = randn(2, 16, 500, 128, seed=1), randn(2, 4, 500, 128, seed=2), randn(2, 4, 500, 128, seed=3)
    out = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True, backend="cudnn")
    made = lambda s: s["built"] + s["loaded"]  # noqa: E731 (built, or read from the plan store)
    graphs = made(native.cudnn_graph_stats())
    again = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True, backend="cudnn")
    assert made(native.cudnn_graph_stats()) == graphs  # BHSD memory's graph was kept by the plan
    assert torch.equal(out, again)
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True, enable_gqa=True)
    assert rel_l2(host(out), expected.cpu().numpy()) < 1e-2


def test_varlen_lse_and_an_empty_sequence():
    lens_q, lens_k = [50, 0, 200, 7], [90, 40, 200, 0]
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lens_q)]), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lens_k)]), dtype=torch.int32, device="cuda")
    q, k, v = randn(sum(lens_q), 8, 128, seed=1), randn(sum(lens_k), 2, 128, seed=2), randn(sum(lens_k), 2, 128, seed=3)
    out, lse = attnkit.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True, return_lse=True,
                                        backend="cudnn")
    assert lse.shape == (8, sum(lens_q))
    cq, ck = cu_q.cpu().numpy(), cu_k.cpu().numpy()
    for i in range(4):
        if lens_q[i] == 0:
            continue
        qs, ks = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        if lens_k[i] == 0:  # no keys at all: output 0, LSE -inf
            assert not host(out[qs]).any() and np.all(np.isneginf(lse[:, qs].cpu().numpy()))
            continue
        ref, ref_lse = attention_ref(host(q[qs])[None], host(k[ks])[None], host(v[ks])[None], causal=True)
        assert rel_l2(host(out[qs]), ref[0]) < 1e-2
        assert rel_l2(lse[:, qs].cpu().numpy(), ref_lse[0]) < 1e-4


def test_paged_decode_replays_in_a_cuda_graph():
    page, hkv, d = 16, 2, 128
    k_cache, v_cache = randn(12, page, hkv, d, seed=1), randn(12, page, hkv, d, seed=2)
    table = torch.tensor([[3, 7, 1, 0], [10, 2, -1, -1]], dtype=torch.int32, device="cuda")  # unused entries: -1
    seqlens = torch.tensor([50, 20], dtype=torch.int32, device="cuda")
    q = randn(2, 1, 8, d, seed=3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: the graph for this cache is built here
        attnkit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table, backend="cudnn")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attnkit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table, backend="cudnn")
    for lens in ([51, 21], [60, 32]):
        seqlens.copy_(torch.tensor(lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        t, n = table.cpu().numpy(), seqlens.cpu().numpy()
        for i in range(2):
            pages = t[i][t[i] >= 0]
            kk = host(k_cache)[pages].reshape(-1, hkv, d)[: n[i]]
            vv = host(v_cache)[pages].reshape(-1, hkv, d)[: n[i]]
            ref, _ = attention_ref(host(q[i : i + 1]), kk[None], vv[None], causal=True)
            assert rel_l2(host(out[i]), ref[0]) < 1e-2


def test_refusals_name_cudnn_reasons():
    with pytest.raises(attnkit.AttnkitError) as e:  # softcap: not wired for cuDNN
        attnkit.attention(randn(1, 64, 2, 64), randn(1, 64, 2, 64), randn(1, 64, 2, 64), softcap=30.0, backend="cudnn")
    assert e.value.code == "AK2109"
    with pytest.raises(attnkit.AttnkitError) as e:  # head dim not a multiple of 8
        attnkit.attention(randn(1, 64, 2, 60), randn(1, 64, 2, 60), randn(1, 64, 2, 60), backend="cudnn")
    assert e.value.code == "AK2113"
