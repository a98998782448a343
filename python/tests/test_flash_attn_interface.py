"""attnkit.flash_attn_interface (FlashAttention 2's functions) on torch tensors (CPU, and CUDA where a GPU
is present: there the KV-cache lengths are not read back), against the float64 NumPy oracle: the dense, packed and varlen calls, and the KV-cache call with its in-place append, rotary
embedding (a complex-number formulation, independent of the module's), cache_batch_idx, cache_leftpad and
paged caches; and what it refuses (skipped where torch is not installed)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import attnkit  # noqa: E402
from attnkit import flash_attn_interface as fai  # noqa: E402
from reference_numpy import attention_ref  # noqa: E402
from refusals import expect_refused  # noqa: E402


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def randn(*shape, dtype=torch.float32, seed=0, device="cpu"):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device)


def host(x):
    return x.detach().cpu().double() if isinstance(x, torch.Tensor) else x


def rel(a, b):
    a, b = np.asarray(host(a)), np.asarray(host(b))
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


BOUND = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal,window,softcap", [(False, (-1, -1), 0.0), (True, (-1, -1), 0.0),
                                                   (False, (7, 3), 0.0), (True, (-1, -1), 5.0)])
def test_flash_attn_func_matches_the_oracle(device, dtype, causal, window, softcap):
    if device == "cuda" and dtype == torch.float32:
        pytest.skip("the GPU kernels take fp16 / bf16")
    q, k, v = (randn(*shape, dtype=dtype, seed=seed, device=device)
               for shape, seed in (((2, 37, 6, 64), 1), ((2, 53, 2, 64), 2), ((2, 53, 2, 64), 3)))
    out, lse, probs = fai.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap,
                                          return_attn_probs=True)
    want, want_lse = attention_ref(*(host(x) for x in (q, k, v)), causal=causal, window=window, softcap=softcap)
    assert out.shape == (2, 37, 6, 64) and out.dtype == dtype and out.device == q.device and probs is None
    assert lse.shape == (2, 6, 37) and lse.dtype == torch.float32
    assert rel(out, want) < BOUND[dtype]
    assert rel(lse, want_lse) < BOUND[dtype]
    assert torch.equal(fai.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap), out)


def test_window_size_as_a_tensor_and_a_scale():
    # FlashAttention's own tests pass window_size as torch.randint(0, seqlen_k, (2,)).
    q, k, v = randn(1, 20, 2, 32, seed=4), randn(1, 30, 2, 32, seed=5), randn(1, 30, 2, 32, seed=6)
    out = fai.flash_attn_func(q, k, v, softmax_scale=0.3, window_size=torch.tensor([4, 9]))
    assert rel(out, attention_ref(q, k, v, window=(4, 9), scale=0.3)[0]) < 1e-5


def test_packed_calls_read_the_packed_tensor_in_place():
    qkv = randn(2, 33, 3, 4, 48, seed=7)
    q, k, v = qkv.unbind(2)
    want = attention_ref(q, k, v, causal=True)[0]
    assert rel(fai.flash_attn_qkvpacked_func(qkv, causal=True), want) < 1e-5
    assert rel(fai.flash_attn_kvpacked_func(q, torch.stack((k, v), dim=2), causal=True), want) < 1e-5
    expect_refused("AK1103", fai.flash_attn_qkvpacked_func, randn(2, 33, 2, 4, 48))


def varlen_case(lengths_q, lengths_k, h=4, hk=2, d=32, dtype=torch.float32):
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lengths_q)]), dtype=torch.int32)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lengths_k)]), dtype=torch.int32)
    q = randn(int(cu_q[-1]), h, d, dtype=dtype, seed=8)
    k, v = randn(int(cu_k[-1]), hk, d, dtype=dtype, seed=9), randn(int(cu_k[-1]), hk, d, dtype=dtype, seed=10)
    return q, k, v, cu_q, cu_k


def varlen_ref(q, k, v, cu_q, cu_k, causal):
    outs, lses = [], []
    for i in range(len(cu_q) - 1):
        a, b, c, e = int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
        if a == b:  # an empty sequence: no rows
            outs.append(np.zeros((0, *q.shape[1:-1], v.shape[-1])))
            lses.append(np.zeros((q.shape[1], 0)))
            continue
        out, lse = attention_ref(q[None, a:b], k[None, c:e], v[None, c:e], causal=causal)
        outs.append(out[0])
        lses.append(lse[0])
    return np.concatenate(outs), np.concatenate(lses, axis=-1)


@pytest.mark.parametrize("device,dtype", [("cpu", torch.float32)] + [("cuda", torch.bfloat16)] * ("cuda" in DEVICES))
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_the_oracle_per_sequence(device, dtype, causal):
    lengths_q, lengths_k = [5, 0, 17, 9], [11, 0, 17, 20]  # an empty sequence, sq < sk
    q, k, v, cu_q, cu_k = varlen_case(lengths_q, lengths_k, d=64, dtype=dtype)
    out, lse, _ = fai.flash_attn_varlen_func(*(x.to(device) for x in (q, k, v, cu_q, cu_k)), max(lengths_q),
                                             max(lengths_k), causal=causal, return_attn_probs=True)
    want, want_lse = varlen_ref(*(host(x) for x in (q, k, v)), cu_q, cu_k, causal)
    assert out.shape == q.shape and lse.shape == (4, q.shape[0]) and out.device.type == device
    assert rel(out, want) < BOUND[dtype]
    finite = np.isfinite(want_lse)
    assert rel(host(lse).numpy()[finite], want_lse[finite]) < BOUND[dtype]


@pytest.mark.parametrize("device,dtype", [("cpu", torch.float32)] + [("cuda", torch.bfloat16)] * ("cuda" in DEVICES))
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (6, 3))])
def test_varlen_over_a_paged_cache(device, dtype, causal, window):
    # FlashAttention's varlen call with a block_table: sequence b's keys are the first
    # cu_seqlens_k[b + 1] - cu_seqlens_k[b] tokens of its pages.
    lengths_q, lengths_k, page, hk, d = [3, 0, 17, 1], [40, 0, 17, 9], 16, 2, 64
    pages = 12
    k_pages, v_pages = randn(pages, page, hk, d, dtype=dtype, seed=60), randn(pages, page, hk, d, dtype=dtype, seed=61)
    table = torch.tensor([[7, 2, 9], [0, 0, 0], [11, 4, 0], [5, 0, 0]], dtype=torch.int32)
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lengths_q)]), dtype=torch.int32)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lengths_k)]), dtype=torch.int32)
    q = randn(int(cu_q[-1]) + 2, 4, d, dtype=dtype, seed=62)  # two padding rows past cu_seqlens_q[-1]
    out, lse, _ = fai.flash_attn_varlen_func(*(x.to(device) for x in (q, k_pages, v_pages, cu_q, cu_k)),
                                             max(lengths_q), max(lengths_k), causal=causal, window_size=window,
                                             block_table=table.to(device), return_attn_probs=True)
    assert out.shape == (q.shape[0], 4, d) and lse.shape == (4, q.shape[0]) and out.device.type == device
    for b in range(4):
        a, e = int(cu_q[b]), int(cu_q[b + 1])
        if a == e:
            continue
        keys = torch.cat([k_pages[i] for i in table[b].tolist()])[:lengths_k[b]]
        values = torch.cat([v_pages[i] for i in table[b].tolist()])[:lengths_k[b]]
        want, want_lse = attention_ref(*(x[None].float() for x in (q[a:e], keys, values)), causal=causal,
                                       window=window)
        assert rel(out[a:e], want[0]) < BOUND[dtype], b
        finite = np.isfinite(want_lse[0])
        assert rel(host(lse[:, a:e]).numpy()[finite], want_lse[0][finite]) < BOUND[dtype], b
    assert not host(out[-2:]).any() and bool((host(lse[:, -2:]) == -np.inf).all())  # padding rows: 0, -inf


def test_varlen_packed_calls():
    q, k, v, cu, _ = varlen_case([6, 13, 1], [6, 13, 1], hk=4)
    want = varlen_ref(q, k, v, cu, cu, True)[0]
    qkv = torch.stack((q, k, v), dim=1)
    assert rel(fai.flash_attn_varlen_qkvpacked_func(qkv, cu, 13, causal=True), want) < 1e-5
    assert rel(fai.flash_attn_varlen_kvpacked_func(q, torch.stack((k, v), dim=1), cu, cu, 13, 13, causal=True),
               want) < 1e-5


# --- flash_attn_with_kvcache ---------------------------------------------------------------------------------


def rotary_ref(x, cos, sin, positions, interleaved):
    """The rotation as a complex product: pair (a, b) -> (a + ib) * e^{i angle}; angles past the table: 0."""
    x = np.asarray(x, np.float64).copy()
    half = cos.shape[1]
    angle = np.arctan2(np.asarray(sin, np.float64), np.asarray(cos, np.float64))
    radius = np.hypot(np.asarray(sin, np.float64), np.asarray(cos, np.float64))
    for bi in range(x.shape[0]):
        for si in range(x.shape[1]):
            p = int(positions[bi][si])
            if p >= cos.shape[0]:
                continue
            turn = radius[p] * np.exp(1j * angle[p])  # cos + i sin of the table, as given
            pairs = (slice(0, 2 * half, 2), slice(1, 2 * half, 2)) if interleaved else (slice(0, half),
                                                                                          slice(half, 2 * half))
            z = (x[bi, si, :, pairs[0]] + 1j * x[bi, si, :, pairs[1]]) * turn
            x[bi, si, :, pairs[0]], x[bi, si, :, pairs[1]] = z.real, z.imag
    return x


def kvcache_ref(q, k_cache, v_cache, lengths, new, start, rows, causal, window):
    """Per sequence: attention over cache keys [start, lengths + new) of its cache row."""
    outs, lses = [], []
    for bi in range(q.shape[0]):
        r = bi if rows is None else int(rows[bi])
        a, e = (0 if start is None else int(start[bi])), int(lengths[bi]) + new
        out, lse = attention_ref(q[bi:bi + 1], k_cache[r:r + 1, a:e], v_cache[r:r + 1, a:e], causal=causal,
                                 window=window)
        outs.append(out)
        lses.append(lse)
    return np.concatenate(outs), np.concatenate(lses)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("causal,window", [(True, (-1, -1)), (False, (-1, -1)), (False, (5, 2))])
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("cache", ["contiguous", "batch_idx", "leftpad", "paged"])
def test_kvcache_append_rotary_and_attention(device, dtype, causal, window, interleaved, cache):
    if device == "cuda" and dtype == torch.float32:
        pytest.skip("the GPU kernels take fp16 / bf16")
    b, sq, h, hk, d, rotary_dim, capacity, new = 3, 4, 6, 2, 64, 16, 48, 4
    batch_cache = 5 if cache == "batch_idx" else b
    q = randn(b, sq, h, d, dtype=dtype, seed=11)
    k_new, v_new = randn(b, new, hk, d, dtype=dtype, seed=12), randn(b, new, hk, d, dtype=dtype, seed=13)
    k_cache, v_cache = randn(batch_cache, capacity, hk, d, dtype=dtype, seed=14), \
        randn(batch_cache, capacity, hk, d, dtype=dtype, seed=15)
    lengths = torch.tensor([10, 0, 44], dtype=torch.int32)  # the last one fills the cache to its end
    rows = torch.tensor([4, 0, 2], dtype=torch.int32) if cache == "batch_idx" else None
    start = torch.tensor([3, 0, 20], dtype=torch.int32) if cache == "leftpad" else None
    angle = torch.rand(capacity, rotary_dim // 2, generator=torch.Generator().manual_seed(16)) * 6.283
    cos, sin = torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)

    # The oracle: rotate, write, attend, all in float64 from the same inputs.
    per_query = causal or window != (-1, -1)
    q_pos = [[int(lengths[i]) + (j if per_query else 0) for j in range(sq)] for i in range(b)]
    k_pos = [[int(lengths[i]) + j for j in range(new)] for i in range(b)]
    q_ro = rotary_ref(q.float(), cos.float(), sin.float(), q_pos, interleaved)
    k_ro = rotary_ref(k_new.float(), cos.float(), sin.float(), k_pos, interleaved)
    k_want, v_want = k_cache.double().numpy().copy(), v_cache.double().numpy().copy()
    for i in range(b):
        r = i if rows is None else int(rows[i])
        k_want[r, int(lengths[i]):int(lengths[i]) + new] = k_ro[i]
        v_want[r, int(lengths[i]):int(lengths[i]) + new] = v_new[i].double().numpy()
    want, want_lse = kvcache_ref(q_ro, k_want, v_want, lengths, new, start, rows, causal, window)

    def on(x):
        return None if x is None else x.to(device)

    kwargs = dict(k=on(k_new), v=on(v_new), rotary_cos=on(cos), rotary_sin=on(sin), cache_seqlens=on(lengths),
                  causal=causal, window_size=window, rotary_interleaved=interleaved, return_softmax_lse=True)
    if cache == "paged":  # pages of 8 tokens, shuffled
        page = 8
        order = torch.randperm(b * capacity // page, generator=torch.Generator().manual_seed(17))
        k_pages = torch.empty(b * capacity // page, page, hk, d, dtype=dtype)
        v_pages = torch.empty_like(k_pages)
        k_pages[order] = k_cache.reshape(-1, page, hk, d)
        v_pages[order] = v_cache.reshape(-1, page, hk, d)
        table = order.reshape(b, capacity // page).to(torch.int32)
        k_pages, v_pages = on(k_pages), on(v_pages)
        out, lse = fai.flash_attn_with_kvcache(on(q), k_pages, v_pages, block_table=on(table), **kwargs)
        k_got = k_pages.cpu()[table.long()].reshape(b, capacity, hk, d)
        v_got = v_pages.cpu()[table.long()].reshape(b, capacity, hk, d)
    else:
        k_got, v_got = on(k_cache), on(v_cache)
        out, lse = fai.flash_attn_with_kvcache(on(q), k_got, v_got, cache_batch_idx=on(rows),
                                               cache_leftpad=on(start), **kwargs)
    tol = 1e-6 if dtype == torch.float32 else 2e-3
    assert np.allclose(host(k_got).numpy(), k_want, atol=tol, rtol=tol)  # rotated, rounded to the cache dtype
    assert torch.equal(v_got.cpu(), torch.from_numpy(v_want).to(dtype))  # values copied exactly
    assert out.shape == (b, sq, h, d) and lse.shape == (b, h, sq) and out.device.type == device
    assert rel(out, want) < BOUND[dtype]
    finite = np.isfinite(want_lse)
    assert rel(host(lse).numpy()[finite], want_lse[finite]) < BOUND[dtype]


@pytest.mark.parametrize("paged", [False, True])
def test_unchecked_appends_stop_at_the_cache_end(paged):
    # The path CUDA lengths take (not read back): rows past the end are dropped, nothing else is touched.
    capacity, new = 16, 4
    lengths = torch.tensor([14, 3], dtype=torch.int32)  # sequence 0 overflows by 2
    k, v = randn(2, new, 1, 8, seed=24), randn(2, new, 1, 8, seed=25)
    k_cache, v_cache = randn(2, capacity, 1, 8, seed=26), randn(2, capacity, 1, 8, seed=27)
    want = k_cache.clone()
    want[0, 14:16], want[1, 3:7] = k[0, :2], k[1]
    table = None
    if paged:  # pages of 4 tokens, in reverse order
        table = torch.tensor([[7, 6, 5, 4], [3, 2, 1, 0]], dtype=torch.int32)
        k_pages, v_pages = torch.empty(8, 4, 1, 8), torch.empty(8, 4, 1, 8)
        k_pages[table.flatten().long()] = k_cache.reshape(8, 4, 1, 8)  # logical page j of b at table[b, j]
        v_pages[table.flatten().long()] = v_cache.reshape(8, 4, 1, 8)
        k_cache, v_cache = k_pages, v_pages
    fai._append(k_cache, v_cache, k, v, lengths, capacity, None, table, checked=False)
    got = k_cache if table is None else k_cache[table.long()].reshape(2, capacity, 1, 8)
    assert torch.equal(got, want)
    visible = fai._visible_lengths(lengths, new, None, capacity, checked=False)
    assert visible.tolist() == [16, 7]
    assert fai._visible_lengths(lengths, new, torch.tensor([2, 0]), capacity, checked=False).tolist() == [14, 7]


def test_new_keys_that_are_views_of_the_cache():
    q, cache = randn(1, 2, 2, 32, seed=28), randn(1, 16, 2, 32, seed=29)
    first = cache[:, :2].clone()
    out = fai.flash_attn_with_kvcache(q, cache, cache, k=cache[:, :2], v=cache[:, :2], cache_seqlens=5)
    assert torch.equal(cache[:, 5:7], first) and torch.equal(cache[:, :2], first)
    assert rel(out, kvcache_ref(q, cache, cache, [5], 2, None, None, False, (-1, -1))[0]) < 1e-5


def test_kvcache_without_new_keys_reads_what_is_there():
    q, k_cache, v_cache = randn(2, 1, 4, 64, seed=18), randn(2, 40, 4, 64, seed=19), randn(2, 40, 4, 64, seed=20)
    before = k_cache.clone()
    for lengths, n in ((torch.tensor([7, 40], dtype=torch.int32), [7, 40]), (25, [25, 25]), (None, [40, 40])):
        out = fai.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths)
        want = kvcache_ref(q, k_cache, v_cache, n, 0, None, None, False, (-1, -1))[0]
        assert rel(out, want) < 1e-5
    assert torch.equal(k_cache, before)


def attention_autograd_ref(q, k, v, causal, window, softcap, scale=None):
    """float64 attention written with torch ops, differentiated by torch's autograd."""
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    h, hk = q.shape[2], k.shape[2]
    kr, vr = (x.repeat_interleave(h // hk, dim=2) for x in (k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, kr) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = q.shape[1], k.shape[1]
    i, j = torch.arange(sq)[:, None] + sk - sq, torch.arange(sk)[None, :]
    left, right = window[0], 0 if causal else window[1]
    visible = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        visible &= j >= i - left
    if right >= 0:
        visible &= j <= i + right
    p = torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, vr), (q, k, v)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal,window,softcap", [(False, (-1, -1), 0.0), (True, (-1, -1), 0.0),
                                                   (False, (6, 2), 0.0), (True, (-1, -1), 4.0)])
