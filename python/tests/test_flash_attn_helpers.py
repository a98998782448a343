"""The modules FlashAttention's users import beside its interface, as attnkit serves them: flash_attn.bert_padding
(attnkit.flash_attn_padding), flash_attn.layers.rotary (attnkit.flash_attn_rotary, checked against a
complex-number rotation written here), and FlashAttention 2.7's private forwards (_flash_attn_forward,
_flash_attn_varlen_forward, _get_block_size_n); install() registering them all."""
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import attnkit  # noqa: E402
from attnkit import flash_attn_interface as fai  # noqa: E402
from attnkit import flash_attn_padding as padding  # noqa: E402
from attnkit import flash_attn_rotary as rotary  # noqa: E402
from refusals import expect_refused  # noqa: E402


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


# ---- bert_padding

def masks():
    right = torch.tensor([[1] * 7, [0] * 7, [1, 1, 1, 0, 0, 0, 0]], dtype=torch.bool)  # lengths 7, 0, 3
    left = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1] * 7, [0, 0, 0, 0, 0, 0, 1]], dtype=torch.int32)  # int mask
    return right, left


@pytest.mark.parametrize("which", [0, 1])
def test_unpad_then_pad_is_the_identity_on_the_kept_rows(which):
    x = randn(3, 7, 2, 4, seed=1)
    mask = masks()[which]
    rows, indices, cu, max_seqlen, used = padding.unpad_input(x, mask)
    keep = mask.bool()
    expected = torch.cat([x[b][keep[b]] for b in range(3)])  # sequence by sequence, in token order
    assert torch.equal(rows, expected)
    lengths = keep.sum(-1)
    assert cu.dtype == torch.int32 and cu.tolist() == [0] + torch.cumsum(lengths, 0).tolist()
    assert max_seqlen == int(lengths.max()) and isinstance(max_seqlen, int)
    assert used.dtype == torch.int32 and used.tolist() == lengths.tolist()
    assert torch.equal(padding.index_first_axis(x.reshape(21, 2, 4), indices), rows)
    back = padding.pad_input(rows, indices, 3, 7)
    assert torch.equal(back[keep], x[keep]) and not back[~keep].any()


def test_unused_rows_count_in_cu_seqlens_not_in_seqused():
    x = randn(2, 5, 3, seed=2)
    used = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    unused = torch.tensor([[0, 0, 1, 0, 0], [0, 1, 1, 1, 0]], dtype=torch.bool)
    rows, _, cu, max_seqlen, seqused = padding.unpad_input(x, used, unused)
    assert cu.tolist() == [0, 3, 7] and max_seqlen == 4 and seqused.tolist() == [2, 1] and rows.shape == (7, 3)


def test_padding_is_differentiable():
    x = randn(2, 4, 3, seed=3).requires_grad_()
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    rows, indices, *_ = padding.unpad_input(x, mask)
    (padding.pad_input(rows * 2, indices, 2, 4).sum()).backward()
    assert torch.equal(x.grad, 2.0 * mask[..., None].double().expand_as(x).to(x.grad.dtype))


def test_padding_refusals():
    x = randn(2, 4, 3)
    expect_refused("AK1103", padding.unpad_input, x, torch.ones(2, 5, dtype=torch.bool))
    expect_refused("AK1102", padding.unpad_input, x, torch.ones(8, dtype=torch.bool))
    expect_refused("AK1102", padding.unpad_input, randn(4), torch.ones(2, 2))
    expect_refused("AK1104", padding.index_first_axis, x, torch.tensor([0.0, 1.0]))
    expect_refused("AK1103", padding.pad_input, randn(3, 3), torch.tensor([0, 1]), 2, 4)
    # Indices outside their rows, sizes that are not non-negative integers: refused before any indexing.
    expect_refused("AK1108", padding.index_first_axis, x.reshape(8, 3), torch.tensor([0, 8]))
    expect_refused("AK1108", padding.index_first_axis, x.reshape(8, 3), torch.tensor([-1]))
    expect_refused("AK1108", padding.pad_input, randn(2, 3), torch.tensor([0, 8]), 2, 4)
    expect_refused("AK1014", padding.pad_input, randn(2, 3), torch.tensor([0, 1]), -2, 4)
    expect_refused("AK1014", padding.pad_input, randn(2, 3), torch.tensor([0, 1]), 2.5, 4)
    expect_refused("AK1014", padding.index_put_first_axis, randn(2, 3), torch.tensor([0, 1]), "8")


