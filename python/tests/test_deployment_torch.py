"""attnkit.torch.Attention, a Deployment layer as an nn.Module (skipped without
torch): torch in, torch out, against torch's SDPA; the layer custom ops under
opcheck and torch.compile; requests reaching a compiled module; and, on a GPU,
CUDA-graph replay (skipped without one)."""
import pytest

torch = pytest.importorskip("torch")
import attnkit  # noqa: E402
import attnkit.torch  # noqa: E402


def sdpa_ref(q, k, v, causal):
    # torch aligns is_causal top-left: only use it with as many queries as keys.
    r = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.transpose(1, 2).double() for x in (q, k.repeat_interleave(r, 2), v.repeat_interleave(r, 2)))
    return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.fixture(scope="module")
def dep():
    return attnkit.Deployment(model="wan", platform="cpu", dtype="fp32", attention_backend="reference")


def test_module_matches_sdpa_and_runs_the_decision(dep):
    attn = attnkit.torch.Attention(dep, "transformer", "self", 3)
    q, k, v = torch.randn(2, 40, 4, 64), torch.randn(2, 40, 4, 64), torch.randn(2, 40, 4, 64)
    out = attn(q, k, v)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape
    assert rel(out, sdpa_ref(q, k, v, False)) < 1e-5
    assert attnkit.last_backend() == "reference"
    assert "transformer.self[3], reference (engine_default)" in repr(attn)


def test_layer_ops_pass_opcheck(dep):
    layer = dep.layer("transformer", "cross", 0)
    q, k, v = torch.randn(1, 16, 4, 64), torch.randn(1, 24, 4, 64), torch.randn(1, 24, 4, 64)
    torch.library.opcheck(torch.ops.attnkit.layer_attention.default, (q, k, v, layer.id, False))
    cu = torch.tensor([0, 5, 16], dtype=torch.int32)
    qp, kp = torch.randn(16, 4, 64), torch.randn(16, 2, 64)
    torch.library.opcheck(torch.ops.attnkit.layer_attention_varlen.default, (qp, kp, kp, cu, cu, 11, 11, layer.id, True))
    k_cache = torch.randn(6, 16, 2, 64)
    table = torch.tensor([[0, 4], [5, 1]], dtype=torch.int32)
    seqlens = torch.tensor([30, 9], dtype=torch.int32)
    torch.library.opcheck(torch.ops.attnkit.layer_attention_with_kvcache.default,
                          (torch.randn(2, 1, 4, 64), k_cache, k_cache, seqlens, table, layer.id, True))


def test_compiled_block_sees_the_request_in_force(dep):
    attn = attnkit.torch.Attention(dep, "transformer", "self", 0)

    def block(x):
        return attn(x * 2.0, x, x) + 1.0

    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    x = torch.randn(1, 32, 4, 64)
    expected = block(x)
    assert rel(compiled(x), expected) < 1e-6 and attnkit.last_backend() == "reference"
    with dep.request(attention_backend_override="cpu_flash", step=1):
        assert rel(compiled(x), expected) < 1e-5
        assert attnkit.last_backend() == "cpu_flash"  # the op's body asks the layer each call
    compiled(x)
    assert attnkit.last_backend() == "reference"


def test_llm_block_prefill_and_paged_decode():
    dep = attnkit.Deployment(model="llama", platform="cpu", dtype="fp32")
    prefill = attnkit.torch.Attention(dep, "decoder", "prefill", 0)
    decode = attnkit.torch.Attention(dep, "decoder", "decode", 0)
    assert prefill.causal and decode.causal
    cu = torch.tensor([0, 6, 20], dtype=torch.int32)
    q, k = torch.randn(20, 8, 64), torch.randn(20, 2, 64)
    out = prefill(q, k, k, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=14, max_seqlen_k=14)
    s = slice(6, 20)
    assert rel(out[s], sdpa_ref(q[None, s], k[None, s], k[None, s], True)[0]) < 1e-5
    k_cache = torch.randn(4, 16, 2, 64)
    table = torch.tensor([[3, 1]], dtype=torch.int32)
    qd = torch.randn(1, 1, 8, 64)
    out = decode(qd, k_cache, k_cache, cache_seqlens=torch.tensor([21], dtype=torch.int32), block_table=table)
    kb = k_cache[table[0].long()].flatten(0, 1)[:21][None]
    assert rel(out, sdpa_ref(qd, kb, kb, False)) < 1e-5  # one query after the cache sees every key


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (runs on the GPU machine)")
def test_cuda_graph_replays_a_deployment_layer():
    gpu = attnkit.Deployment(model="wan", dtype="bf16")
    attn = attnkit.torch.Attention(gpu, "transformer", "self", 0)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 256, 8, 128, device="cuda", generator=g).bfloat16() for _ in range(3))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # plan the shape before capturing
        attn(q, k, v)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attn(q, k, v)
    for seed in (1, 2):
        q.copy_(torch.randn(2, 256, 8, 128, device="cuda", generator=g.manual_seed(seed)).bfloat16())
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, attn(q, k, v))
        assert rel(out, sdpa_ref(q, k, v, False)) < 1e-2
    assert attnkit.last_backend() == attn.layer.backend
    assert attn.layer.backend in {"fa3", "fa2", "cuda_sdpa"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (runs on the GPU machine)")
def test_gpu_deployment_levels_and_request():
    gpu = attnkit.Deployment(model="wan", dtype="bf16", attention_backend="fa",
                             component_attention_backends="text_encoder=sdpa")
    assert gpu.device == "cuda"
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 300, 8, 64, device="cuda", generator=g).bfloat16() for _ in range(3))
    dit, text = gpu.layer("transformer", "self"), gpu.layer("text_encoder", "self")
    flash = "fa3" if torch.cuda.get_device_capability() == (9, 0) else "fa2"  # `fa`: the arch's kernel
    assert rel(dit(q, k, v), sdpa_ref(q, k, v, False)) < 1e-2 and attnkit.last_backend() == flash
    assert rel(text(q, k, v), sdpa_ref(q, k, v, False)) < 1e-2 and attnkit.last_backend() == "cuda_sdpa"
    with gpu.request(attention_backend_override="sdpa", step=0):
        assert rel(dit(q, k, v), sdpa_ref(q, k, v, False)) < 1e-2 and attnkit.last_backend() == "cuda_sdpa"
    dit(q, k, v)
    assert attnkit.last_backend() == flash