def test_gradients_match_torch_autograd(device, dtype, causal, window, softcap):
    if device == "cuda" and dtype == torch.float32:
        pytest.skip("the GPU kernels take fp16 / bf16")
    q = randn(2, 29, 4, 64, dtype=dtype, seed=30, device=device).requires_grad_()
    k = randn(2, 41, 2, 64, dtype=dtype, seed=31, device=device).requires_grad_()
    v = randn(2, 41, 2, 64, dtype=dtype, seed=32, device=device).requires_grad_()
    out = fai.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap)
    g = randn(*out.shape, dtype=dtype, seed=33, device=device)
    got = torch.autograd.grad(out, (q, k, v), g)
    ref_out, leaves = attention_autograd_ref(*(x.cpu() for x in (q, k, v)), causal, window, softcap)
    want = torch.autograd.grad(ref_out, leaves, g.cpu().double())
    for name, a, b in zip("qkv", got, want):
        assert a.dtype == dtype and a.shape == b.shape and a.device == q.device, name
        assert rel(a, b) < (1e-5 if dtype == torch.float32 else 1e-2), name


def test_gradients_in_query_chunks_equal_the_whole(monkeypatch):
    q = randn(1, 37, 2, 32, seed=36).requires_grad_()
    k, v = randn(1, 45, 2, 32, seed=37).requires_grad_(), randn(1, 45, 2, 32, seed=38).requires_grad_()
    g = randn(1, 37, 2, 32, seed=39)
    whole = torch.autograd.grad(fai.flash_attn_func(q, k, v, causal=True, window_size=(9, 0)), (q, k, v), g)
    monkeypatch.setattr(fai, "_GRAD_SCORES", 2 * 45 * 5)  # 5 query rows a step
    chunked = torch.autograd.grad(fai.flash_attn_func(q, k, v, causal=True, window_size=(9, 0)), (q, k, v), g)
    for a, b in zip(whole, chunked):
        assert rel(b, a) < 1e-6


