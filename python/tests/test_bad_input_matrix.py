"""The bad-input matrix through the Python module: every entry point (attention,
with block-sparse lists too, with a gate on hybrid_window_attn_h3, attention_varlen, attention_with_kvcache,
scaled_dot_product_attention, a Deployment layer), every
argument replaced by objects that are not arrays, arrays of every dtype, rank,
shape, stride and content (NaN/Inf, empty), index tensors of every dtype and
length at the end of a guarded page, and scalar options of every wrong kind.

An outcome passes when it is an AttnkitError whose code has a catalog page and
a fix (never AK0000 / AK0003), or a result that matches the float64 NumPy
reference on the same values. Anything else - another exception type, a wrong
result, a crash of the interpreter - fails."""
import numpy as np
import pytest

import attnkit
from guarded import guarded
from reference_numpy import attention_ref, expand_block_mask, hybrid_window_ref, rel_l2

RNG = np.random.default_rng(2020)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


LENS_Q, LENS_K = (4, 0, 9), (12, 3, 5)
CU_Q = np.concatenate([[0], np.cumsum(LENS_Q)]).astype(np.int32)
CU_K = np.concatenate([[0], np.cumsum(LENS_K)]).astype(np.int32)
TABLE = np.array([[3, 1, 0], [5, 2, 4]], np.int32)
CACHE_LENS = np.array([40, 20], np.int32)
# Block-sparse lists shared by every sequence and head: 32 queries and keys in blocks of 16.
SPARSE_OFFSETS = np.array([0, 2, 3], np.int32)
SPARSE_INDICES = np.array([0, 1, 1], np.int32)


def sparse_attention(q, k, v, block_offsets, block_indices, block_q=16, block_k=16, **options):
    """attention() with block-sparse lists (positional here, so the matrix mutates them like q, k, v)."""
    return attnkit.attention(q, k, v, block_offsets=block_offsets, block_indices=block_indices, block_q=block_q,
                             block_k=block_k, **options)


def gated_attention(q, k, v, gate, backend="hybrid_window_attn_h3", **options):
    """attention() on a gated backend (the gate positional here, so the matrix mutates it like q, k, v)."""
    return attnkit.attention(q, k, v, gate=gate, backend=backend, **options)


def base_calls():
    """entry name -> (function, positional names, valid arguments)."""
    return {
        "attention": (attnkit.attention, ("q", "k", "v"),
                      {"q": randn(2, 9, 4, 32), "k": randn(2, 14, 2, 32), "v": randn(2, 14, 2, 32)}),
        "attention_varlen": (attnkit.attention_varlen,
                             ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"),
                             {"q": randn(13, 2, 16), "k": randn(20, 1, 16), "v": randn(20, 1, 16),
                              "cu_seqlens_q": CU_Q.copy(), "cu_seqlens_k": CU_K.copy(), "max_seqlen_q": 9,
                              "max_seqlen_k": 12}),
        "attention_with_kvcache": (attnkit.attention_with_kvcache,
                                   ("q", "k_cache", "v_cache", "cache_seqlens", "block_table"),
                                   {"q": randn(2, 1, 4, 16), "k_cache": randn(6, 16, 2, 16),
                                    "v_cache": randn(6, 16, 2, 16), "cache_seqlens": CACHE_LENS.copy(),
                                    "block_table": TABLE.copy()}),
        "sdpa": (attnkit.scaled_dot_product_attention, ("query", "key", "value"),
                 {"query": randn(2, 4, 9, 32), "key": randn(2, 2, 14, 32), "value": randn(2, 2, 14, 32)}),
        "sparse": (sparse_attention, ("q", "k", "v", "block_offsets", "block_indices"),
                   {"q": randn(2, 32, 2, 16), "k": randn(2, 32, 2, 16), "v": randn(2, 32, 2, 16),
                    "block_offsets": SPARSE_OFFSETS.copy(), "block_indices": SPARSE_INDICES.copy()}),
        "gated": (gated_attention, ("q", "k", "v", "gate"),
                  {"q": randn(2, 24, 4, 64), "k": randn(2, 24, 2, 64), "v": randn(2, 24, 2, 64),
                   "gate": RNG.uniform(size=(2, 24, 4)).astype(np.float32)}),
        "layer": (layer(), ("q", "k", "v"),
                  {"q": randn(2, 9, 4, 32), "k": randn(2, 14, 2, 32), "v": randn(2, 14, 2, 32)}),
    }


_LAYER = []