def test_sparse_video_layers_take_the_grid_and_the_gate():
    # video_sparse_attn_h3 needs the call's latent grid, and fast-h3's checkpoint its gate (AK2118):
    # through the module as through the Layer, and the op with its extra arguments passes opcheck.
    dep = attnkit.Deployment(model="fast-h3", platform="cpu", dtype="fp32", attention_backend="video_sparse_attn_h3")
    attn = attnkit.torch.Attention(dep, "transformer", "self", 0)
    q, k, v = torch.randn(1, 512, 2, 64), torch.randn(1, 512, 2, 64), torch.randn(1, 512, 2, 64)
    gate = torch.rand(1, 512, 2)
    out = attn(q, k, v, video_grid=(8, 8, 8), gate=gate)
    assert attnkit.last_backend() == "video_sparse_attn_h3"
    layer = dep.layer("transformer", "self", 0)
    want = layer(q.numpy(), k.numpy(), v.numpy(), video_grid=(8, 8, 8), gate=gate.numpy())
    assert rel(out, torch.from_numpy(want)) < 1e-6
    with pytest.raises(attnkit.AttnkitError, match="AK2118"):
        attn(q, k, v, video_grid=(8, 8, 8))
    with pytest.raises(attnkit.AttnkitError, match="AK1014"):
        attn(q, k, v, video_grid=(8, 8), gate=gate)
    with pytest.raises(attnkit.AttnkitError, match="AK1016"):  # refused, not read as "no grid"
        attn(q, k, v, video_grid=(0, 8, 8), gate=gate)
    cu = torch.tensor([0, 512], dtype=torch.int32)
    with pytest.raises(attnkit.AttnkitError, match="AK1011"):
        attn(q[0], k[0], v[0], cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=512, max_seqlen_k=512, gate=gate)
    torch.library.opcheck(torch.ops.attnkit.layer_attention.default,
                          (q, k, v, layer.id, False, -1, -1, 0.0, None, None, [8, 8, 8], gate))


@pytest.mark.parametrize("options, code", [
    ({"causal": "no"}, "AK1014"),                # bool("no") was True
    ({"window_size": (1.7, 0)}, "AK1004"),       # int(1.7) was 1
    ({"window_size": (4,)}, "AK1004"),           # IndexError
    ({"window_size": (2**70, 0)}, "AK1012"),     # torch's schema RuntimeError at the first call
    ({"softcap": "x"}, "AK1005"),                # ValueError
    ({"softcap": 2**2000}, "AK1005"),            # OverflowError
    ({"softmax_scale": "x"}, "AK1006"),          # ValueError
])
def test_module_options_are_checked_like_attention(dep, options, code):
    from refusals import expect_refused
    expect_refused(code, attnkit.torch.Attention, dep, "transformer", "self", 0, **options)


def test_module_call_arguments_are_catalogued(dep):
    from refusals import expect_refused
    attn = attnkit.torch.Attention(dep, "transformer", "self", 0)
    q = torch.randn(1, 8, 2, 16)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    varlen = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_k=8)
    expect_refused("AK1014", attn, q[0], q[0], q[0], max_seqlen_q=None, **varlen)  # TypeError of int()
    expect_refused("AK1014", attn, q[0], q[0], q[0], max_seqlen_q=8.5, **varlen)   # was 8, silently
    expect_refused("AK1012", attn, q[0], q[0], q[0], max_seqlen_q=2**70, **varlen)  # torch's schema RuntimeError
    expect_refused("AK1112", attn, q, q, q, sinks=[0.0, 0.0])                        # torch's schema RuntimeError
    assert attn(q[0], q[0], q[0], max_seqlen_q=8, **varlen).shape == q[0].shape
