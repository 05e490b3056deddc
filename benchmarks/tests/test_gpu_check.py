"""benchmarks/gpu_check.sh: its CPU smoke mode runs every part, and its GPU Stage II config loads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maopd.training.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_config_is_the_paper_batch_with_the_compiled_engine():
    config = load_config(ROOT / "configs/gpu_check_stage2.yaml", ["model.path=m", "teacher.path=m", "ptx.data=p"])
    assert (config.rollout.batch_size, config.rollout.group_size) == (32, 5)
    assert config.rollout.engine == "continuous" and config.rollout.decode_compile == "reduce-overhead"


@pytest.mark.slow
def test_gpu_check_cpu_smoke_runs_every_part(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks/gpu_check.sh"), "--cpu-smoke", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    summary = (tmp_path / "summary.txt").read_text()
    assert done.returncode == 0, summary + done.stderr[-2000:]
    for part in ("build_model", "stage2_step", "rollout_throughput"):
        assert f"{part}: ok" in summary
    throughput = json.loads((tmp_path / "rollout_throughput.json").read_text())
    assert {
        "collector_vs_generate_dynamic",
        "collector_vs_generate_static",
        "collector_vs_chunked_collector",
        "teacher_scoring_fraction_of_rollout",
    } <= set(throughput["ratios"])
    assert (tmp_path / "stage2_step_metrics.jsonl").read_text().strip()