# ---- rotary

def rotated_by_complex_numbers(x, cos, sin, positions, interleaved):
    """x (batch, seqlen, heads, dim) in float64: each rotated pair as a complex number times e^(i angle)."""
    x = x.double().numpy()
    half = cos.shape[1]
    angle_cos = np.ones(positions.shape + (half,))
    angle_sin = np.zeros(positions.shape + (half,))
    inside = positions.numpy() < cos.shape[0]
    at = np.minimum(positions.numpy(), cos.shape[0] - 1)
    angle_cos[inside] = cos.double().numpy()[at[inside]]
    angle_sin[inside] = sin.double().numpy()[at[inside]]
    turn = (angle_cos + 1j * angle_sin)[:, :, None, :]
    out = x.copy()
    if interleaved:
        z = (x[..., 0:2 * half:2] + 1j * x[..., 1:2 * half:2]) * turn
        out[..., 0:2 * half:2], out[..., 1:2 * half:2] = z.real, z.imag
    else:
        z = (x[..., :half] + 1j * x[..., half:2 * half]) * turn
        out[..., :half], out[..., half:2 * half] = z.real, z.imag
    return torch.from_numpy(out)


def tables(seqlen_ro, half, seed=4):
    theta = randn(seqlen_ro, half, seed=seed) * 3
    return torch.cos(theta), torch.sin(theta)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("offsets", [0, 5, "tensor"])
def test_rotary_matches_a_complex_rotation(interleaved, offsets):
    x = randn(2, 6, 3, 16, seed=5)
    cos, sin = tables(9, 6)  # rotary_dim 12 of 16: four channels pass through; positions past 9 unrotated
    seqlen_offsets = torch.tensor([0, 7], dtype=torch.int32) if offsets == "tensor" else offsets
    start = seqlen_offsets.long()[:, None] if offsets == "tensor" else torch.full((2, 1), offsets)
    positions = start + torch.arange(6)
    got = rotary.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=seqlen_offsets)
    assert got.dtype == x.dtype and got.shape == x.shape
    torch.testing.assert_close(got.double(), rotated_by_complex_numbers(x, cos, sin, positions, interleaved),
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(got[..., 12:], x[..., 12:])


def test_rotary_varlen_is_each_sequence_rotated_from_its_start():
    cos, sin = tables(16, 4)
    x = randn(9, 2, 8, seed=6)
    cu = torch.tensor([0, 4, 4, 9], dtype=torch.int32)
    got = rotary.apply_rotary_emb(x, cos, sin, cu_seqlens=cu, max_seqlen=5, seqlen_offsets=torch.tensor([1, 0, 3]))
    for b, offset in enumerate([1, 0, 3]):
        lo, hi = int(cu[b]), int(cu[b + 1])
        if hi > lo:
            alone = rotary.apply_rotary_emb(x[None, lo:hi], cos, sin, seqlen_offsets=offset)[0]
            assert torch.equal(got[lo:hi], alone)


def test_rotary_in_place_and_the_packed_variants():
    cos, sin = tables(8, 4)
    x = randn(1, 5, 2, 8, seed=7)
    expected = rotary.apply_rotary_emb(x, cos, sin)
    y = x.clone()
    assert rotary.apply_rotary_emb(y, cos, sin, inplace=True) is y and torch.equal(y, expected)
    qkv = randn(1, 5, 3, 2, 8, seed=8)
    want_q, want_k = (rotary.apply_rotary_emb(qkv[:, :, i], cos, sin) for i in (0, 1))
    v = qkv[:, :, 2].clone()
    rotary.apply_rotary_emb_qkv_(qkv, cos, sin)
    assert torch.equal(qkv[:, :, 0], want_q) and torch.equal(qkv[:, :, 1], want_k) and torch.equal(qkv[:, :, 2], v)
    kv = randn(1, 5, 2, 2, 8, seed=9)
    want_k = rotary.apply_rotary_emb(kv[:, :, 0], cos, sin)
    rotary.apply_rotary_emb_kv_(kv, cos, sin)
    assert torch.equal(kv[:, :, 0], want_k)


def test_rotary_refusals():
    cos, sin = tables(8, 4)
    x = randn(1, 5, 2, 8)
    expect_refused("AK1103", rotary.apply_rotary_emb, x, cos, sin[:, :3])
    expect_refused("AK1011", rotary.apply_rotary_emb, x, *tables(8, 5))  # rotary_dim 10 > head dim 8
    expect_refused("AK1102", rotary.apply_rotary_emb, x[0], cos, sin)  # 3-d without cu_seqlens
    expect_refused("AK1108", rotary.apply_rotary_emb, x[0], cos, sin, cu_seqlens=torch.tensor([0, 3]))
    expect_refused("AK1103", rotary.apply_rotary_emb, x, cos, sin, seqlen_offsets=torch.tensor([1, 2]))
    expect_refused("AK1014", rotary.apply_rotary_emb, x, cos, sin, seqlen_offsets="3")
    expect_refused("AK1014", rotary.apply_rotary_emb, x, cos, sin, seqlen_offsets=1.5)


# ---- FlashAttention 2.7's private forwards

def test_private_forward_is_flash_attn_func_with_its_lse():
    q, k, v = randn(2, 9, 4, 32, seed=10), randn(2, 11, 2, 32, seed=11), randn(2, 11, 2, 32, seed=12)
    out, lse, s_dmask, rng_state = fai._flash_attn_forward(q, k, v, 0.0, 0.2, True, 3, 0, 0.0, None, False)
    want_out, want_lse, _ = fai.flash_attn_func(q, k, v, softmax_scale=0.2, causal=True, window_size=(3, 0),
                                                return_attn_probs=True)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse) and lse.shape == (2, 4, 9)
    assert s_dmask is None and rng_state.shape == (2,) and rng_state.dtype == torch.int64
    expect_refused("AK1011", fai._flash_attn_forward, q, k, v, 0.1, 0.2, True)


