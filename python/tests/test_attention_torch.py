"""attnkit on torch tensors (skipped where torch is not installed): torch in,
torch out, same device; compared with torch's own SDPA on CPU and, where a GPU
is present, on CUDA."""
import pytest

torch = pytest.importorskip("torch")
import attnkit  # noqa: E402


def sdpa_ref(q, k, v, causal):
    # torch SDPA is BHSD; expand KV heads for GQA; upcast for an exact reference.
    r = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.transpose(1, 2).double() for x in (q, k.repeat_interleave(r, 2), v.repeat_interleave(r, 2)))
    sq, sk = q.shape[1], k.shape[1]
    mask = None
    if causal:
        i = torch.arange(sq)[:, None]
        j = torch.arange(sk)[None, :]
        mask = (j <= i + sk - sq).to(qt.device)
    return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask).transpose(1, 2)


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("dtype,bound", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2), (torch.float16, 1e-2)])
def test_cpu_tensors(dtype, bound):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 40, 8, 64, generator=g).to(dtype)
    k = torch.randn(2, 40, 2, 64, generator=g).to(dtype)
    v = torch.randn(2, 40, 2, 64, generator=g).to(dtype)
    out = attnkit.attention(q, k, v, causal=True)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.device == q.device
    assert rel(out, sdpa_ref(q, k, v, True)) < bound


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (runs on the GPU machine)")
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_tensors(causal):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 300, 8, 128, device="cuda", generator=g, dtype=torch.bfloat16)
    k = torch.randn(2, 300, 2, 128, device="cuda", generator=g, dtype=torch.bfloat16)
    v = torch.randn(2, 300, 2, 128, device="cuda", generator=g, dtype=torch.bfloat16)
    out = attnkit.attention(q, k, v, causal=causal)
    assert out.is_cuda and out.dtype == torch.bfloat16
    assert rel(out, sdpa_ref(q, k, v, causal)) < 1e-2


def test_custom_op_is_registered_and_passes_opcheck():
    q = torch.randn(1, 16, 4, 64)
    k = torch.randn(1, 16, 2, 64)
    v = torch.randn(1, 16, 2, 64)
    out = torch.ops.attnkit.attention(q, k, v, True)
    assert rel(out, sdpa_ref(q, k, v, True)) < 1e-5
    torch.library.opcheck(torch.ops.attnkit.attention.default, (q, k, v, True))


def test_inside_torch_compile():
    q = torch.randn(1, 16, 4, 64)
    k = torch.randn(1, 16, 4, 64)
    v = torch.randn(1, 16, 4, 64)

    def block(q, k, v):
        return torch.ops.attnkit.attention(q * 2.0, k, v, False) + 1.0

    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    assert rel(compiled(q, k, v), block(q, k, v)) < 1e-6


def test_varlen_op_passes_opcheck_and_compiles():
    lens_q, lens_k = [5, 0, 20], [9, 4, 20]
    cu_q = torch.tensor([0, 5, 5, 25], dtype=torch.int32)
    cu_k = torch.tensor([0, 9, 13, 33], dtype=torch.int32)
    q, k, v = torch.randn(sum(lens_q), 4, 64), torch.randn(sum(lens_k), 2, 64), torch.randn(sum(lens_k), 2, 64)
    args = (q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), True)
    out = torch.ops.attnkit.attention_varlen(*args)
    for b in range(3):
        if lens_q[b]:
            qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
            assert rel(out[qs], sdpa_ref(q[None, qs], k[None, ks], v[None, ks], True)[0]) < 1e-5
    torch.library.opcheck(torch.ops.attnkit.attention_varlen.default, args)
    compiled = torch.compile(lambda *a: torch.ops.attnkit.attention_varlen(*a) * 2.0, fullgraph=True,
                             backend="aot_eager")
    assert rel(compiled(*args), out * 2.0) < 1e-6


def test_kvcache_op_passes_opcheck_and_compiles():
    page, hkv, d = 16, 2, 64
    k_cache, v_cache = torch.randn(12, page, hkv, d), torch.randn(12, page, hkv, d)
    table = torch.tensor([[3, 7, 1, 0], [10, 2, 0, 0]], dtype=torch.int32)
    seqlens = torch.tensor([50, 20], dtype=torch.int32)
    q = torch.randn(2, 1, 8, d)
    sinks = torch.randn(8)
    args = (q, k_cache, v_cache, seqlens, table, True, -1, -1, 0.0, None, sinks)
    out = torch.ops.attnkit.attention_with_kvcache(*args)
    assert rel(out, attnkit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table, sinks=sinks)) == 0.0
    torch.library.opcheck(torch.ops.attnkit.attention_with_kvcache.default, args)
    compiled = torch.compile(lambda *a: torch.ops.attnkit.attention_with_kvcache(*a) + 1.0, fullgraph=True,
                             backend="aot_eager")
    assert rel(compiled(*args), out + 1.0) < 1e-6


@pytest.mark.parametrize("causal,gqa", [(False, False), (True, True)])
def test_sdpa_drop_in_matches_torch_and_compiles(causal, gqa):
    import torch.nn.functional as F
    q = torch.randn(2, 8, 70, 64)
    k = torch.randn(2, 2 if gqa else 8, 70, 64)
    v = torch.randn(2, 2 if gqa else 8, 70, 64)
    out = attnkit.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, enable_gqa=gqa)
    assert out.shape == expected.shape and out.is_contiguous()
    assert rel(out, expected) < 1e-5
    torch.library.opcheck(torch.ops.attnkit.scaled_dot_product_attention.default, (q, k, v, causal, None, "auto"))
    compiled = torch.compile(lambda q, k, v: attnkit.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                                    enable_gqa=gqa) * 2.0,
                             fullgraph=True, backend="aot_eager")
    assert rel(compiled(q, k, v), out * 2.0) < 1e-6
