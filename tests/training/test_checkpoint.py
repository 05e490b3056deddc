"""Checkpoints: Hugging Face model files, atomic writes, the ``latest`` pointer, keep-last-N."""

from __future__ import annotations

import errno
import os
import re

import pytest
import torch
from transformers import AutoModelForCausalLM

from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model
from maopd.agents.tokenizer import train_tokenizer
from maopd.base.atomic import NoSpaceError
from maopd.base.run_dir import SymlinkInRunError
from maopd.training import checkpoint as ckpt
from tests.checkpoints import save_test_checkpoint


@pytest.fixture(scope="module")
def tiny():
    tokenizer = train_tokenizer(["a few words for a tiny tokenizer"], vocab_size=300)
    return build_tiny_model(tokenizer, TinyModelConfig(seed=1)), tokenizer


def _save(run_dir, step, tiny, keep_last=2):
    return save_test_checkpoint(run_dir, step, *tiny, keep_last=keep_last)


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


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 6912 vs 6803"),  # torch.save
        OSError(errno.ENOSPC, "No space left on device"),  # a write() with no file name
    ],
    ids=["torch short write", "ENOSPC without a file name"],
)
@pytest.mark.parametrize("step", [1, 2], ids=["same step again", "next step"])
def test_a_full_disk_names_the_file_and_the_free_space_and_keeps_the_last_checkpoint(
    tmp_path, tiny, monkeypatch, failure, step
):
    good = _save(tmp_path, 1, tiny)

    def full(*args, **kwargs):
        raise failure

    monkeypatch.setattr(ckpt.torch, "save", full)
    with pytest.raises(NoSpaceError) as error:
        _save(tmp_path, step, tiny)
    monkeypatch.undo()
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'checkpoints' / f'step_{step}' / 'trainer_state.pt'}: ")
    assert re.search(r"\(\d+\.\d MiB free there\)", message) and "\n" not in message
    assert ckpt.latest_checkpoint(tmp_path) == good and ckpt.checkpoint_problem(good) is None
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_1"]


def test_a_save_never_writes_or_deletes_through_a_symlink(tmp_path, tiny):
    elsewhere = tmp_path / "elsewhere"
    for step in range(1, 6):  # someone else's checkpoints, which pruning must not reach
        (elsewhere / f"step_{step}").mkdir(parents=True)
        (elsewhere / f"step_{step}" / "trainer_state.pt").write_text("theirs")
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(SymlinkInRunError, match=f"{run / 'checkpoints'} is a symbolic link"):
        _save(run, 1, tiny)
    (run / "checkpoints").unlink()
    _save(run, 1, tiny)
    (run / "checkpoints" / "step_2").symlink_to(elsewhere / "step_2", target_is_directory=True)
    with pytest.raises(SymlinkInRunError, match="step_2 is a symbolic link"):
        _save(run, 2, tiny)
    assert sorted(p.name for p in elsewhere.iterdir()) == [f"step_{step}" for step in range(1, 6)]
    assert (elsewhere / "step_2" / "trainer_state.pt").read_text() == "theirs"
