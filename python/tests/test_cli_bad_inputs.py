"""The bad-input matrix through the `attnkit` CLI (set ATTNKIT_CLI to the binary;
scripts/python_tests.sh does): every flag of run, check, backends and explain
with values that are empty, negative, not numbers, past int32, past the limits,
files that are directories, endless, deeply nested or malformed; unknown flags
and subcommands. Every run must end (no timeout, no signal) with exit 0 and a
PASSED run, or a non-zero exit that prints a catalogued code with a fix. And
`attnkit check` and attnkit.check() give the same codes for the same flags."""
import json
import os
import re
import subprocess

import pytest

import attnkit

CLI = os.environ.get("ATTNKIT_CLI", "")
pytestmark = pytest.mark.skipif(not CLI, reason="ATTNKIT_CLI is not set (scripts/python_tests.sh sets it)")


def files(tmp_dir):
    """Hostile config and profile files."""
    made = {}
    for name, text in {
        "deep.json": '{"topk": ' + "[" * 100000 + "]" * 100000 + "}",
        "deep.yaml": "topk: " + "[" * 100000,
        "key.yaml": "? [a, b]\n: 1\n",
        "huge_number.json": '{"topk": 1e400}',
        "big_int.json": '{"topk": 18446744073709551616}',
        "bad_role.yaml": "name: x\ncomponents:\n  - name: t\n    roles:\n      - name: self\n        heads: 0\n",
        "bad_ratio.yaml": "name: x\ncomponents:\n  - name: t\n    roles:\n      - name: self\n        heads: 6\n"
                          "        kv_heads: 4\n",
        "not_yaml.yaml": "\x00\x01\x02: [",
        "empty.yaml": "",
        "list.yaml": "- 1\n- 2\n",
        # Ran before, silently: a repeated key kept one value, a profile of no layer was INVALID without a
        # diagnostic, a second document was dropped.
        "repeated.json": '{"topk": 7, "topk": 0.5}',
        "repeated.yaml": "topk: 7\ntopk: 0.5\n",
        "repeated_profile.yaml": "name: x\nname: y\ncomponents:\n  - name: t\n    roles:\n      - {name: self}\n",
        "no_layers.yaml": "name: x\ncomponents:\n  - name: t\n    roles:\n      - {name: self, layers: 0}\n",
        "two_documents.yaml": "name: x\ncomponents:\n  - name: t\n    roles:\n      - {name: self}\n---\nname: y\n",
    }.items():
        path = os.path.join(tmp_dir, name)
        with open(path, "w") as f:
            f.write(text)
        made[name] = path
    return made


TMP = "/tmp/attnkit_cli_matrix"
os.makedirs(TMP, exist_ok=True)
FILES = files(TMP)

SMALL = ["--seqlen", "32", "--heads", "4", "--head-dim", "32", "--repeat", "1", "--dtype", "fp32"]
BAD_INTS = ["", "abc", "-1", "0", "1e3", "1.5", "0x10", "2147483648", "99999999999999999999", "-2147483649", " 7"]


def run_cases():
    cases = [["run"] + SMALL]
    for flag in ("--batch", "--heads", "--kv-heads", "--seqlen", "--kv-seqlen", "--head-dim", "--v-head-dim",
                 "--repeat", "--check-heads", "--seed"):
        for value in BAD_INTS:
            cases.append(["run"] + SMALL + [flag, value])
        cases.append(["run"] + SMALL + [flag])  # the value is missing
    for value in ("", ",", "5,", ",5", "5,,3", "a,b", "1,2,3", "2147483647,0", "-2,0", "0,-5", "2147483648,0", "-1,-1",
                  "2147483647,2147483647", "3, 1"):
        cases.append(["run"] + SMALL + ["--window", value])
    for value in ("", "5,", "-1", "0", "0,0", "5,0,33", "2147483647", "1073741825", "a", "5;3"):
        cases.append(["run"] + SMALL[:2] + ["--head-dim", "32", "--repeat", "1", "--varlen", value])
    cases.append(["run", "--varlen", "5,3", "--batch", "3", "--repeat", "1"])
    cases.append(["run", "--varlen", "5,3", "--seqlen", "9", "--repeat", "1"])
    for value in ("nan", "inf", "-1", "1e-30", "1e30", "x", "30"):
        cases.append(["run"] + SMALL + ["--softcap", value])
    for value in ("fp64", "int8", "fp8_e4m3", "bfloat15", ""):
        cases.append(["run", "--seqlen", "32", "--heads", "4", "--repeat", "1", "--dtype", value])
    for value in ("", "nope", "fa3", "cuda_sdpa", "reference", "REFERENCE", "sparge_attn"):
        cases.append(["run"] + SMALL + ["--backend", value])
    for value in ("sliding_tile_attn", "sparge_attn", "sol_attn", "video_sparse_attn_h3", "hybrid_window_attn_h3"):
        cases.append(["run", "--seqlen", "64", "--heads", "4", "--kv-heads", "4", "--repeat", "1", "--backend", value])
    for value in ("xml", ""):
        cases.append(["run"] + SMALL + ["--format", value])
    cases.append(["run"] + SMALL + ["--heads", "2"])  # --kv-heads follows --heads
    cases.append(["run", "--seqlen", "1073741825"])
    cases.append(["run", "--batch", "100000", "--seqlen", "100000", "--heads", "64"])
    cases.append(["run", "--batch", "2147483647", "--seqlen", "1", "--heads", "1", "--head-dim", "8"])  # took minutes
    cases.append(["run", "--head-dim", "4096"])
    cases.append(["run", "--bogus"])
    return cases


