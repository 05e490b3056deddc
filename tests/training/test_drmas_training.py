"""Dr. MAS's orchestra trains like a stage: ``workflow: orchestra`` with the agent-wise
estimators (configs/tiny_cpu_drmas.yaml), and a tiny run writes every role's metrics."""

from __future__ import annotations

import pytest

from maopd.cli import main
from maopd.training.config import load_config
from maopd.training.run_logging import read_metrics

TINY = "configs/tiny_cpu_drmas.yaml"
FAST = ["rollout.max_new_tokens=8", "logging.progress=false", "logging.tensorboard=false"]


def test_the_config_trains_the_orchestra_with_agentwise_signals():
    config = load_config(TINY, [])
    assert config.trained_workflow == "orchestra" and config.teacher.source == "none"
    assert {role: config.advantage.roles[role] for role in ("verifier", "searcher", "answerer")} == {
        "verifier": "grpo_agentwise",
        "searcher": "grpo_agentwise_final_em",
        "answerer": "grpo_agentwise",
    }
    assert config.teacher_roles == ()


def test_an_unknown_workflow_or_role_is_one_line_naming_the_registered_ones():
    with pytest.raises(ValueError, match="^workflow: unknown workflow 'orchestr'; expected one of"):
        load_config(TINY, ["workflow=orchestr"])
    with pytest.raises(ValueError, match="^advantage.role_signals.verifer: the orchestra workflow has no such role"):
        load_config(TINY, ["advantage.role_signals={verifer: grpo}"])


@pytest.mark.slow
def test_a_tiny_drmas_run_writes_its_metrics_per_role(tmp_path):
    run_dir = tmp_path / "drmas"
    assert main(["train", "--config", TINY, f"run_dir={run_dir}", "steps=2", *FAST]) == 0
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2]
    for role in ("verifier", "searcher", "answerer"):
        assert f"{role}/sequences" in rows[0] and f"{role}/generated_tokens" in rows[0], role
    assert "reward/verifier" in rows[0] and "loss/total" in rows[0]
    assert "leader/sequences" not in rows[0]


def test_the_full_config_trains_at_the_main_jobs_stage_ii_compute_from_its_pi0():
    """configs/drmas_orchestra.yaml: the default preset's π_0, and Stage II's length, batch,
    learning rate and loss aggregation, so Dr. MAS's row costs what MultiAgent-OPD's does."""
    from maopd.pipeline.config import load_preset, stage_config
    from maopd.training.base_model import base_model_dir

    preset = load_preset("default")
    pi0 = base_model_dir(preset.base_model)
    stage2 = stage_config(preset, "stage2", "full", pi0, pi0)
    drmas = load_config("configs/drmas_orchestra.yaml", [])
    assert drmas.trained_workflow == "orchestra" and drmas.model.path == f"models/{pi0.name}"
    for section, names in {
        "": ("steps",),
        "rollout": ("batch_size", "group_size", "max_new_tokens"),
        "optim": ("lr", "minibatches"),
        "ppo": ("loss_agg_mode",),
    }.items():
        for name in names:
            ours = getattr(getattr(drmas, section) if section else drmas, name)
            theirs = getattr(getattr(stage2, section) if section else stage2, name)
            assert ours == theirs, f"{section}.{name}"