def test_private_varlen_forward_is_flash_attn_varlen_func():
    cu = torch.tensor([0, 5, 5, 12], dtype=torch.int32)
    q, k, v = (randn(12, 2, 16, seed=s) for s in (13, 14, 15))
    out, lse, _, _ = fai._flash_attn_varlen_forward(q, k, v, cu, cu, 7, 7, 0.0, None, True)
    want_out, want_lse, _ = fai.flash_attn_varlen_func(q, k, v, cu, cu, 7, 7, causal=True, return_attn_probs=True)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse) and lse.shape == (2, 12)
    expect_refused("AK1011", fai._flash_attn_varlen_forward, q, k, v, cu, cu, 7, 7, 0.0, None, True,
                   leftpad_k=torch.zeros(3, dtype=torch.int32))
    expect_refused("AK1011", fai._flash_attn_varlen_forward, q, k, v, cu, cu, 7, 7, 0.0, None, True,
                   seqused_k=torch.tensor([5, 0, 7], dtype=torch.int32))  # seqused_k needs pages
    assert fai._get_block_size_n(q.device, 128, False, True) == 64
    expect_refused("AK1011", fai._get_block_size_n, q.device, 512, False, True)


# ---- install()

@pytest.fixture
def no_flash_attn_modules(monkeypatch):
    for name in [n for n in sys.modules if n == "flash_attn" or n.startswith("flash_attn.")]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [n for n in sys.modules if n == "flash_attn" or n.startswith("flash_attn.")]:
        del sys.modules[name]


