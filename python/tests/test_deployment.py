"""attnkit.Deployment on NumPy arrays (the CPU): each selection level decides what
runs, a call shape is planned once, requests switch and restore, refused requests
change nothing, creation fails as `check` does, and the audit sees the built layers."""
import numpy as np
import pytest

import attnkit
from reference_numpy import attention_ref, rel_l2
from refusals import expect_refused

RNG = np.random.default_rng(7)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def deploy(**flags):
    return attnkit.Deployment(model=flags.pop("model", "wan"), platform="cpu", dtype="fp32", **flags)


def run(layer, sq=17, sk=33, heads=4, dim=64):
    """Runs `layer` on random inputs, checks them against the float64 oracle, returns what ran."""
    q, k, v = randn(2, sq, heads, dim), randn(2, sk, heads, dim), randn(2, sk, heads, dim)
    out = layer(q, k, v)
    ref, _ = attention_ref(q, k, v, causal=layer.causal)
    assert out.shape == (2, sq, heads, dim) and out.dtype == np.float32
    assert rel_l2(out, ref) < 1e-5
    return attnkit.last_backend()


def test_each_level_decides_what_runs():
    dep = deploy(attention_backend="sdpa", component_attention_backends="text_encoder=reference,transformer.cross=reference")
    levels = {(c, r): (dep.layer(c, r).decision["decided_by"], run(dep.layer(c, r)))
              for c, r in [("transformer", "self"), ("transformer", "cross"), ("text_encoder", "self"), ("vae", "self")]}
    assert levels == {("transformer", "self"): ("engine_default", "cpu_flash"),
                      ("transformer", "cross"): ("component_role_override", "reference"),
                      ("text_encoder", "self"): ("component_override", "reference"),
                      ("vae", "self"): ("engine_default", "cpu_flash")}
    assert run(deploy().layer("transformer", "self")) == "cpu_flash"  # auto
    with attnkit.force_backend("reference"):
        forced = deploy(attention_backend="sdpa")  # the global force is read when the deployment is made
    layer = forced.layer("transformer", "self")
    assert layer.decision["decided_by"] == "global_force" and run(layer) == "reference"


def test_layers_are_the_profiles_and_plan_each_shape_once():
    dep = deploy()
    self0, self1 = dep.layer("transformer", "self", 0), dep.layer("transformer", "self", 1)
    assert dep.layer("transformer", "self", 0) is self0
    assert self0.planned_shapes == 1  # the profile's shape of the role, planned at start-up
    for _ in range(3):
        run(self0)
    run(self1)  # the same call shape in another layer of the role: no new plan
    assert self0.planned_shapes == self1.planned_shapes == 2
    run(self1, sk=50)
    assert self0.planned_shapes == 3
    expect_refused("AK3018", dep.layer, "transformer", "self", 40)
    expect_refused("AK3018", dep.layer, "transformer", "joint")
    expect_refused("AK3018", dep.layer, "decoder", "prefill")


def test_request_switches_switchable_layers_and_restores():
    dep = deploy(attention_backend="reference")
    dit, text = dep.layer("transformer", "self"), dep.layer("text_encoder", "self")
    assert dit.switchable and not text.switchable
    assert run(dit) == "reference"
    with dep.request(attention_backend_override="cpu_flash", step=4):
        assert dit.decision["decided_by"] == "per_request"
        assert run(dit) == "cpu_flash"
        assert run(text) == "reference"  # not switchable
        with dep.request(attention_backend_override="none"):
            assert run(dit) == "reference"
        assert run(dit) == "cpu_flash"  # the enclosing request is back
    assert run(dit) == "reference" and dit.decision["decided_by"] == "engine_default"


def test_refused_request_changes_nothing():
    dep = deploy(attention_backend="reference")
    dit = dep.layer("transformer", "self")
    run(dit)
    before = (dit.backend, dit.planned_shapes)
    with dep.request(attention_backend_override="cpu_flash"):
        for override, code in [("reference", "AK3010"), ("cpu_flsh", "AK2002"), ("fa3", "AK3001")]:
            with pytest.raises(attnkit.AttnkitError) as e:
                with dep.request(attention_backend_override=override):
                    pytest.fail("a refused request ran its block")
            assert e.value.code == code
            assert dit.backend == "cpu_flash"  # the request in force stays in force
    assert (dit.backend, dit.planned_shapes) == before
    expect_refused("AK3013", lambda: dep.request(skip_softmax_params={"threshold_scale_factor": 2.0}).__enter__())
    expect_refused("AK3103", lambda: dep.request(attention_backend_override="fa",
                                                 skip_softmax_params="threshold_scale_factor=0").__enter__())


