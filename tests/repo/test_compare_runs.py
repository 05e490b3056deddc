"""scripts/compare_runs.py: two run directories match up to wall-clock fields and their own path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("compare_runs", ROOT / "scripts" / "compare_runs.py")
compare_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_runs)


def make_run(run_dir: Path, step_s: float, loss: float = 0.5) -> Path:
    (run_dir / "stage1" / "checkpoints" / "step_1").mkdir(parents=True)
    rows = [{"step": 1, "loss/total": loss, "time/step_s": step_s}]
    (run_dir / "stage1" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "stage1" / "config.yaml").write_text(f"run_dir: {run_dir}/stage1\nseed: 0\n")
    (run_dir / "stage1" / "checkpoints" / "step_1" / "model.safetensors").write_bytes(b"\x00weights")
    (run_dir / "eval").mkdir()
    (run_dir / "eval" / "costs.csv").write_text(f"method,reports,duration_s\nA,2.0,{step_s}\n")
    (run_dir / "pipeline.json").write_text(json.dumps({"total": step_s}))
    return run_dir


def test_runs_that_differ_only_in_timings_and_location_are_identical(tmp_path, capsys):
    a, b = make_run(tmp_path / "a", 1.5), make_run(tmp_path / "elsewhere" / "b", 9.0)
    assert compare_runs.differences(a, b) == []
    assert compare_runs.main([str(a), str(b)]) == 0 and capsys.readouterr().out == "identical\n"


@pytest.mark.parametrize(
    ("change", "file"),
    [
        (lambda run: make_run(run, 1.5, loss=0.25), "stage1/metrics.jsonl"),
        (
            lambda run: (make_run(run, 1.5), (run / "eval" / "costs.csv").write_text("method,reports\nA,3.0\n")),
            "eval/costs.csv",
        ),
        (
            lambda run: (make_run(run, 1.5), (run / "stage1/checkpoints/step_1/model.safetensors").write_bytes(b"x")),
            "stage1/checkpoints/step_1/model.safetensors",
        ),
        (
            lambda run: (make_run(run, 1.5), (run / "stage1" / "config.yaml").write_text("seed: 1\n")),
            "stage1/config.yaml",
        ),
    ],
)
def test_a_changed_result_is_named(tmp_path, capsys, change, file):
    a = make_run(tmp_path / "a", 1.5)
    change(tmp_path / "b")
    assert compare_runs.differences(a, tmp_path / "b") == [f"differs: {file}"]
    assert compare_runs.main([str(a), str(tmp_path / "b")]) == 1 and file in capsys.readouterr().out


def test_a_file_on_one_side_only_is_named(tmp_path):
    a, b = make_run(tmp_path / "a", 1.5), make_run(tmp_path / "b", 1.5)
    (b / "eval" / "records.jsonl").write_text("{}\n")
    assert compare_runs.differences(a, b) == [f"missing in {a}: eval/records.jsonl"]


def test_bad_arguments_are_one_usage_line(tmp_path, capsys):
    assert compare_runs.main([str(tmp_path / "absent"), str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_torch_file_is_compared_by_what_it_holds_not_by_its_archive_name(tmp_path):
    import io

    import torch

    state = {"step": 2, "moments": [torch.arange(4.0), torch.zeros(2, dtype=torch.int64)]}
    a, b = make_run(tmp_path / "a", 1.5), make_run(tmp_path / "b", 1.5)
    saved = "stage1/checkpoints/step_1/trainer_state.pt"
    torch.save(state, a / saved)  # a file's archive is named after the file
    buffer = io.BytesIO()
    torch.save(state, buffer)  # a buffer's is "archive", as the atomic writer's are
    (b / saved).write_bytes(buffer.getvalue())
    assert (a / saved).read_bytes() != (b / saved).read_bytes()
    assert compare_runs.differences(a, b) == []
    torch.save({**state, "step": 3}, b / saved)
    assert compare_runs.differences(a, b) == [f"differs: {saved}"]
