"""bench/gpu/ab_report.py: the A/B table of two fa2 builds (gpu_check.sh
GPU_CHECK_AB) from bench_fa2 JSON files, on made-up numbers."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import ab_report  # noqa: E402


def write_run(path, points):
    rows = [{"impl": "attnkit_fa2", "head_dim": d, "seqlen": s, "batch": 1, "heads": 1, "causal": c, "ms_median": 1.0,
             "ms_min": 1.0, "tflops": t} for (d, c, s), t in points.items()]
    path.write_text(json.dumps({"device": "test", "results": rows}))
    return str(path)


def test_medians_over_rounds_and_ratio(tmp_path):
    new = [write_run(tmp_path / f"new{i}.json", {(128, False, 512): t, (256, True, 2048): 2 * t})
           for i, t in enumerate([300.0, 310.0, 330.0])]
    base = [write_run(tmp_path / f"base{i}.json", {(128, False, 512): t, (256, True, 2048): 2 * t})
            for i, t in enumerate([290.0, 300.0])]
    out = tmp_path / "ab.json"
    assert ab_report.main(["--new", *new, "--base", *base, "--out-json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["rounds"] == {"new": 3, "base": 2}
    by_point = {(r["head_dim"], r["causal"], r["seqlen"]): r for r in report["rows"]}
    assert by_point[(128, False, 512)]["new_tflops"] == 310.0  # median of 300, 310, 330
    assert by_point[(128, False, 512)]["base_tflops"] == 295.0  # median of 290, 300
    assert by_point[(128, False, 512)]["new_over_base"] == round(310 / 295, 3)
    assert by_point[(256, True, 2048)]["new_over_base"] == round(620 / 590, 3)
    assert report["only_one_side"] == []


def test_points_on_one_side_are_listed_and_no_overlap_fails(tmp_path, capsys):
    new = write_run(tmp_path / "new.json", {(64, False, 512): 100.0, (64, True, 512): 50.0})
    base = write_run(tmp_path / "base.json", {(64, False, 512): 100.0})
    out = tmp_path / "ab.json"
    assert ab_report.main(["--new", new, "--base", base, "--out-json", str(out)]) == 0
    assert json.loads(out.read_text())["only_one_side"] == [[64, True, 512]]
    other = write_run(tmp_path / "other.json", {(256, False, 4096): 1.0})
    assert ab_report.main(["--new", new, "--base", other, "--out-json", str(out)]) == 1
    assert "no grid point" in capsys.readouterr().err
