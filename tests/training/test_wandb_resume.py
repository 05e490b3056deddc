"""W&B survives a resume: a stage run with ``logging.wandb=true`` goes on logging to the W&B run it
started (offline mode here), and the links W&B makes in ``RUN_DIR/wandb/`` do not stop the resume,
nor ``OPDAlgorithm.restore``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("wandb")  # the logging extra (in dev)

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _train(run_dir: Path, steps: int, env: dict[str, str]) -> None:
    command = [sys.executable, "-m", "maopd.cli", "train", "--config", "configs/tiny_cpu_stage1.yaml"]
    command += ["logging.wandb=true", f"run_dir={run_dir}", f"steps={steps}"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_resumed_run_logs_to_the_wandb_run_it_started(tmp_path, monkeypatch):
    offline = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CACHE_DIR": str(tmp_path / "wandb_cache")}
    env = {**os.environ, **offline, "PYTHONPATH": str(REPO)}
    run_dir = tmp_path / "run"
    _train(run_dir, 1, env)
    run_id = (run_dir / "wandb" / "run-id").read_text().strip()
    assert (run_dir / "wandb" / "latest-run").is_symlink()  # W&B's own link, which the resume accepts
    _train(run_dir, 2, env)  # resumes from step 1's checkpoint
    runs = sorted(path.name for path in (run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(name.endswith(f"-{run_id}") for name in runs), runs
    assert (run_dir / "checkpoints" / "step_2").is_dir()

    for name, value in offline.items():
        monkeypatch.setenv(name, value)
    from maopd.training.algorithm import OPDAlgorithm

    with OPDAlgorithm.restore(run_dir / "checkpoints" / "step_2") as algo:
        import wandb

        assert algo.trainer.step == 2 and wandb.run is not None and wandb.run.id == run_id