def check_cases():
    base = ["check", "--model", "wan", "--platform", "cuda:sm90"]
    cases = [base, ["check"], ["check", "--model"], ["check", "--model", "wan2"], ["check", "--model", "/tmp"],
             ["check", "--model", "/dev/zero"], ["check", "--model", "/nonexistent.yaml"]]
    for name in ("deep.yaml", "key.yaml", "bad_role.yaml", "bad_ratio.yaml", "not_yaml.yaml", "empty.yaml", "list.yaml",
                 "repeated_profile.yaml", "no_layers.yaml", "two_documents.yaml"):
        cases.append(["check", "--model", FILES[name], "--platform", "cpu"])
    for value in ("", "cuda:sm", "cuda:sm4294967386", "cuda:sm0090", "cuda:sm-90", "cuda:sm9x", "gpu", "CUDA:SM90",
                  "cuda:sm49", "cuda:sm131"):
        cases.append(["check", "--model", "wan", "--platform", value])
    for flag in ("--ring-degree", "--ulysses-degree", "--sp-degree"):
        for value in BAD_INTS + ["65536"]:
            cases.append(base + [flag, value])
    cases.append(base + ["--ring-degree", "65536", "--ulysses-degree", "65537", "--sp-degree", "65536"])
    # SGLang's KV cache page size and tensor / data parallel sizes, on an LLM.
    llm = ["check", "--model", "llama", "--platform", "cuda:sm90"]
    for flag in ("--page-size", "--tp-size", "--dp-size"):
        for value in BAD_INTS + ["65537", "3"]:
            cases.append(llm + [flag, value])
        cases.append(llm + [flag])  # the value is missing
    cases.append(llm + ["--tp-size", "2147483647", "--dp-size", "2147483647", "--enable-dp-attention"])
    cases.append(llm + ["--enable-dp-attention", "--tp-size", "8", "--dp-size", "3"])
    cases.append(llm + ["--model-path", "", "--port", "-1", "--api-key", "x" * 5000])  # ignored: values unread
    for config in ("/dev/zero", "/tmp", "/nonexistent.json", FILES["deep.json"], FILES["deep.yaml"], FILES["key.yaml"],
                   FILES["huge_number.json"], FILES["big_int.json"], '{"topk": 1e400}', '{"topk": ' + "[" * 5000,
                   "topk=", "=1", "topk=1,topk=2", "dense_layers=0-2147483647", "{", "[1]", FILES["repeated.json"],
                   FILES["repeated.yaml"], '{"topk": 7, "topk": 0.5}'):
        cases.append(base + ["--attention-backend", "sparge_attn", "--attention-backend-config", config])
    cases.append(base + ["--attention-backend", "sol_attn", "--attention-backend-config", "dense_layers=0-99999999999"])
    for config in ('{"mask_strategy_file_path": "/dev/zero"}', '{"mask_strategy_file_path": "/tmp"}',
                   '{"mask_strategy_file_path": "/dev/zero", "tile_size": "4294967298,4,4"}',
                   '{"mask_strategy_file_path": "/dev/zero", "skip_time_steps": 4294967298}',
                   '{"mask_strategy_file_path": "/dev/zero", "tile_size": [2048, 2048, 2048]}'):
        cases.append(base + ["--attention-backend", "sliding_tile_attn", "--attention-backend-config", config])
    # The gated MiniMax-H3 backends: their keys out of range, of the wrong type, unknown; on the CPU (real
    # backends) and a named CUDA platform (validated, not run).
    for model, backend, configs in (
            ("fast-h3", "video_sparse_attn_h3", ("sparsity=1", "sparsity=-0.1", "sparsity=x", "sparsity=1e400",
                                                 "window_size=4,4", "sparsity=0.5")),
            ("vdn-h3", "hybrid_window_attn_h3", ("window_size=4", "window_size=-1,2", "window_size=4,4,4",
                                                 "window_size=2147483648,0", "window_size=a,b", "sparsity=0.5",
                                                 "window_size=64,0"))):
        for platform in ("cpu", "cuda:sm90"):
            for config in configs:
                cases.append(["check", "--model", model, "--platform", platform, "--attention-backend", backend,
                              "--attention-backend-config", config])
    for value in ("", "nope", "fa-3", "FA3", "torch_sdpa"):
        cases.append(base + ["--attention-backend", value])
    for value in ("", "=", "text_encoder=", "=sdpa", "a.b.c=sdpa", "text_encoder=sdpa,text_encoder=fa",
                  '{"text_encoder": 1e400}', '{"text_encoder": ' + "[" * 50000 + "]" * 50000 + "}", '{"text_encoder": 5}',
                  '{"text_encoder": "sdpa"', "[1]"):
        cases.append(base + ["--component-attention-backends", value])
    for value in ("", "float64", "int32", "nope"):
        cases.append(base + ["--dtype", value])
    for value in ("", "nope", "sparge_attn", "none", "hybrid_window_attn_h3"):
        cases.append(base + ["--attention-backend-override", value])
    for value in ("/dev/zero", "/tmp", '{"threshold_scale_factor": -1}', "x", '{"threshold_scale_factor": 1e400}',
                  "threshold_scale_factor=2,start_step=-1"):
        cases.append(base + ["--attention-backend-override", "fa", "--skip-softmax-params", value])
    cases.append(base + ["--ring", "2"])
    cases.append(base + ["--format", "json", "--ring", "2"])
    return cases


