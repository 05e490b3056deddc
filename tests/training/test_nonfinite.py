"""NaN/inf stops a run cleanly: the offending batch is saved for inspection, the last good checkpoint
and the metrics stay as they were. NaN is injected into rewards, token log-probs (as non-finite
logits give) and parameters."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from maopd.training import trainer as trainer_module
from maopd.training.checkpoint import latest_checkpoint
from maopd.training.config import load_config
from maopd.training.run_logging import read_metrics
from maopd.training.trainer import TrainingStopped, train_stage

pytestmark = pytest.mark.slow
OVERRIDES = [
    "env.max_steps=3",
    "rollout.max_new_tokens=8",
    "checkpoint.every=1",
    "logging.progress=false",
    "logging.tensorboard=false",
]


def _config(run_dir, steps):
    return load_config("configs/tiny_cpu_stage1.yaml", [f"run_dir={run_dir}", f"steps={steps}", *OVERRIDES])


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "one_step"
    train_stage(_config(run_dir, 1))
    return run_dir


def _stop_at_step_2(one_step_run, tmp_path):
    """Run step 2 from a copy of the one-step run; returns the run dir and the stop message."""
    run_dir = tmp_path / "run"
    shutil.copytree(one_step_run, run_dir)
    with pytest.raises(TrainingStopped) as stopped:
        train_stage(_config(run_dir, 2))
    assert latest_checkpoint(run_dir).name == "step_1"
    assert [row["step"] for row in read_metrics(run_dir)] == [1]
    return run_dir, str(stopped.value)


def _saved(run_dir, message):
    path = run_dir / "nonfinite" / "step_2.pt"
    assert f"saved for inspection in {path}" in message
    assert "last good checkpoint is" in message and message.rstrip(".").endswith("step_1")
    summary = json.loads(path.with_suffix(".json").read_text())
    saved = torch.load(path, weights_only=True)
    assert saved["step"] == summary["step"] == 2
    assert saved["error"] == summary["error"] and summary["error"] in message
    tensors = saved["tensors"]
    assert tensors["input_ids"].shape == tensors["response_mask"].shape == tensors["old_logprobs"].shape
    assert tensors["role_ids"].shape[0] == tensors["input_ids"].shape[0]
    assert len(saved["records"]) == 2 and len(summary["questions"]) == 2  # B = 2 questions
    return saved, summary


def test_nan_reward_stops_and_saves_the_rollout_and_rewards(one_step_run, tmp_path, monkeypatch):
    real = trainer_module.record_rewards

    def poisoned(batch):
        rewards = real(batch)
        rewards["searcher"][1, 0] = float("nan")
        return rewards

    monkeypatch.setattr(trainer_module, "record_rewards", poisoned)
    run_dir, message = _stop_at_step_2(one_step_run, tmp_path)
    assert "step 2 stopped: searcher rewards has 1 non-finite" in message
    saved, summary = _saved(run_dir, message)
    assert torch.isnan(saved["tensors"]["rewards/searcher"][1, 0])
    assert summary["tensors"]["rewards/searcher"]["first_nonfinite_positions"] == [[1, 0]]
    assert "token_advantages" not in saved["tensors"]  # the step stopped before advantages existed


def test_nan_logits_stop_and_save_the_ppo_batch(one_step_run, tmp_path, monkeypatch):
    real_load = trainer_module.load_policy_model

    def poison(module, inputs, logits):
        if module.training:  # when the update re-scores tokens, not during rollouts
            logits = logits.clone()
            logits[0, 0] = float("nan")
            return logits
        return None

    def load_with_nan_logits(*args, **kwargs):
        model, tokenizer = real_load(*args, **kwargs)
        model.get_output_embeddings().register_forward_hook(poison)
        return model, tokenizer

    monkeypatch.setattr(trainer_module, "load_policy_model", load_with_nan_logits)
    run_dir, message = _stop_at_step_2(one_step_run, tmp_path)
    assert "step 2 stopped: logprobs has 1 non-finite" in message
    saved, summary = _saved(run_dir, message)
    assert torch.isfinite(saved["tensors"]["token_advantages"]).all()
    assert summary["tensors"]["token_advantages"]["nonfinite"] == 0
    assert "rewards/em" in saved["tensors"]


def test_a_non_finite_parameter_after_an_update_stops_before_it_is_checkpointed(one_step_run, tmp_path, monkeypatch):
    real_step = torch.optim.AdamW.step

    def poisoned_step(self, *args, **kwargs):
        result = real_step(self, *args, **kwargs)
        with torch.no_grad():
            self.param_groups[0]["params"][0].view(-1)[:3] = float("inf")
        return result

    monkeypatch.setattr(torch.optim.AdamW, "step", poisoned_step)
    run_dir, message = _stop_at_step_2(one_step_run, tmp_path)
    assert "step 2 stopped: parameters after the optimizer step has 3 non-finite" in message
    _saved(run_dir, message)
