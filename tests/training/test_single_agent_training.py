"""The single-agent baseline trains like a stage: ``stage: single`` picks the workflow, the solver's
tokens get role-normalised GRPO on R_solver (Eq. 1, no KL-in-reward), and a tiny run goes end to end."""

from __future__ import annotations

import json

import pytest
import torch

from maopd.base.config import ConfigError
from maopd.cli import main
from maopd.envs.actions import SOLVER
from maopd.training.advantages import AdvantageConfig, team_token_advantages
from maopd.training.config import load_config
from maopd.training.run_logging import read_metrics

TINY = "configs/tiny_cpu_single.yaml"
FAST = ["rollout.max_new_tokens=8", "logging.progress=false", "logging.tensorboard=false"]


def test_stage_single_trains_the_single_workflow_without_a_teacher():
    config = load_config(None, ["stage=single"])
    assert config.trained_workflow == "single" and config.env.max_steps == 5
    assert config.teacher.source == "none" and config.advantage.kl_in_reward_coef == 0.0
    assert load_config(None, ["stage=stage1"]).trained_workflow == "cascade"  # the stages keep theirs
    assert load_config(None, ["teacher.path=runs/stage1"]).trained_workflow == "hierarchical"


@pytest.mark.parametrize(
    "override, field",
    [
        ("teacher.source=base_model", "teacher.source"),
        ("advantage.kl_in_reward_coef=0.001", "advantage.kl_in_reward_coef"),
        ("ppo.kl_loss_coef=0.1", "ppo.kl_loss_coef"),
        ("variant=outcome_searcher_rl", "variant"),
        ("searcher_reward=critic", "searcher_reward"),
    ],
)
def test_settings_that_cannot_apply_to_the_single_agent_are_refused(override, field):
    with pytest.raises(ConfigError, match=rf"^{field}: .*stage 'single'.*(set it|only)"):
        load_config(None, ["stage=single", override])


def _advantages(solver_rewards):
    # two questions × two trajectories, one solver call each, three generated tokens
    return team_token_advantages(
        role_ids=torch.full((4,), SOLVER),
        traj_index=torch.arange(4),
        candidate_index=torch.zeros(4, dtype=torch.long),
        response_mask=torch.ones(4, 3),
        old_logprobs=-torch.ones(4, 3),
        teacher_logprobs=None,
        leader_rewards=None,
        answerer_rewards=None,
        solver_rewards=solver_rewards,
        config=AdvantageConfig(searcher_signal="none", kl_in_reward_coef=0.0),
    )


def test_solver_tokens_get_grpo_on_r_solver():
    advantages = _advantages(torch.tensor([[1.0, 0.0], [-1.0, -1.0]]))
    # question 0 disagrees: ±1 over its group on every token of the call; question 1 agrees: 0
    expected = torch.tensor([[1.0] * 3, [-1.0] * 3])
    assert torch.allclose(advantages.token_advantages[:2], expected, atol=1e-4)
    assert advantages.token_advantages[2:].abs().sum() == 0
    assert set(advantages.group_advantages) == {"solver"}
    with pytest.raises(ValueError, match="solver sequences but solver_rewards is None"):
        _advantages(None)


@pytest.mark.slow
def test_tiny_single_agent_run_trains_the_solver(tmp_path):
    run_dir = tmp_path / "single"
    assert main(["train", "--config", TINY, f"run_dir={run_dir}", "steps=2", *FAST]) == 0
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2]
    for key in ("reward/em", "reward/solver", "solver/sequences", "solver/generated_tokens", "loss/total"):
        assert key in rows[0], key
    assert "reward/leader" not in rows[0] and "searcher/sequences" not in rows[0]
    sample = json.loads((run_dir / "samples" / "step_2.jsonl").read_text().splitlines()[0])
    assert sample["workflow"] == "single" and {call["role"] for call in sample["calls"]} == {"solver"}


@pytest.mark.slow
def test_solver_tokens_get_advantages_when_the_groups_rewards_differ(tmp_path):
    from maopd.training.trainer import Trainer

    config = load_config(TINY, [f"run_dir={tmp_path}", *FAST])
    trainer = Trainer(config)
    batch, _ = trainer.collect()
    # a random model's outcomes are all alike; make each question's first trajectory succeed
    for row in batch.records:
        for g, record in enumerate(row):
            record.rewards.roles["solver"] = 1.0 if g == 0 else 0.0
    ppo_batch, metrics = trainer.prepare(batch)
    solver = (ppo_batch.role_ids == SOLVER)[:, None] & ppo_batch.tokens.response_mask.bool()
    assert bool(solver.any()) and bool((ppo_batch.role_ids == SOLVER).all())
    assert bool((ppo_batch.advantages.token_advantages[solver] != 0).all())
    assert metrics["reward/solver"] == pytest.approx(0.5)