def other_cases():
    return [[], ["foo"], ["--bogus"], ["explain"], ["explain", "AK1O02"], ["explain", "hello"], ["explain", "ak1002"],
            ["explain", "AK" + "9" * 5000], ["explain", "internal error: " + "x" * 100000], ["explain", "--list", "AK9"], ["backends", "--platform", "cuda:sm99999"],
            ["backends", "--platform", ""], ["backends", "--format", "yaml"], ["backends", "--bogus"]]


CASES = run_cases() + check_cases() + other_cases()
# A printed diagnostic: "AK1001 error: ..." (text) or "code": "AK1001" (JSON); not a code quoted in a message.
CODE = re.compile(r'(?m)^(AK[0-9]{4}) (?:error|warning|note):|"code": "(AK[0-9]{4})"')


def shown(args):
    text = " ".join(a if len(a) < 40 else a[:37] + "..." for a in args)
    return text or "(no arguments)"


def cli_outcome(cli, args, timeout=120):
    """("refused", codes) | ("ran", "") | ("crash", signal) | ("hang", "") | ("uncatalogued", output)."""
    try:
        p = subprocess.run([cli] + args, capture_output=True, text=True, timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        return "hang", ""
    output = p.stdout + p.stderr
    if p.returncode < 0:
        return "crash", f"signal {-p.returncode}: {output[-500:]}"
    if p.returncode == 0:
        if args and args[0] == "run" and "PASSED" not in output:
            return "uncatalogued", output[-500:]
        return "ran", ""
    codes = [a or b for a, b in CODE.findall(output)]
    if not codes or not ("fix:" in output or "- " in output or '"solutions"' in output):
        return "uncatalogued", output[-500:]
    for code in set(codes):
        if code in ("AK0000", "AK0003"):
            return "uncatalogued", output[-500:]
        try:
            attnkit.explain(code)
        except attnkit.AttnkitError:
            return "uncatalogued", f"{code} has no catalog page"
    return "refused", " ".join(sorted(set(codes)))


@pytest.mark.parametrize("args", CASES, ids=[shown(a) for a in CASES])
def test_cli_bad_input(args):
    kind, detail = cli_outcome(CLI, args)
    assert kind in ("refused", "ran"), f"{kind}: {detail}"


CHECK_FLAG_SETS = [
    ["--model", "wan", "--ring", "2"],
    ["--model", "wan", "--ring-degree", "x"],
    ["--model", "wan", "--ring-degree"],
    ["--model", "wan", "--platform", "cuda:sm4294967386"],
    ["--model", "wan", "--platform", "cuda:sm80", "--attention-backend", "fa3"],
    ["--model", "wan", "--ring-degree", "0"],
    ["--model", "/tmp", "--platform", "cpu"],
    ["--model", "wan", "--platform", "cpu", "--attention-backend-config", "/dev/zero"],
    ["--model", "wan", "--platform", "cpu", "--attention-backend-config", '{"topk": 1e400}'],
    ["--platform", "cpu"],
    ["--model", "llama", "--platform", "cuda:sm90", "--tp", "6", "--page-size", "0"],
    ["--model", "llama", "--platform", "cuda:sm90", "--port", "30000", "--tp", "8", "--page-size", "1"],
    ["--model", "llama", "--speculative-algorithm", "EAGLE"],
]


def python_codes(flags):
    try:
        result = attnkit.check(flags)
    except attnkit.AttnkitError as e:
        return [d["code"] for d in e.diagnostics]
    return [d["code"] for d in result["diagnostics"]]


@pytest.mark.parametrize("flags", CHECK_FLAG_SETS, ids=[shown(f) for f in CHECK_FLAG_SETS])
def test_cli_and_python_check_give_the_same_codes(flags):
    p = subprocess.run([CLI, "check", "--format", "json"] + flags, capture_output=True, text=True, timeout=60)
    cli = [d["code"] for d in json.loads(p.stdout)["diagnostics"]]
    assert cli == python_codes(flags)


def test_the_cli_matrix_is_large():
    assert len(CASES) > 200


@pytest.mark.parametrize("backend", ["sliding_tile_attn", "sparge_attn", "sol_attn", "video_sparse_attn_h3",
                                     "hybrid_window_attn_h3"])
def test_run_refuses_backends_that_are_not_exact_attention(backend):
    # `run` holds a random dense call to the exact reference: a sparse backend's difference is its design
    # (hybrid_window_attn_h3 ran and printed FAILED, rel L2 0.6, with no code, before AK2124).
    kind, codes = cli_outcome(CLI, ["run", "--seqlen", "64", "--heads", "4", "--kv-heads", "4", "--repeat", "1",
                                    "--backend", backend])
    assert (kind, codes) == ("refused", "AK2124")


@pytest.mark.parametrize("args, code", [
    (["--model", FILES["repeated_profile.yaml"]], "AK4021"),
    (["--model", FILES["no_layers.yaml"]], "AK4021"),
    (["--model", FILES["two_documents.yaml"]], "AK4021"),
    (["--model", "wan", "--attention-backend", "sparge_attn", "--attention-backend-config", FILES["repeated.json"]],
     "AK3106"),
    (["--model", "wan", "--attention-backend", "sparge_attn", "--attention-backend-config", FILES["repeated.yaml"]],
     "AK3106"),
    (["--model", "wan", "--component-attention-backends", '{"text_encoder": "sdpa", "text_encoder": "fa3"}'],
     "AK3007"),
], ids=["repeated profile key", "no layers", "two documents", "repeated json key", "repeated yaml key",
        "repeated component"])
def test_inputs_that_ran_with_one_value_dropped_are_refused(args, code):
    # Before: check called them valid (one of two values kept silently) or INVALID with no diagnostic.
    kind, codes = cli_outcome(CLI, ["check", "--platform", "cpu"] + args)
    assert (kind, codes) == ("refused", code)


@pytest.mark.parametrize("args, code", [
    (["run"] + SMALL + [flag, ""], "AK0002") for flag in ("--batch", "--seed", "--softcap", "--replicated-tokens",
                                                          "--ring-degree", "--kv-heads")
] + [
    (["check", "--model", "llama", "--platform", "cuda:sm90", flag, ""], "AK3107")
    for flag in ("--page-size", "--ring-degree", "--tp-size")
])
def test_empty_numbers_are_usage_errors_not_zero(args, code):
    # CLI11 read "" as 0: --seed '' and --softcap '' ran (seed 0, no softcap), --batch '' was "got 0".
    kind, codes = cli_outcome(CLI, args)
    assert (kind, codes) == ("refused", code)
    if args[0] == "check":  # attnkit.check() parses the same flags
        assert python_codes(args[1:]) == ["AK3107"]


@pytest.mark.parametrize("prefix, first", [("AK1", "AK1001"), ("AK9", None), ("\udcff", None)])
def test_explain_list_honours_format_json(prefix, first):
    # --format json was ignored by --list: a JSON reader got lines of text.
    p = subprocess.run([CLI, "explain", "--list", "--format", "json", os.fsencode(prefix)], capture_output=True,
                       timeout=60)
    assert p.returncode == 0
    codes = [e["code"] for e in json.loads(p.stdout)]
    assert codes[:1] == ([first] if first else []) and all(c.startswith(prefix) for c in codes)
