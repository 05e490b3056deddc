"""Bounded disk: over a 20-step tiny run, checkpoints and samples rotate; metrics grow one row a step.

The 200+-step RSS measurement is the benchmark ``benchmarks/memory_soak.py``."""

from __future__ import annotations

import pytest

from maopd.base.config import ConfigError
from maopd.training.checkpoint import latest_checkpoint, list_checkpoints
from maopd.training.config import load_config
from maopd.training.run_logging import read_metrics
from maopd.training.trainer import Trainer, train_stage

pytestmark = pytest.mark.slow
STEPS = 20


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
    """A 20-step run, with the checkpoint and sample files seen after every step."""
    run_dir = tmp_path_factory.mktemp("runs") / "rotation"
    config = load_config(
        "configs/tiny_cpu_stage1.yaml",
        [
            f"run_dir={run_dir}",
            f"steps={STEPS}",
            "rollout.batch_size=1",
            "rollout.max_new_tokens=4",
            "env.max_steps=3",
            "optim.minibatches=1",
            "checkpoint.every=2",
            "checkpoint.keep_last=2",
            "logging.sample_every=1",
            "logging.keep_samples=3",
            "logging.progress=false",
        ],
    )
    seen = []
    real_step = Trainer.train_step

    def step_then_look(trainer):
        metrics = real_step(trainer)
        seen.append(
            (len(list((run_dir / "checkpoints").glob("step_*"))), len(list((run_dir / "samples").glob("*.jsonl"))))
        )
        return metrics

    Trainer.train_step = step_then_look
    try:
        train_stage(config, resume=False)
    finally:
        Trainer.train_step = real_step
    return run_dir, seen


def test_checkpoints_rotate_to_keep_last(soak):
    run_dir, seen = soak
    root = run_dir / "checkpoints"
    assert [p.name for p in list_checkpoints(root)] == ["step_18", "step_20"]
    assert latest_checkpoint(run_dir) == root / "step_20"
    assert not list(root.glob("*.staging-*"))
    assert max(checkpoints for checkpoints, _ in seen) == 2


def test_samples_rotate_to_keep_samples(soak):
    run_dir, seen = soak
    assert sorted(p.name for p in (run_dir / "samples").iterdir()) == [
        "step_18.jsonl",
        "step_19.jsonl",
        "step_20.jsonl",
    ]
    assert max(samples for _, samples in seen) == 3


def test_metrics_hold_one_row_per_step(soak):
    run_dir, _ = soak
    assert [row["step"] for row in read_metrics(run_dir)] == list(range(1, STEPS + 1))


def test_keep_samples_must_not_be_negative():
    with pytest.raises(ConfigError, match="logging.keep_samples"):
        load_config("configs/tiny_cpu_stage1.yaml", ["logging.keep_samples=-1"])
