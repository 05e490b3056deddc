"""Facts the docs state (paths, feature counts, scripts, timings) hold for the code as it is."""

import re
import subprocess
from pathlib import Path

import pytest

from maopd.envs.option.wrapper import GLOBAL_FEATURES, OBSERVATION_SIZE

ROOT = Path(__file__).resolve().parents[2]


def docs() -> dict[Path, str]:
    paths = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    return {p: p.read_text(encoding="utf-8") for p in paths}


def test_evaluation_doc_shows_checkpoint_runs():
    text = (ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8")
    assert "rule-based teams only" not in text
    for flag in (
        "--policy checkpoint",
        "--model",
        "--device",
        "--dtype",
        "--max-new-tokens",
        "--backend vllm",
        "--backend openai",
        "kind=http",
        "HF_HUB_OFFLINE",
    ):
        assert flag in text, flag


def test_marl_doc_gives_the_observation_sizes():
    text = (ROOT / "docs" / "marl.md").read_text(encoding="utf-8")
    assert f"float32[{OBSERVATION_SIZE}]" in text
    assert f"{GLOBAL_FEATURES} global features" in text


def test_the_real_data_path_is_spelled_one_way_relative_to_the_repo():
    for path, text in docs().items():
        for match in re.finditer(r"[\w./-]*shared/data/real", text):
            assert match.group(0) == "../shared/data/real", f"{path.name}: {match.group(0)}"


def test_doc_commands_do_not_overwrite_committed_results():
    for path, text in docs().items():
        assert not re.search(r"--out\s+benchmarks/results", text), path.name
    for script in (ROOT / "benchmarks").glob("*.py"):
        assert not re.search(r"default=(Path\()?\"benchmarks/results", script.read_text()), script.name


@pytest.mark.slow
def test_demo_script_needs_no_activated_venv(tmp_path):
    script = (ROOT / "benchmarks" / "demo_real_data.sh").read_text()
    assert not re.search(r"^\s*maopd ", script, re.MULTILINE)
    assert ".venv/bin/maopd" in script
    # with neither the venv nor maopd on PATH it says what to do
    fake = tmp_path / "repo" / "benchmarks"
    fake.mkdir(parents=True)
    (fake / "demo_real_data.sh").write_text(script)
    done = subprocess.run(
        ["bash", str(fake / "demo_real_data.sh"), str(tmp_path / "out")],
        check=False,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert done.returncode == 1 and "scripts/setup.sh" in done.stderr


def test_readme_timings_come_from_the_job():
    from maopd.pipeline.job import format_timings

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not re.search(r"\d+(\.\d+)? min(utes)?\b", readme) and "prints" in readme
    text = format_timings(
        {"stage1": 391.0, "stage2_full": 247.0, "evaluation": 437.0, "total": 1075.0},
        {"platform": "Linux-x86_64", "cpus": 2},
    )
    assert "Linux-x86_64, 2 CPUs" in text and "stage1" in text and "391.0 s" in text and "17.9 min" in text