def test_gradients_of_packed_and_varlen_calls():
    qkv = randn(2, 17, 3, 2, 32, seed=34).requires_grad_()
    out = fai.flash_attn_qkvpacked_func(qkv, causal=True)
    (got,) = torch.autograd.grad(out.sum(), (qkv,))
    ref_out, leaves = attention_autograd_ref(*qkv.unbind(2), True, (-1, -1), 0.0)
    want = torch.stack(torch.autograd.grad(ref_out.sum(), leaves), dim=2)
    assert rel(got, want) < 1e-5

    lengths = [5, 0, 12]
    q, k, v, cu, _ = varlen_case(lengths, lengths, hk=4)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = fai.flash_attn_varlen_func(q, k, v, cu, cu, 12, 12, causal=True)
    g = randn(*out.shape, seed=35)
    got = torch.autograd.grad(out, (q, k, v), g)
    for i in range(3):
        r = slice(int(cu[i]), int(cu[i + 1]))
        if r.start == r.stop:
            continue
        ref_out, leaves = attention_autograd_ref(q[None, r], k[None, r], v[None, r], True, (-1, -1), 0.0)
        want = torch.autograd.grad(ref_out, leaves, g[None, r].double())
        for a, b in zip(got, want):
            assert rel(a[r], b[0]) < 1e-5


