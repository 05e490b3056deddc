"""Checkpoints: Hugging Face model files, atomic writes, the ``latest`` pointer, keep-last-N."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from agents.tiny_model import TinyModelConfig, build_tiny_model
from agents.tokenizer import train_tokenizer
from training import checkpoint as ckpt
from training.config import build_config


@pytest.fixture(scope="module")
def tiny():
    tokenizer = train_tokenizer(["a few words for a tiny tokenizer"], vocab_size=300)
    return build_tiny_model(tokenizer, TinyModelConfig(seed=1)), tokenizer


def _save(run_dir, step, tiny, keep_last=2):
    model, tokenizer = tiny
    state = {"step": step, "rng": ckpt.capture_rng_state()}
    return ckpt.save_checkpoint(run_dir, step, model, tokenizer, state, build_config({"stage": "stage1"}), keep_last)


def test_checkpoint_holds_a_transformers_loadable_model_and_the_trainer_state(tmp_path, tiny):
    path = _save(tmp_path, 5, tiny)
    assert path == tmp_path / "checkpoints" / "step_5"
    loaded = AutoModelForCausalLM.from_pretrained(path / "model", local_files_only=True)
    for (name, a), (_, b) in zip(tiny[0].state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    assert ckpt.load_trainer_state(path)["step"] == 5
    assert (path / "config.yaml").is_file()
    assert ckpt.latest_checkpoint(tmp_path) == path
    assert ckpt.resolve_model_dir(tmp_path) == path / "model"
    assert ckpt.resolve_model_dir(path) == path / "model"
    assert ckpt.resolve_model_dir(path / "model") == path / "model"


def test_only_the_last_n_checkpoints_are_kept(tmp_path, tiny):
    for step in (1, 2, 3, 4):
        _save(tmp_path, step, tiny, keep_last=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "checkpoints")] == ["step_3", "step_4"]
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_4"


def test_a_crash_mid_save_keeps_the_previous_checkpoint(tmp_path, tiny, monkeypatch):
    good = _save(tmp_path, 1, tiny)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt.torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        _save(tmp_path, 2, tiny)
    monkeypatch.undo()
    assert ckpt.latest_checkpoint(tmp_path) == good
    assert not (tmp_path / "checkpoints" / "step_2").exists()
    assert ckpt.load_trainer_state(good)["step"] == 1
    # the next save clears the half-written directory, even one of another step
    _save(tmp_path, 3, tiny)
    assert not list((tmp_path / "checkpoints").glob("*.staging-*"))


def test_a_save_removes_dead_builders_staging_of_any_step(tmp_path, tiny, dead_pid):
    root = tmp_path / "checkpoints"
    root.mkdir()
    killed = root / f"step_7.staging-{dead_pid}-abc"  # a SIGKILLed save of a step this run never saves again
    live = root / f"step_8.staging-{os.getpid()}-def"  # a save still under way
    for path in (killed, live):
        path.mkdir()
    _save(tmp_path, 1, tiny)
    assert not killed.exists() and live.exists()


def test_rng_state_round_trips(tmp_path, tiny):
    state = ckpt.capture_rng_state()
    expected = torch.rand(3)
    ckpt.restore_rng_state(state)
    assert torch.equal(torch.rand(3), expected)


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        ckpt.resolve_model_dir(tmp_path)