def layer():
    """A Deployment layer (wan's transformer.self on the CPU), made once."""
    if not _LAYER:
        _LAYER.append(attnkit.Deployment(model="wan", platform="cpu", dtype="fp32").layer("transformer", "self", 0))
    return _LAYER[0]


# attnkit.Deployment(**flags): each engine flag with values of every wrong kind.
DEPLOYMENT_MUTATIONS = [
    ("model", [None, 5, "", "wan2", "/tmp", "/dev/zero", "/nonexistent.yaml", "\udcff"]),
    ("platform", ["cuda:sm4294967386", "gpu", "", 7, "cuda:sm"]),
    ("ring_degree", [0, -1, "x", 2**31, 2**70, 2.5, None]),
    ("ulysses_degree", [0, 3, 2**31]),
    ("sp_degree", [0, 5]),
    ("dtype", ["float64", "nope", 3]),
    ("attention_backend", ["nope", 3, "fa3", "sparge_attn"]),
    ("attention_backend_config", ["/dev/zero", "/tmp", '{"topk": 1e400}', "{", {"topk": 2.0}, "topk=" + "9" * 400]),
    ("component_attention_backends", ["=", "text_encoder=", "nope=sdpa", 5]),
    ("kv_cache_dtype", ["fp8_e4m3", "nope"]),
    ("attention_backend_override", ["nope", "sparge_attn"]),
    ("skip_softmax_params", ["/dev/zero", '{"threshold_scale_factor": -1}', "x"]),
    ("enable_torch_compile", [True, "yes"]),
]


INDEX = {"cu_seqlens_q", "cu_seqlens_k", "cache_seqlens", "block_table", "block_offsets", "block_indices"}
NOT_ARRAYS = {"none": None, "list": [[1.0, 2.0]], "float": 1.0, "str": "q", "dict": {"a": 1},
              "object_array": np.array([[None]], dtype=object)}
DTYPES = [np.float64, np.float32, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.bool_,
          np.complex64]


def array_mutations(name, x):
    """(id, replacement) for one array argument."""
    out = [(k, v) for k, v in NOT_ARRAYS.items()]
    for dt in DTYPES:
        if np.dtype(dt) != x.dtype:
            out.append((f"as_{np.dtype(dt).name}", guarded(x, dt) if name in INDEX else x.astype(dt)))
    out.append(("rank_plus_1", x[..., None]))
    if x.ndim > 1:
        out.append(("rank_minus_1", x[0]))
    out.append(("rank_0", np.asarray(x.flat[0])))
    for d in range(x.ndim):
        grow = [(0, 0)] * x.ndim
        grow[d] = (0, 1)
        out.append((f"dim{d}_plus_1", guarded(np.pad(x, grow), x.dtype) if name in INDEX else np.pad(x, grow)))
        if x.shape[d] > 1:
            cut = [slice(None)] * x.ndim
            cut[d] = slice(0, x.shape[d] - 1)
            out.append((f"dim{d}_minus_1", guarded(x[tuple(cut)], x.dtype) if name in INDEX else x[tuple(cut)]))
        empty = [slice(None)] * x.ndim
        empty[d] = slice(0, 0)
        out.append((f"dim{d}_empty", x[tuple(empty)]))
        flip = [slice(None)] * x.ndim
        flip[d] = slice(None, None, -1)
        out.append((f"dim{d}_reversed_view", x[tuple(flip)]))  # a negative stride
    if x.ndim >= 1 and x.shape[-1] > 1 and name not in INDEX:
        out.append(("last_dim_stride_2", np.repeat(x, 2, axis=-1)[..., ::2]))
    readonly = x.copy()
    readonly.setflags(write=False)
    out.append(("read_only", readonly))
    if name not in INDEX and np.issubdtype(x.dtype, np.floating):
        for label, bad in (("nan", np.nan), ("inf", np.inf), ("minus_inf", -np.inf)):
            y = x.copy()
            y.flat[0] = bad
            out.append((f"holds_{label}", y))
        out.append(("broadcast_first_dim", np.broadcast_to(x[:1], x.shape)))
    if name in INDEX:
        for label, transform in (("negative", lambda a: -a - 1), ("int32_max", lambda a: np.full_like(a, 2**31 - 1)),
                                 ("decreasing", lambda a: a[::-1].copy()), ("shifted", lambda a: a + 1)):
            out.append((label, guarded(transform(x.astype(np.int64)).astype(np.int32), np.int32)))
        out.append(("strided", np.repeat(x, 2, axis=-1)[..., ::2]))
    return out