def test_inference_mode_tensors_and_no_grad_calls_run():
    with torch.inference_mode():
        q = randn(1, 8, 2, 32, seed=21)
        assert fai.flash_attn_func(q, q, q).shape == q.shape
    q = randn(1, 8, 2, 32, seed=21).requires_grad_()
    with torch.no_grad():
        assert fai.flash_attn_func(q, q, q).shape == q.shape


@pytest.mark.parametrize("call, code, what", [
    (lambda q, c: fai.flash_attn_func(q, q, q, dropout_p=0.1), "AK1011", "dropout_p"),
    (lambda q, c: fai.flash_attn_func(q, q, q, alibi_slopes=torch.ones(2)), "AK1011", "alibi_slopes"),
    (lambda q, c: fai.flash_attn_with_kvcache(q.clone().requires_grad_(), c, c), "AK1011", "require grad"),
    (lambda q, c: fai.flash_attn_varlen_func(q[0].clone().requires_grad_(), c, c,
                                             torch.tensor([0, 8], dtype=torch.int32),
                                             torch.tensor([0, 8], dtype=torch.int32), 8, 8,
                                             block_table=torch.zeros(1, 1, dtype=torch.int32)).sum().backward(),
     "AK1011", "backward pass over a paged cache"),
    (lambda q, c: fai.flash_attn_varlen_func(q[0], c, c, torch.tensor([0, 8], dtype=torch.int32),
                                             torch.tensor([0, 8], dtype=torch.int32), 7, 8,
                                             block_table=torch.zeros(1, 1, dtype=torch.int32)),
     "AK1108", "longer than max_seqlen_q"),
    (lambda q, c: fai.flash_attn_varlen_func(q[0], c, c, torch.tensor([0, 8], dtype=torch.int32),
                                             torch.tensor([0, 20], dtype=torch.int32), 8, 20,
                                             block_table=torch.zeros(1, 1, dtype=torch.int32)),
     "AK1111", "seqlens_k"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, k=q[:, :1]), "AK1011", "k without v"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, k=c[:, :2], v=c[:, :2], cache_seqlens=15), "AK1111",
     "cache's length"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, cache_seqlens=-1), "AK1111", "cache_seqlens"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, cache_seqlens=4,
                                              cache_batch_idx=torch.tensor([3], dtype=torch.int32)),
     "AK1111", "cache_batch_idx"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, cache_seqlens=torch.tensor([4.0])), "AK1104",
     "cache_seqlens"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, cache_seqlens=torch.tensor([4, 4], dtype=torch.int32)),
     "AK1103", "cache_seqlens"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, cache_seqlens=4, block_table=torch.zeros(
        1, 2, dtype=torch.int32), cache_leftpad=torch.zeros(1, dtype=torch.int32)), "AK1011", "cache_leftpad"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, k=c[:, :1], v=c[:, :1], cache_seqlens=1,
                                              rotary_cos=torch.ones(16, 24), rotary_sin=torch.ones(16, 24)),
     "AK1011", "rotary"),
    (lambda q, c: fai.flash_attn_with_kvcache(q.numpy(), c, c), "AK1105", "torch tensor"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, cache_seqlens=2**40), "AK1111", "cache_seqlens"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, k=c[:, :1], v=c[:, :1], cache_seqlens=16), "AK1111",
     "cache_seqlens 16 + 1"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, k=c[:, :1], v=c[:, :1], cache_seqlens=3,
                                              rotary_cos=torch.ones(0, 8), rotary_sin=torch.ones(0, 8)),
     "AK1011", "rotary"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, k=c[:, :1], v=c[:, :1], cache_seqlens=3,
                                              rotary_cos=torch.ones(16, 0), rotary_sin=torch.ones(16, 0)),
     "AK1011", "rotary"),
    # int64 index tensors were narrowed with .to(int32): 2**32 + 3 became 3 and the append went there.
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, k=c[:, :1], v=c[:, :1],
                                              cache_seqlens=torch.tensor([2**32 + 3])), "AK1012", "cache_seqlens"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, k=c[:, :1], v=c[:, :1], cache_seqlens=3,
                                              cache_batch_idx=torch.tensor([2**32])), "AK1012", "cache_batch_idx"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, cache_seqlens=3, cache_leftpad=torch.tensor([-2**32 + 1])),
     "AK1012", "cache_leftpad"),
    (lambda q, c: fai.flash_attn_varlen_func(q[0], c, c, torch.tensor([0, 8]), torch.tensor([0, 2**32 + 8]), 8, 8,
                                             block_table=torch.zeros(1, 1, dtype=torch.int32)), "AK1012",
     "cu_seqlens_k"),
    # The padded queries of a paged varlen call: torch's allocator failed with a bare RuntimeError.
    (lambda q, c: fai.flash_attn_varlen_func(q[0], c, c, torch.tensor([0, 8], dtype=torch.int32),
                                             torch.tensor([0, 8], dtype=torch.int32), 2**40, 8,
                                             block_table=torch.zeros(1, 1, dtype=torch.int32)), "AK1012", "max_seqlen_q"),
    (lambda q, c: fai.flash_attn_varlen_func(q[0], c, c, torch.tensor([0, 8], dtype=torch.int32),
                                             torch.tensor([0, 8], dtype=torch.int32), 2**30, 8,
                                             block_table=torch.zeros(1, 1, dtype=torch.int32)), "AK1013", "padded"),
    # OverflowError before; "no" was True for the flags.
    (lambda q, c: fai.flash_attn_func(q, q, q, dropout_p=2**2000), "AK1011", "dropout_p"),
    (lambda q, c: fai.flash_attn_func(q, q, q, softcap=2**2000), "AK1005", "softcap"),
    (lambda q, c: fai.flash_attn_func(q, q, q, return_attn_probs="no"), "AK1014", "return_attn_probs"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c, c, k=c[:, :1], v=c[:, :1], cache_seqlens=3,
                                              rotary_cos=torch.ones(16, 8), rotary_sin=torch.ones(16, 8),
                                              rotary_interleaved="no"), "AK1014", "rotary_interleaved"),
    # Tensors with no memory to read or no strides: BufferError / RuntimeError before.
    (lambda q, c: fai.flash_attn_func(q, q.to("meta"), q), "AK1105", "meta"),
    (lambda q, c: fai.flash_attn_func(q.to_sparse(), q, q), "AK1112", "'q'"),
    (lambda q, c: fai.flash_attn_with_kvcache(q, c.to_sparse(), c), "AK1112", "k_cache"),
    (lambda q, c: fai.flash_attn_func(torch.nested.nested_tensor([q[0], q[0]]), q, q), "AK1112", "'q'"),
])
def test_refusals_are_catalogued(call, code, what):
    q, cache = randn(1, 8, 2, 32, seed=22), randn(1, 16, 2, 32, seed=23)
    before = cache.clone()
    error = expect_refused(code, call, q, cache)
    assert what in str(error)
    assert torch.equal(cache, before)  # refused before anything was written