@pytest.mark.parametrize("flags", [
    {"attention_backend": "fa3"},
    {"attention_backend": "sage_atn"},
    {"component_attention_backends": "text_encodr=sdpa"},
    {"ring_degree": 0},
    {"attention_backend_override": "reference"},
    {"skip_softmax_params": {"start_step": 2}},
])
def test_creation_fails_with_the_diagnostics_of_check(flags):
    checked = attnkit.check(attnkit.deployment.engine_args("wan", "cpu", flags))
    assert not checked["ok"]
    with pytest.raises(attnkit.AttnkitError) as e:
        attnkit.Deployment(model="wan", platform="cpu", **flags)
    assert [(d["code"], d["message"]) for d in e.value.diagnostics] == \
        [(d["code"], d["message"]) for d in checked["diagnostics"]]


def test_creation_refuses_another_machine():
    expect_refused("AK3017", attnkit.Deployment, model="wan", platform="rocm")


def test_audit_reports_requests_that_controlled_no_built_layer():
    dep = deploy(component_attention_backends="text_encoder=reference,transformer.cross=reference")
    assert dep.selection["ok"] and not dep.selection["diagnostics"]
    dep.layer("transformer", "self")
    assert [d["code"] for d in dep.audit()] == ["AK3008", "AK3009"]
    dep.layer("text_encoder", "self")
    dep.layer("transformer", "cross")
    assert dep.audit() == []


def test_check_validates_a_request_offline():
    r = attnkit.check(["--model", "wan", "--platform", "cuda:sm90", "--attention-backend-override", "sage_attn"])
    assert r["ok"]
    assert {(s["component"], s["role"]): s["decided_by"] for s in r["selections"]}[("transformer", "self")] == \
        "per_request"
    r = attnkit.check(["--model", "wan", "--platform", "cuda:sm90", "--attention-backend-override", "sage_attn",
                       "--skip-softmax-params", "threshold_scale_factor=2"])
    assert not r["ok"] and "AK3013" in [d["code"] for d in r["diagnostics"]]


def test_llm_prefill_and_decode_layers():
    dep = attnkit.Deployment(model="llama", platform="cpu", dtype="fp32")
    prefill, decode = dep.layer("decoder", "prefill", 3), dep.layer("decoder", "decode", 3)
    assert prefill.causal and decode.causal  # the profile's mask is the default
    lens = [5, 9]
    cu = np.array([0, 5, 14], dtype=np.int32)
    q, k, v = randn(14, 8, 64), randn(14, 2, 64), randn(14, 2, 64)
    out = prefill.varlen(q, k, v, cu, cu, 9, 9)
    for b, n in enumerate(lens):
        s = slice(cu[b], cu[b + 1])
        ref, _ = attention_ref(q[None, s], k[None, s], v[None, s], causal=True)
        assert rel_l2(out[s], ref[0]) < 1e-5
    page = 16
    k_cache, v_cache = randn(4, page, 2, 64), randn(4, page, 2, 64)
    table = np.array([[2, 0], [1, 3]], dtype=np.int32)
    seqlens = np.array([20, 7], dtype=np.int32)
    qd = randn(2, 1, 8, 64)
    out = decode.with_kvcache(qd, k_cache, v_cache, seqlens, table)
    for b in range(2):
        kb = k_cache[table[b]].reshape(-1, 2, 64)[: seqlens[b]]
        vb = v_cache[table[b]].reshape(-1, 2, 64)[: seqlens[b]]
        ref, _ = attention_ref(qd[b : b + 1], kb[None], vb[None], causal=True)
        assert rel_l2(out[b], ref[0]) < 1e-5
    assert attnkit.last_backend() == "cpu_flash"
