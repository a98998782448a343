"""The examples (SDPA -> attnkit in a DiT block and a paged decode loop) run and agree."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


@pytest.mark.parametrize("script,args", [("dit_block.py", []), ("dit_block.py", ["--dtype", "bf16"]),
                                         ("llm_decode.py", ["--steps", "20"])])
def test_example_matches_sdpa(script, args):
    run = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "relative L2 difference vs SDPA" in run.stdout
