"""End to end on the tiny model and the embedded world: 3-step Stage I and Stage II runs through
``maopd train``, exact resume, the NaN stop, ``maopd plot`` and the ``OPDAlgorithm`` API."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file

from maopd.base.lock import holder
from maopd.base.run_dir import LOCK_FILE
from maopd.cli import main
from maopd.training import trainer as trainer_module
from maopd.training.algorithm import OPDAlgorithm, OPDConfig
from maopd.training.checkpoint import latest_checkpoint, list_checkpoints
from maopd.training.config import load_config
from maopd.training.run_logging import read_metrics
from maopd.training.trainer import TrainingStopped, train_stage

pytestmark = pytest.mark.slow
FAST = ["rollout.max_new_tokens=8", "logging.progress=false"]


def _comparable(row):
    return {k: v for k, v in row.items() if not k.startswith("time/")}


@pytest.fixture(scope="module")
def stage1_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "stage1"
    assert (
        main(["train", "--config", "configs/tiny_cpu_stage1.yaml", f"run_dir={run_dir}", "env.max_steps=3", *FAST]) == 0
    )
    return run_dir


def test_stage1_runs_three_steps_and_writes_everything(stage1_run):
    rows = read_metrics(stage1_run)
    assert [row["step"] for row in rows] == [1, 2, 3]
    for key in (
        "reward/em",
        "reward/searcher",
        "reward/answerer",
        "workflow/search_actions",
        "workflow/no_search",
        "searcher/entropy",
        "answerer/entropy",
        "loss/total",
        "optim/grad_norm",
    ):
        assert key in rows[0], key
    assert "reward/leader" not in rows[0]  # the cascade has no Leader
    for row in rows:  # every workflow searched ⇒ at least one search each; none did ⇔ no search at all
        assert 0 <= row["workflow/no_search"] <= 1
        assert row["workflow/no_search"] > 0 or row["workflow/search_actions"] >= 1
        assert (row["workflow/no_search"] == 1) == (row["workflow/search_actions"] == 0)
    assert [p.name for p in list_checkpoints(stage1_run / "checkpoints")] == ["step_2", "step_3"]
    assert (stage1_run / "config.yaml").is_file()
    assert list((stage1_run / "tb").glob("events.out.tfevents.*"))
    samples = (stage1_run / "samples" / "step_3.jsonl").read_text().splitlines()
    assert json.loads(samples[0])["workflow"] == "cascade"
    assert main(["plot", str(stage1_run)]) == 0
    assert (stage1_run / "plots" / "learning_curves.png").stat().st_size > 10_000


def test_resume_from_a_checkpoint_equals_the_uninterrupted_run(stage1_run, tmp_path):
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copytree(stage1_run / "checkpoints" / "step_2", resumed / "checkpoints" / "step_2")
    (resumed / "checkpoints" / "latest").write_text("step_2\n")
    shutil.copy(stage1_run / "config.yaml", resumed / "config.yaml")  # a run resumes only under the config that made it
    config = load_config("configs/tiny_cpu_stage1.yaml", [f"run_dir={resumed}", "env.max_steps=3", *FAST])
    train_stage(config, resume=True)
    uninterrupted = _comparable(read_metrics(stage1_run)[-1])
    assert _comparable(read_metrics(resumed)[-1]) == uninterrupted
    a = load_file(stage1_run / "checkpoints" / "step_3" / "model" / "model.safetensors")
    b = load_file(resumed / "checkpoints" / "step_3" / "model" / "model.safetensors")
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_non_finite_rewards_stop_the_run_and_keep_the_last_checkpoint(stage1_run, tmp_path, monkeypatch):
    run_dir = tmp_path / "nan"
    shutil.copytree(stage1_run, run_dir)
    real = trainer_module.record_rewards

    def poisoned(batch):
        rewards = real(batch)
        rewards["searcher"][0, 0] = float("nan")
        return rewards

    monkeypatch.setattr(trainer_module, "record_rewards", poisoned)
    config = load_config(run_dir / "config.yaml", ["steps=4", f"run_dir={run_dir}", "logging.progress=false"])
    with pytest.raises(
        TrainingStopped, match="step 4 stopped: searcher rewards has 1 non-finite.*last good checkpoint is .*step_3"
    ):
        train_stage(config)
    assert latest_checkpoint(run_dir).name == "step_3"
    assert [row["step"] for row in read_metrics(run_dir)] == [1, 2, 3]


def test_python_api_writes_what_the_cli_writes(tmp_path):
    run_dir = tmp_path / "api"
    config = (
        OPDConfig.from_file("configs/tiny_cpu_stage1.yaml")
        .environment(max_steps=3)
        .rollouts(max_new_tokens=8)
        .training(run_dir=str(run_dir), steps=2)
        .checkpointing(every=1, keep_last=3)
        .reporting(sample_every=1, progress=False)
    )
    with config.build() as algo:
        assert [algo.train()["step"] for _ in range(2)] == [1, 2]
        assert holder(run_dir / LOCK_FILE) == os.getpid()  # held until stop() or the block's end
    assert not (run_dir / LOCK_FILE).exists()
    assert [row["step"] for row in read_metrics(run_dir)] == [1, 2]
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (run_dir / "samples").iterdir()) == ["step_1.jsonl", "step_2.jsonl"]
    assert [p.name for p in list_checkpoints(run_dir / "checkpoints")] == ["step_1", "step_2"]
    assert load_config(run_dir / "config.yaml").steps == 2
    with pytest.raises(FileExistsError, match="already has checkpoints"):
        config.build()  # a fresh run never overwrites one; restore() goes on with it

    with OPDAlgorithm.restore(run_dir) as algo:
        assert algo.iteration == 2
        assert algo.train()["step"] == 3
    assert [row["step"] for row in read_metrics(run_dir)] == [1, 2, 3]
    assert latest_checkpoint(run_dir).name == "step_3"  # checkpoint.every=1


def test_restore_goes_on_where_the_checkpoint_is(stage1_run, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(stage1_run, run_dir)  # the fixture's run is shared by the other tests
    with OPDAlgorithm.restore(run_dir) as algo:
        metrics = algo.train()
        assert metrics["step"] == 4 and "loss/total" in metrics
        saved = algo.save(tmp_path / "elsewhere")
    assert saved == tmp_path / "elsewhere" / "checkpoints" / "step_4"
    with OPDAlgorithm.restore(saved) as again:
        assert again.iteration == 4 and again.config.run_dir == str(tmp_path / "elsewhere")
        for a, b in zip(algo.trainer.model.parameters(), again.trainer.model.parameters()):
            assert torch.equal(a, b)
    assert (tmp_path / "elsewhere" / "config.yaml").is_file()
    assert [row["step"] for row in read_metrics(stage1_run)] == [1, 2, 3]


def test_stage2_runs_three_steps_with_the_stage1_teacher(stage1_run, tmp_path):
    run_dir = tmp_path / "stage2"
    assert (
        main(
            [
                "train",
                "--config",
                "configs/tiny_cpu_stage2.yaml",
                f"run_dir={run_dir}",
                f"teacher.path={stage1_run}",
                "env.max_steps=5",
                *FAST,
            ]
        )
        == 0
    )
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert "reward/leader" in rows[0] and "leader/entropy" in rows[0] and "time/teacher_s" in rows[0]
    assert latest_checkpoint(run_dir).name == "step_3"