# --- every argument replaced by what a caller gets wrong: a catalogued refusal or a result, nothing else ---


def bad_values(x):
    """Wrong objects, dtypes, ranks, lengths and contents for an argument whose valid value is x."""
    yield "none", None
    yield "str", "x"
    yield "list", [1, 2]
    yield "float", 2.5
    if isinstance(x, torch.Tensor):
        for dtype in (torch.float64, torch.int8, torch.bool, torch.int64, torch.float16):
            if dtype != x.dtype:
                yield f"dtype_{dtype}", x.to(dtype)
        yield "rank_up", x[None]
        if x.dim() > 1:
            yield "rank_down", x[0]
        yield "longer", torch.cat([x, x[:1]])
        yield "empty", x[:0]
        if x.is_floating_point():
            yield "nan", torch.full_like(x, float("nan"))
        else:
            yield "huge", torch.full_like(x, 2**30)
            yield "negative", torch.full_like(x, -3)
    elif isinstance(x, int):
        yield "negative", -5
        yield "huge", 2**40


def fa_calls():
    cu = torch.tensor([0, 5, 5, 12], dtype=torch.int32)
    cache = randn(3, 16, 2, 32, seed=40)
    return {
        "flash_attn_func": (fai.flash_attn_func, {"q": randn(2, 9, 4, 32), "k": randn(2, 11, 2, 32),
                                                  "v": randn(2, 11, 2, 32), "softmax_scale": 0.2,
                                                  "window_size": (3, 1)}),
        "flash_attn_varlen_func": (fai.flash_attn_varlen_func,
                                   {"q": randn(12, 4, 32), "k": randn(12, 2, 32), "v": randn(12, 2, 32),
                                    "cu_seqlens_q": cu, "cu_seqlens_k": cu.clone(), "max_seqlen_q": 7,
                                    "max_seqlen_k": 7}),
        "flash_attn_with_kvcache": (fai.flash_attn_with_kvcache,
                                    {"q": randn(3, 2, 4, 32), "k_cache": cache, "v_cache": cache.clone(),
                                     "k": randn(3, 2, 2, 32), "v": randn(3, 2, 2, 32),
                                     "cache_seqlens": torch.tensor([3, 0, 14], dtype=torch.int32),
                                     "cache_batch_idx": torch.tensor([2, 0, 1], dtype=torch.int32),
                                     "rotary_cos": randn(16, 8), "rotary_sin": randn(16, 8)}),
        "flash_attn_with_kvcache, paged, one length": (
            fai.flash_attn_with_kvcache,
            {"q": randn(2, 1, 4, 32), "k_cache": randn(6, 8, 2, 32), "v_cache": randn(6, 8, 2, 32),
             "k": randn(2, 1, 2, 32), "v": randn(2, 1, 2, 32), "cache_seqlens": 9,
             "block_table": torch.tensor([[5, 0], [2, 3]], dtype=torch.int32), "window_size": (4, 0),
             "softcap": 10.0}),
    }


