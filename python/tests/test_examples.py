"""The examples (a small video DiT and a prefill + paged-decode LLM, each on a
Deployment) run and agree with SDPA."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def run(script, *args):
    ran = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "relative L2 difference vs SDPA" in ran.stdout
    return ran.stdout


@pytest.mark.parametrize("args", [[], ["--dtype", "bf16"]])
def test_dit_example_switches_backend_part_way_and_matches_sdpa(args):
    out = run("dit_block.py", "--steps", "4", "--switch-at", "2", *args)
    per_step = re.search(r"transformer backend per step: (.*);", out).group(1).split()
    assert len(per_step) == 4 and per_step[0] == per_step[1] != per_step[2] == per_step[3], out
    assert "text_encoder.self[0]" in out and "component_override" in out, out


def test_llm_example_prefills_and_decodes_through_a_deployment():
    out = run("llm_decode.py", "--steps", "20")
    assert "decoder.prefill[0]" in out and "decoder.decode[1]" in out, out
