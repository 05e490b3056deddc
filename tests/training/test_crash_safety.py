"""Crash-safe training: SIGKILL at random times and inside a checkpoint write, damaged checkpoints.

The end-to-end tests run ``maopd train`` on the tiny Stage I config as a subprocess, kill it with
SIGKILL (randomly in time, or at a chosen point of ``save_checkpoint`` through the
``MAOPD_CRASH_AT`` hook), restart it, and check that every metrics row and the final weights
equal those of one uninterrupted run.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model
from maopd.agents.tokenizer import train_tokenizer
from maopd.training import checkpoint as ckpt
from maopd.training.run_logging import METRICS_FILE, read_metrics, truncate_metrics
from tests.checkpoints import save_test_checkpoint
from tests.real_data import REAL, needs_real

REPO = Path(__file__).resolve().parents[2]
STEPS = 4
OVERRIDES = [
    f"steps={STEPS}",
    "env.max_steps=3",
    "rollout.max_new_tokens=8",
    "checkpoint.every=1",
    "checkpoint.keep_last=2",
    "logging.progress=false",
    "logging.tensorboard=false",
]


# --------------------------------------------------------------------------- damaged checkpoints


@pytest.fixture(scope="module")
def tiny():
    tokenizer = train_tokenizer(["a few words for a tiny tokenizer"], vocab_size=300)
    return build_tiny_model(tokenizer, TinyModelConfig(seed=1)), tokenizer


def _save(run_dir, step, tiny):
    return save_test_checkpoint(run_dir, step, *tiny)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _edit_state(checkpoint: Path, edit) -> None:
    """Rewrite ``trainer_state.json`` as valid JSON that ``edit(state)`` makes wrong."""
    path = checkpoint / "trainer_state.json"
    state = json.loads(path.read_text())
    edit(state)
    path.write_text(json.dumps(state))


DAMAGE = {
    "trainer state emptied": (
        lambda c: (c / "trainer_state.json").write_text("{}"),
        "trainer_state.json: step is missing",
    ),
    "trainer state step not a number": (
        lambda c: _edit_state(c, lambda s: s.update(step="four")),
        "trainer_state.json: step: 'four' is not a step number",
    ),
    "trainer state tensor out of range": (
        lambda c: _edit_state(c, lambda s: s["rng"].update(torch={"__tensor__": 99999})),
        "trainer_state.json: tensor 99999 is not one of the .* in trainer_state.pt",
    ),
    "trainer state loader damaged": (
        lambda c: _edit_state(c, lambda s: s["loader"].update(position=-1)),
        "trainer_state.json: loader.position: -1 is not a count",
    ),
    "trainer state of another step": (
        lambda c: _edit_state(c, lambda s: s.update(step=1)),
        "trainer_state.json: step: 1 in the checkpoint of step 2",
    ),
    "trainer state rng damaged": (
        lambda c: _edit_state(c, lambda s: s["rng"].update(numpy=["MT19937", [1, 2], 0, 0, 0.0])),
        "trainer_state.json: rng.numpy: ",
    ),
    "truncated weights": (lambda c: _truncate(c / "model" / "model.safetensors"), "model.safetensors: .* bytes"),
    "weights header garbage": (
        lambda c: (c / "model" / "model.safetensors").write_bytes(b"\xff" * 64),
        "model.safetensors: truncated header",
    ),
    "missing weights": (lambda c: (c / "model" / "model.safetensors").unlink(), "model.safetensors is missing"),
    "truncated trainer state": (lambda c: _truncate(c / "trainer_state.pt"), "trainer_state.pt: unreadable"),
    "trainer state garbage": (
        lambda c: (c / "trainer_state.pt").write_bytes(b"not a zip"),
        "trainer_state.pt: unreadable",
    ),
    "missing trainer state": (lambda c: (c / "trainer_state.pt").unlink(), "trainer_state.pt is missing"),
    "model config garbage": (lambda c: (c / "model" / "config.json").write_text("{"), "model/config.json: unreadable"),
    "missing tokenizer": (
        lambda c: (c / "model" / "tokenizer_config.json").unlink(),
        "tokenizer_config.json is missing",
    ),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_checkpoint_is_skipped_with_a_message_naming_it(tmp_path, tiny, caplog, damage):
    good = _save(tmp_path, 1, tiny)
    bad = _save(tmp_path, 2, tiny)
    assert ckpt.checkpoint_problem(bad) is None
    damage_fn, reason = DAMAGE[damage]
    damage_fn(bad)
    with caplog.at_level(logging.WARNING, logger="maopd.training.checkpoint"):
        assert ckpt.latest_checkpoint(tmp_path) == good
        assert ckpt.resolve_model_dir(tmp_path) == good / "model"
    message = caplog.records[0].getMessage()
    assert f"{bad} is damaged" in message and "using the previous one" in message
    assert re.search(reason, message), message


def test_every_checkpoint_damaged_means_none(tmp_path, tiny, caplog):
    for step in (1, 2):
        _truncate(_save(tmp_path, step, tiny) / "trainer_state.pt")
    with caplog.at_level(logging.WARNING, logger="maopd.training.checkpoint"):
        assert ckpt.latest_checkpoint(tmp_path) is None
    assert len(caplog.records) == 2


def test_a_sharded_model_is_checked_shard_by_shard(tmp_path, tiny):
    path = _save(tmp_path, 1, tiny)
    model_dir = path / "model"
    tiny[0].save_pretrained(model_dir, max_shard_size="200KB")
    assert (model_dir / "model.safetensors.index.json").is_file()
    (model_dir / "model.safetensors").unlink()
    assert ckpt.checkpoint_problem(path) is None
    shard = max(model_dir.glob("model-*.safetensors"))
    _truncate(shard)
    assert shard.name in ckpt.checkpoint_problem(path)


def test_a_metrics_line_torn_by_a_crash_is_dropped_on_resume(tmp_path):
    rows = [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25}]
    text = "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3, "lo'
    (tmp_path / METRICS_FILE).write_text(text)
    truncate_metrics(tmp_path, 2)
    assert read_metrics(tmp_path) == rows


# --------------------------------------------------------------------------- kill -9 end to end


def _logged_rows(run_dir: Path) -> int:
    path = run_dir / METRICS_FILE
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def _train(
    run_dir: Path, crash_at: str | None = None, kill_after: float | None = None, count_from_next_row: bool = False
) -> int:
    """``maopd train`` in a subprocess; returns its exit code (-9 when killed).

    ``kill_after`` seconds from the start, or from its first new metrics row when
    ``count_from_next_row``, it is SIGKILLed.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop(ckpt.CRASH_ENV, None)
    if crash_at:
        env[ckpt.CRASH_ENV] = crash_at
    command = [
        sys.executable,
        "-m",
        "maopd.cli",
        "train",
        "--config",
        "configs/tiny_cpu_stage1.yaml",
        f"run_dir={run_dir}",
        *OVERRIDES,
    ]
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if count_from_next_row:
        rows = _logged_rows(run_dir)
        while _logged_rows(run_dir) == rows and process.poll() is None:
            time.sleep(0.02)
    try:
        _, stderr = process.communicate(timeout=kill_after if kill_after is not None else 300)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate()
    if process.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"maopd train failed ({process.returncode}):\n{stderr[-3000:]}")
    return process.returncode


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run, and how long it took."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    started = time.perf_counter()
    assert _train(run_dir) == 0
    return run_dir, time.perf_counter() - started