def fa_matrix():
    cases = []
    for entry, (_, args) in fa_calls().items():
        for name, value in args.items():
            for kind, _ in bad_values(value):
                cases.append((entry, name, kind))
    return cases


@pytest.mark.parametrize("entry,name,kind", fa_matrix())
def test_bad_argument(entry, name, kind):
    function, args = fa_calls()[entry]
    args[name] = dict(bad_values(args[name]))[kind]
    try:
        result = function(**args)
    except attnkit.AttnkitError as e:
        assert e.code not in ("AK0000", "AK0003") and e.solutions, str(e)
        assert attnkit.explain(e.code)
        return
    out = result[0] if isinstance(result, tuple) else result
    assert isinstance(out, torch.Tensor) and out.shape[-1] == 32


def test_install_makes_import_flash_attn_attnkit(monkeypatch):
    for name in ("flash_attn", "flash_attn.flash_attn_interface"):
        monkeypatch.delitem(__import__("sys").modules, name, raising=False)
    fai.install()
    import flash_attn
    from flash_attn import flash_attn_func, flash_attn_with_kvcache  # noqa: F401
    from flash_attn.flash_attn_interface import flash_attn_varlen_func
    assert flash_attn_func is fai.flash_attn_func and flash_attn_varlen_func is fai.flash_attn_varlen_func
    assert flash_attn.__version__.startswith("2.")
    q = randn(1, 8, 2, 64, seed=50)
    assert rel(flash_attn_func(q, q, q, causal=True), attention_ref(q, q, q, causal=True)[0]) < 1e-5
    fai.install()  # again: a no-op on its own module


def test_install_refuses_to_shadow_a_real_flash_attn(monkeypatch):
    import sys
    import types
    real = types.ModuleType("flash_attn")
    real.__file__ = "/site-packages/flash_attn/__init__.py"
    monkeypatch.setitem(sys.modules, "flash_attn", real)
    monkeypatch.delitem(sys.modules, "flash_attn.flash_attn_interface", raising=False)
    error = expect_refused("AK1017", fai.install)
    assert "/site-packages/flash_attn" in str(error) and sys.modules["flash_attn"] is real
    assert fai.install(replace=True).__attnkit__ and sys.modules["flash_attn"] is not real