def test_install_serves_what_flash_attn_users_import(no_flash_attn_modules):
    fai.install()
    from flash_attn.bert_padding import index_first_axis, pad_input, unpad_input  # transformers' imports
    from flash_attn.flash_attn_interface import _flash_attn_forward, _get_block_size_n  # noqa: F401
    from flash_attn.layers.rotary import apply_rotary_emb
    assert unpad_input is padding.unpad_input and pad_input is padding.pad_input
    assert index_first_axis is padding.index_first_axis and apply_rotary_emb is rotary.apply_rotary_emb
    assert _flash_attn_forward is fai._flash_attn_forward
    import flash_attn
    assert flash_attn.bert_padding is padding and flash_attn.layers.rotary is rotary


def test_private_varlen_forward_over_pages_reads_seqused_k_keys():
    pages = randn(6, 4, 2, 16, seed=16), randn(6, 4, 2, 16, seed=17)
    block_table = torch.tensor([[3, 1, 5], [0, 2, 4]], dtype=torch.int32)
    q = randn(2, 4, 16, seed=18)  # one decode query per sequence
    cu_q = torch.tensor([0, 1, 2], dtype=torch.int32)
    used = torch.tensor([9, 5], dtype=torch.int32)
    cu_full = torch.tensor([0, 12, 24], dtype=torch.int32)  # whole caches: seqused_k shortens them
    out, lse, _, _ = fai._flash_attn_varlen_forward(q, *pages, cu_q, cu_full, 1, 12, 0.0, None, False,
                                                    block_table=block_table, seqused_k=used, num_splits=3)
    cu_used = torch.tensor([0, 9, 14], dtype=torch.int32)
    want_out, want_lse, _ = fai.flash_attn_varlen_func(q, *pages, cu_q, cu_used, 1, 9, block_table=block_table,
                                                       return_attn_probs=True)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    whole, _, _, _ = fai._flash_attn_varlen_forward(q, *pages, cu_q, cu_full, 1, 12, 0.0, None, False,
                                                    block_table=block_table)
    assert not torch.equal(whole, out)  # the unused keys were not attended


def test_padding_past_memory_is_refused_before_torch_allocates():
    # torch's allocator failed with a bare RuntimeError (and past int64, "Storage size calculation overflowed").
    expect_refused("AK1013", padding.pad_input, randn(3, 4), torch.tensor([0, 1, 2]), 2**20, 2**20)
    expect_refused("AK1013", padding.pad_input, randn(3, 4), torch.tensor([0, 1, 2]), 2**31, 2**31)
    expect_refused("AK1013", padding.index_put_first_axis, randn(3, 4), torch.tensor([0, 1, 2]), 2**40)


def test_rotary_arguments_that_were_taken_by_truthiness_or_truncated():
    x = randn(1, 3, 2, 8)
    cos, sin = tables(4, 2)
    expect_refused("AK1014", rotary.apply_rotary_emb, x, cos, sin, interleaved="no")  # was True
    expect_refused("AK1014", rotary.apply_rotary_emb, x.clone(), cos, sin, inplace="no")
    expect_refused("AK1104", rotary.apply_rotary_emb, x.int(), cos, sin)  # rotated, then truncated to ints
    expect_refused("AK1104", rotary.apply_rotary_emb, x, cos.to(torch.complex64), sin.to(torch.complex64))
    expect_refused("AK1104", rotary.apply_rotary_emb, x, cos.int(), sin)
    # FlashAttention asserts the packing: a (.., 2, ..) qkv rotated its v as k.
    expect_refused("AK1103", rotary.apply_rotary_emb_qkv_, randn(1, 3, 2, 2, 8), cos, sin)
    expect_refused("AK1103", rotary.apply_rotary_emb_kv_, randn(1, 3, 3, 2, 8), cos, sin)
    expect_refused("AK1014", rotary.apply_rotary_emb_qkv_, randn(1, 3, 6, 8), cos, sin, num_heads_q="4")
    expect_refused("AK1103", rotary.apply_rotary_emb_qkv_, randn(1, 3, 6, 8), cos, sin, num_heads_q=3)
    expect_refused("AK1103", rotary.apply_rotary_emb_qkv_, randn(1, 3, 6, 8), cos, sin, num_heads_q=6)
    expect_refused("AK1101", rotary.apply_rotary_emb_qkv_, None, cos, sin)  # AttributeError of None.dim()
