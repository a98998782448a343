"""bench/gpu/bench_torch_sdpa.py on the CPU with tiny shapes: attnkit and the
SDPA peers timed in one process, each output checked against the first
implementation's, and a wrong output turned into exit status 1."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu")
TINY = ["--device", "cpu", "--tokens", "128", "--width", "128", "--dims", "64", "--seqlens", "32,64",
        "--iters", "3", "--warmup", "1"]


def run_bench(tmp_path, *extra, prelude=""):
    out = tmp_path / "bench.json"
    argv = ["bench_torch_sdpa.py", "--json", str(out), *TINY, *extra]
    code = (f"import sys; sys.path.insert(0, {BENCH!r}); import bench_torch_sdpa as b\n{prelude}\n"
            f"sys.argv = {argv!r}\nb.main()\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    return run, out


def test_attnkit_and_peers_in_one_process(tmp_path):
    run, out = run_bench(tmp_path, "--backends", "math", "--attnkit", "--attnkit-backend", "auto")
    assert run.returncode == 0, run.stdout + run.stderr
    rows = json.loads(out.read_text())["results"]
    impls = {r["impl"] for r in rows}
    assert impls == {"torch_math", "attnkit_auto_py"}
    assert len(rows) == 2 * 2 * 2  # 2 impls x causal/full x 2 seqlens
    for r in rows:
        assert r["ms_median"] > 0 and r["tflops"] > 0
        if r["impl"] == "attnkit_auto_py":  # checked against the first implementation, SDPA math
            assert r["rel_l2_vs"] == "torch_math" and r["rel_l2"] < 2e-2


def test_a_wrong_output_fails_the_run(tmp_path):
    prelude = ("import torch\norig = b.implementations\n"
               "def with_wrong(args, causal):\n"
               "    impls = orig(args, causal)\n"
               "    impls['wrong'] = lambda q, k, v: torch.zeros_like(q)\n"
               "    return impls\n"
               "b.implementations = with_wrong")
    run, _ = run_bench(tmp_path, "--backends", "math", prelude=prelude)
    assert run.returncode == 1
    assert "MISMATCH wrong vs torch_math" in run.stderr