OPTION_MUTATIONS = [
    ("causal", ["yes", None, 2, [True], np.float32(1.0)]),
    ("window_size", [(2.5, 0), (1, 2, 3), "8,0", (-2, 0), (0, -9), (2**31, 0), (2**70, 0), None, (None, 0),
                     (2**31 - 1, 2**31 - 1), (3, 0), (np.int64(4), np.int32(1))]),
    ("softcap", ["soft", None, -1.0, 1e-30, 1e30, float("nan"), float("inf"), [1.0], 30.0]),
    ("softmax_scale", ["x", 0.0, -1.0, 1e-30, 1e30, float("nan"), [0.1], 0.25, np.float16(0.5)]),
    ("backend", [None, 3, b"cpu_flash", "", "nope", "CPU-FLASH", "reference", "fa3", "cuda_sdpa", "sdpa"]),
    ("return_lse", ["no", 2, True]),
    ("sinks", [None, [0.0, 1.0], np.zeros(3, np.float32), np.zeros((4, 1), np.float32), np.zeros(4, np.float64),
               np.array([np.nan, 0, 0, 0], np.float32), np.zeros(4, np.float32), np.zeros(8, np.float32)[::2]]),
]
SDPA_OPTIONS = [
    ("is_causal", ["yes", None, 2, True]),
    ("scale", ["x", 0.0, -1.0, 1e30, float("nan"), 0.3]),
    ("dropout_p", [0.1, "0", None, 0.0]),
    ("attn_mask", [np.ones((9, 14), bool)]),
    ("enable_gqa", [True]),
    ("backend", [None, 3, "nope", "reference"]),
]
SPARSE_OPTIONS = [
    ("block_q", [0, 15, -16, 2.5, "16", None, 2**31, 32]),
    ("block_k", [0, 2**40, 32]),
    ("block_layout", [(1,), "11", (2.5, 1), None, (1, 1), (2, 2), (2**40, 1)]),
    ("block_mask", [np.ones((1, 1, 2, 2), np.uint8)]),  # lists and a mask: which one?
]
INT_MUTATIONS = [2.5, "9", None, -1, 0, 1, 2**31, 2**63, 2**64, np.int64(9), True]


def matrix():
    cases = []
    for entry, (fn, positional, args) in base_calls().items():
        cases.append((entry, "valid", None, None))
        for name in positional:
            if isinstance(args[name], np.ndarray):
                for mid, value in array_mutations(name, args[name]):
                    cases.append((entry, f"{name}_{mid}", name, value))
            else:
                for value in INT_MUTATIONS:
                    cases.append((entry, f"{name}_{value!r}", name, value))
        options = SDPA_OPTIONS if entry == "sdpa" else OPTION_MUTATIONS + (SPARSE_OPTIONS if entry == "sparse" else [])
        for option, values in options:
            if entry == "layer" and option == "backend":
                continue  # a layer runs its decision's backend
            for value in values:
                cases.append((entry, f"{option}={value!r}"[:60], option, value))
    cases.append(("Deployment", "valid", None, None))
    for flag, values in DEPLOYMENT_MUTATIONS:
        for value in values:
            cases.append(("Deployment", f"{flag}={value!r}"[:60], flag, value))
    return cases


CASES = matrix()
OUTCOMES = {"refused": 0, "ran": 0}


