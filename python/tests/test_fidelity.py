"""Selection fidelity (issue 14): the cases of tests/select/fidelity_cases.json
through Python attnkit.check and through `attnkit check --format json` (the
CLI found at $ATTNKIT_CLI, set by scripts/python_tests.sh); the same table runs
through the C++ engine in tests/select/test_select_fidelity.cpp. Explain cases
go through attnkit.explain and `attnkit explain --format json`."""
import json
import os
import pathlib
import subprocess

import pytest

import attnkit

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASES = json.loads((ROOT / "tests" / "select" / "fidelity_cases.json").read_text())
CLI = os.environ.get("ATTNKIT_CLI", "")


@pytest.fixture(scope="module")
def mask_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sta") / "mask_strategy.json"
    path.write_text('{"0_0_0": [3, 3, 3]}')
    return str(path)


def _args(case, mask_file):
    subst = {"{profiles}": str(ROOT / "tests" / "select" / "profiles"), "{mask_file}": mask_file}
    out = []
    for arg in case["args"]:
        for key, value in subst.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return out


def _selection(result, layer):
    for s in result["selections"]:
        if f'{s["component"]}.{s["role"]}' == layer:
            return s
    raise AssertionError(f"no selection for {layer}: {result['selections']}")


def _assert_case(case, result):
    summary = "\n".join(f'{d["code"]} {d["message"]}' for d in result["diagnostics"])
    assert result["ok"] == case["ok"], summary
    for layer, backend in case.get("select", {}).items():
        assert _selection(result, layer)["backend"] == backend, (layer, summary)
    for layer, level in case.get("decided_by", {}).items():
        assert _selection(result, layer)["decided_by"] == level, (layer, summary)
    for layer, part in case.get("requested_by", {}).items():
        assert part in (_selection(result, layer)["requested_by"] or ""), layer
    for layer, code in case.get("fallback", {}).items():
        assert (_selection(result, layer)["fallback_reason"] or "").startswith(code), layer
    for layer, want in case.get("rejected", {}).items():
        reasons = [x["reason"] for x in _selection(result, layer)["rejected"] if x["backend"] == want["backend"]]
        assert reasons, f'{layer} did not reject {want["backend"]}'
        for part in want["reason_contains"]:
            assert any(part in r for r in reasons), (part, reasons)
    codes = [d["code"] for d in result["diagnostics"]]
    for code in case.get("codes", []):
        assert code in codes, (code, summary)
    for code in case.get("no_codes", []):
        assert code not in codes, (code, summary)
    for code, parts in case.get("message_contains", {}).items():
        messages = [d["message"] for d in result["diagnostics"] if d["code"] == code]
        assert messages, (code, summary)
        for part in parts:
            assert any(part in m for m in messages), (part, messages)
    for text in case.get("no_text", []):
        assert text not in json.dumps(result), text


@pytest.mark.parametrize("case", CASES["check"], ids=[c["name"] for c in CASES["check"]])
def test_check_python(case, mask_file, monkeypatch):
    for key, value in case.get("env", {}).items():
        monkeypatch.setenv(key, value)
    _assert_case(case, attnkit.check(_args(case, mask_file)))


@pytest.mark.skipif(not CLI, reason="ATTNKIT_CLI is not set (scripts/python_tests.sh sets it to the built CLI)")
@pytest.mark.parametrize("case", CASES["check"], ids=[c["name"] for c in CASES["check"]])
def test_check_cli_json(case, mask_file):
    env = dict(os.environ, **case.get("env", {}))
    run = subprocess.run([CLI, "check", *_args(case, mask_file), "--format", "json"], capture_output=True, text=True,
                         env=env, check=False)
    result = json.loads(run.stdout)
    assert run.returncode == (0 if result["ok"] else 1)
    _assert_case(case, result)


def _assert_explain(case, matches):
    assert matches, case["text"]
    assert matches[0]["code"] == case["first"], [(m["code"], m["score"]) for m in matches]
    for code in case.get("includes", []):
        assert code in [m["code"] for m in matches]


@pytest.mark.parametrize("case", CASES["explain"], ids=[c["name"] for c in CASES["explain"]])
def test_explain_python(case):
    found = attnkit.explain(case["text"])
    _assert_explain(case, [found] if isinstance(found, dict) else found)


@pytest.mark.skipif(not CLI, reason="ATTNKIT_CLI is not set (scripts/python_tests.sh sets it to the built CLI)")
@pytest.mark.parametrize("case", CASES["explain"], ids=[c["name"] for c in CASES["explain"]])
def test_explain_cli_json(case):
    run = subprocess.run([CLI, "explain", case["text"], "--format", "json"], capture_output=True, text=True, check=True)
    _assert_explain(case, json.loads(run.stdout)["matches"])


def test_explain_text_returns_ranked_pages_and_a_code_its_page():
    page = attnkit.explain("AK4001")
    assert page["code"] == "AK4001" and page["engine_messages"]
    matches = attnkit.explain("ring parallelism requires the FlashAttention backend")
    assert matches[0]["code"] == "AK4001" and 0 < matches[0]["score"] <= 1
    with pytest.raises(attnkit.AttnkitError) as none:
        attnkit.explain("the weather in paris is lovely")
    assert none.value.code == "AK0004"
    with pytest.raises(attnkit.AttnkitError) as unknown:
        attnkit.explain("AK" + "9" * 4)  # a code the catalog does not have
    assert unknown.value.code == "AK0001"


@pytest.mark.parametrize("sm", [70, 75])
def test_old_gpus_take_the_generic_kernel(sm):
    """Volta / Turing: auto takes cuda_sdpa where this build compiles it (sm_70
    with CUDA 12, sm_75 with CUDA 13); below the build's floor its refusal names the floor."""
    result = attnkit.check(["--model", "wan", "--platform", f"cuda:sm{sm}", "--dtype", "fp16"])
    layer = _selection(result, "transformer.self")
    if result["ok"]:
        assert {s["backend"] for s in result["selections"]} == {"cuda_sdpa"}
    else:
        assert layer["rejected"][0]["backend"] == "cuda_sdpa" and layer["rejected"][0]["code"] == "AK2102"
        assert sm == 70 and "sm_75" in layer["rejected"][0]["reason"]
    bf16 = attnkit.check(["--model", "wan", "--platform", f"cuda:sm{sm}", "--dtype", "bf16"])
    assert not bf16["ok"] and _selection(bf16, "transformer.self")["rejected"][0]["backend"] == "cuda_sdpa"


def test_call_backend_names_as_written():
    """attention(backend=...) takes the spellings `check` takes (case, '-' for '_', auto)."""
    np = pytest.importorskip("numpy")
    q = np.random.default_rng(0).standard_normal((1, 16, 2, 64)).astype(np.float32)
    attnkit.attention(q, q, q, backend="AUTO")
    out = attnkit.attention(q, q, q, backend="CPU-Flash")
    assert attnkit.last_backend() == "cpu_flash" and out.shape == q.shape