def _without_timings(rows):
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def _assert_matches(run_dir: Path, reference: Path) -> None:
    expected = _without_timings(read_metrics(reference))
    assert [row["step"] for row in expected] == list(range(1, STEPS + 1))
    assert _without_timings(read_metrics(run_dir)) == expected
    root = run_dir / "checkpoints"
    assert [p.name for p in ckpt.list_checkpoints(root)] == ["step_3", "step_4"]
    assert not list(root.glob("*.staging-*"))
    final = ckpt.latest_checkpoint(run_dir)
    assert final == root / f"step_{STEPS}"
    a = load_file(final / "model" / "model.safetensors")
    b = load_file(reference / "checkpoints" / f"step_{STEPS}" / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
    assert (
        ckpt.load_trainer_state(final)["loader"]
        == ckpt.load_trainer_state(reference / "checkpoints" / f"step_{STEPS}")["loader"]
    )


# Which checkpoint survives a kill while step_2 is being saved.
SURVIVOR = {"model": "step_1", "state": "step_1", "moved": "step_1", "pointer": "step_2"}


@pytest.mark.slow
@pytest.mark.parametrize("phase", ckpt.CRASH_PHASES)
def test_sigkill_inside_a_checkpoint_write_then_restart_equals_the_uninterrupted_run(tmp_path, reference, phase):
    run_dir = tmp_path / "run"
    assert _train(run_dir, crash_at=f"checkpoint:2:{phase}") == -signal.SIGKILL
    assert ckpt.latest_checkpoint(run_dir).name == SURVIVOR[phase]
    half_written = list((run_dir / "checkpoints").glob("*.staging-*"))
    assert [p.name.split("-")[0] for p in half_written] == (["step_2.staging"] if phase in ("model", "state") else [])
    assert _train(run_dir) == 0
    _assert_matches(run_dir, reference[0])


@pytest.mark.slow
def test_a_full_disk_mid_save_is_one_line_and_the_restart_equals_the_uninterrupted_run(
    tmp_path, reference, monkeypatch, capsys
):
    from maopd.cli import main

    run_dir = tmp_path / "run"
    saves = []
    real_save = torch.save

    def fills_the_disk(*args, **kwargs):  # the second checkpoint's trainer state does not fit
        saves.append(args[1])
        if len(saves) == 2:
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 6912 vs 6803")
        return real_save(*args, **kwargs)

    monkeypatch.setattr(torch, "save", fills_the_disk)
    config = str(REPO / "configs" / "tiny_cpu_stage1.yaml")
    assert main(["train", "--config", config, f"run_dir={run_dir}", *OVERRIDES]) == 2
    monkeypatch.undo()
    err = capsys.readouterr().err.splitlines()[-1]
    named = run_dir / "checkpoints" / "step_2" / "trainer_state.pt"
    failed = r"the write failed \(.*unexpected pos.*\) \(\d+\.\d MiB free there\)"
    assert re.fullmatch(rf"maopd train: {re.escape(str(named))}: {failed}; .*", err)
    assert ckpt.latest_checkpoint(run_dir).name == "step_1"
    assert not list((run_dir / "checkpoints").glob("*.staging-*"))
    assert _train(run_dir) == 0
    _assert_matches(run_dir, reference[0])


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigkill_at_random_times_then_restart_equals_the_uninterrupted_run(tmp_path, reference, seed):
    reference_dir, duration = reference
    run_dir = tmp_path / "run"
    step_s = max(row["time/step_s"] for row in read_metrics(reference_dir))
    rng = random.Random(seed)
    # once in the first half of a run (start-up included), then within a step or so of its
    # first new step, which is after a resume whenever the first kill came after a checkpoint
    first = _train(run_dir, kill_after=rng.uniform(0.0, 0.5) * duration)
    # on a loaded machine the restarted run may finish its last step before the kill
    second = _train(run_dir, kill_after=rng.uniform(0.0, 1.5) * step_s, count_from_next_row=True)
    assert -signal.SIGKILL in (first, second) and read_metrics(run_dir)
    assert _train(run_dir) == 0
    _assert_matches(run_dir, reference_dir)


@pytest.mark.slow
def test_a_damaged_last_checkpoint_is_skipped_and_the_rerun_equals_the_uninterrupted_run(tmp_path, reference):
    run_dir = tmp_path / "run"
    shutil.copytree(reference[0], run_dir)
    _truncate(run_dir / "checkpoints" / f"step_{STEPS}" / "model" / "model.safetensors")
    assert ckpt.latest_checkpoint(run_dir).name == f"step_{STEPS - 1}"
    assert _train(run_dir) == 0
    _assert_matches(run_dir, reference[0])


# --------------------------------------------------------------------------- evaluation runs

EVAL_ATTEMPTS = 16


def _eval(manifest: Path, out: Path, kill_after_records: int | None = None) -> int:
    """``maopd eval run`` (scripted cascade) in a subprocess; -9 when killed.

    The kill comes once ``kill_after_records`` records are on disk, not after a delay, so it lands
    mid-run however fast the machine is."""
    command = [
        sys.executable,
        "-m",
        "maopd.cli",
        "eval",
        "run",
        "--manifest",
        str(manifest),
        "--workflow",
        "cascade",
        "--attempts",
        str(EVAL_ATTEMPTS),
        "--batch-size",
        "4",
        "--out",
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if kill_after_records is not None:
        while process.poll() is None and (not out.is_file() or out.read_bytes().count(b"\n") < kill_after_records):
            time.sleep(0.001)
        process.send_signal(signal.SIGKILL)
    _, stderr = process.communicate(timeout=300)
    if process.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"maopd eval run failed ({process.returncode}):\n{stderr[-3000:]}")
    return process.returncode


def _records_by_key(path: Path) -> dict:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    keyed = {(r["dataset"], r["question_id"], r["attempt"]): r for r in rows}
    assert len(keyed) == len(rows), "a record was written twice"
    return {key: {k: v for k, v in r.items() if k not in ("trajectory", "duration_s")} for key, r in keyed.items()}


@pytest.mark.slow
@needs_real
def test_sigkill_during_an_evaluation_run_then_rerun_equals_the_uninterrupted_run(tmp_path):
    from maopd.cli import main

    manifest = tmp_path / "manifest.jsonl"
    assert (
        main(
            [
                "eval",
                "manifest",
                "--dataset",
                f"hotpotqa={REAL}/hotpotqa_distractor_dev300.jsonl:hotpotqa",
                "--count",
                "hotpotqa=60",
                "--out",
                str(manifest),
            ]
        )
        == 0
    )
    uninterrupted = tmp_path / "uninterrupted.jsonl"
    assert _eval(manifest, uninterrupted) == 0
    resumed = tmp_path / "resumed.jsonl"
    total = 60 * EVAL_ATTEMPTS
    assert _eval(manifest, resumed, kill_after_records=random.Random(0).randint(4, total // 4)) == -signal.SIGKILL
    partial = len(resumed.read_bytes().splitlines())
    assert 0 < partial < total
    assert _eval(manifest, resumed) == 0
    assert _records_by_key(resumed) == _records_by_key(uninterrupted)