def reference(entry, args):
    """The float64 NumPy result for a call that ran, from the arguments it ran with."""
    opts = {"causal": bool(args.get("causal", entry == "attention_with_kvcache")),
            "window": tuple(int(x) for x in (args.get("window_size") or (-1, -1))),
            "softcap": float(args.get("softcap", 0.0)), "scale": args.get("softmax_scale"),
            "sinks": args.get("sinks")}
    if opts["scale"] is not None:
        opts["scale"] = float(opts["scale"])
    if entry == "layer":
        opts["causal"] = bool(args.get("causal", layer().causal))
    if entry in ("attention", "layer"):
        return attention_ref(args["q"], args["k"], args["v"], **opts)[0]
    if entry == "gated":  # attnkit's window rule: the call's window, else (512, 512); causal: right 0
        left, right = opts["window"]
        window = (left, 0 if opts["causal"] else right) if (left, right) != (-1, -1) else (512, 0 if opts["causal"] else 512)
        gate = args["gate"] if args["gate"] is not None else np.zeros(np.shape(args["q"])[:3])  # no gate: zero gates
        return hybrid_window_ref(args["q"], args["k"], args["v"], gate, window, opts["scale"])
    if entry == "sparse":  # the lists' block mask, read here independently of attnkit
        offsets, indices = np.asarray(args["block_offsets"]), np.asarray(args["block_indices"])
        bq, bk = int(args.get("block_q", 16)), int(args.get("block_k", 16))
        sq, sk = args["q"].shape[1], args["k"].shape[1]
        blocks = np.zeros((1, 1, -(-sq // bq), -(-sk // bk)), bool)
        for r in range(blocks.shape[2]):
            blocks[0, 0, r, indices[offsets[r]:offsets[r + 1]]] = True
        return attention_ref(args["q"], args["k"], args["v"], mask=expand_block_mask(blocks, bq, bk, sq, sk), **opts)[0]
    if entry == "sdpa":
        q, k, v = (np.asarray(args[n]).swapaxes(1, 2) for n in ("query", "key", "value"))
        scale = None if args.get("scale") is None else float(args["scale"])
        return attention_ref(q, k, v, causal=bool(args.get("is_causal", False)), scale=scale)[0].swapaxes(1, 2)
    if entry == "attention_varlen":
        cu_q, cu_k = np.asarray(args["cu_seqlens_q"]), np.asarray(args["cu_seqlens_k"])
        out = np.zeros(np.asarray(args["q"]).shape[:-1] + (np.asarray(args["v"]).shape[-1],))
        for b in range(len(cu_q) - 1):
            qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            if cu_q[b + 1] > cu_q[b]:
                out[qs] = attention_ref(args["q"][None, qs], args["k"][None, ks], args["v"][None, ks], **opts)[0][0]
        return out
    q, kc, vc = args["q"], args["k_cache"], args["v_cache"]
    table, lens = np.asarray(args["block_table"]), np.asarray(args["cache_seqlens"])
    out = []
    for b in range(q.shape[0]):
        kk = kc[table[b]].reshape(-1, *kc.shape[2:])[: lens[b]]
        vv = vc[table[b]].reshape(-1, *vc.shape[2:])[: lens[b]]
        out.append(attention_ref(q[b:b + 1], kk[None], vv[None], **opts)[0][0])
    return np.stack(out)


def deployment(flags):
    return attnkit.Deployment(model=flags.pop("model", "wan"), platform=flags.pop("platform", "cpu"), **flags)


def outcome(entry, name, value):
    """("refused", code) | ("ran", "") | ("wrong", why) | ("uncatalogued", what) for one case."""
    if entry == "Deployment":
        fn, positional, args = deployment, ("flags",), {"flags": {}}
        if name is not None:
            args["flags"][name] = value
        name = None
    else:
        fn, positional, args = base_calls()[entry]
    args = dict(args)
    for index in INDEX & set(args):
        args[index] = guarded(args[index], np.int32)  # every index tensor ends at a guard page
    if name is not None:
        args[name] = value
    call_args = [args.pop(n) for n in positional]
    try:
        out = fn(*call_args, **args)
    except attnkit.AttnkitError as e:
        if e.code in ("AK0000", "AK0003") or not e.solutions:
            return "uncatalogued", str(e)
        try:
            attnkit.explain(e.code)
        except attnkit.AttnkitError:
            return "uncatalogued", f"{e.code} has no catalog page"
        return "refused", e.code
    except Exception as e:  # noqa: BLE001 - any other exception type is the finding
        return "uncatalogued", f"{type(e).__name__}: {e}"
    if entry == "Deployment":
        return ("ran", "") if isinstance(out, attnkit.Deployment) else ("wrong", repr(out))
    # It ran: the arguments were valid, so the result must be the reference's.
    result = out[0] if isinstance(out, tuple) else out
    expected = reference(entry, dict(zip(positional, call_args), **args))
    got = np.asarray(result, np.float64)
    bound = 1e-5 if np.asarray(call_args[0]).dtype == np.float32 else 1e-2
    if got.shape != expected.shape or not np.all(np.isfinite(got)) or rel_l2(got, expected) >= bound:
        return "wrong", f"shape {got.shape} vs {expected.shape}, rel_l2 {rel_l2(got, expected) if got.shape == expected.shape else '-'}"
    return "ran", ""


@pytest.mark.parametrize("entry, case, name, value", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_bad_input(entry, case, name, value):
    kind, detail = outcome(entry, name, value)
    assert kind in ("refused", "ran"), f"{entry} {case}: {kind}: {detail}"
    OUTCOMES[kind] += 1


def test_the_matrix_is_large(capsys):
    assert len(CASES) > 400
    with capsys.disabled():
        print(f"\nbad-input matrix (Python): {len(CASES)} inputs; this run: {OUTCOMES['refused']} refused with a "
              f"catalogued code, {OUTCOMES['ran']} ran and matched the reference")
