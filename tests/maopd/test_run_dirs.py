"""Run directories a run owns: one holder at a time, no write or delete through a symlink inside one.

The holder is simulated in-process where it can be (a second open file description of the lock
file conflicts with this process's own, as another process's would); the tests marked slow start
real processes.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from maopd.base.atomic import build_directory_atomically
from maopd.base.lock import LOCKS_ENV, LockedError, handed_down_fds
from maopd.base.paths import package_data
from maopd.base.run_dir import LOCK_FILE, LOGGER_DIRS, SymlinkInRunError, owning, refuse_symlinks, start_over
from maopd.cli import main

REPO = Path(__file__).resolve().parents[2]

# a one-step-cheap stage run: the tiny CPU config with short episodes and no progress or TensorBoard
TINY = [
    "--config",
    str(package_data("configs") / "tiny_cpu_stage1.yaml"),
    *"env.max_steps=3 rollout.max_new_tokens=8 logging.progress=false logging.tensorboard=false".split(),
]


@contextmanager
def held_by(lock_file: Path, pid: int):
    """``lock_file`` locked as another process holding it would: a descriptor of its own, its pid
    written. Yields the descriptor."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, f"{pid}\n".encode())
    try:
        yield fd
    finally:
        os.close(fd)


def _train(run_dir: Path, capsys, *overrides: str) -> tuple[int, str]:
    code = main(["train", *TINY, "steps=2", *overrides, "--run-dir", str(run_dir)])
    return code, capsys.readouterr().err


# --------------------------------------------------------------------------- symlinks


@pytest.mark.parametrize("entry", ["checkpoints", "config.yaml", "samples", "checkpoints/step_3"])
def test_a_symlinked_entry_of_a_run_dir_is_refused_naming_it_and_nothing_is_written_through_it(tmp_path, capsys, entry):
    elsewhere = tmp_path / "elsewhere"
    for step in range(1, 6):  # someone else's checkpoints, which pruning would delete
        (elsewhere / f"step_{step}").mkdir(parents=True)
        (elsewhere / f"step_{step}" / "trainer_state.pt").write_text("theirs")
    (elsewhere / "notes.txt").write_text("their notes")
    before = sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*"))
    run_dir = tmp_path / "run"
    link = run_dir / entry
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere / ("notes.txt" if entry == "config.yaml" else "step_3" if "/" in entry else ""))

    code, err = _train(run_dir, capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"maopd train: {link} is a symbolic link (to {os.readlink(link)})")
    assert sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*")) == before
    assert (elsewhere / "notes.txt").read_text() == "their notes"
    assert not (run_dir / LOCK_FILE).exists()


def test_a_run_dir_that_is_itself_a_symlink_is_fine(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    with owning(tmp_path / "link"):
        assert (tmp_path / "real" / LOCK_FILE).is_file()
    assert not (tmp_path / "real" / LOCK_FILE).exists()


def test_the_links_a_logger_makes_in_its_own_directory_are_allowed_but_not_the_directory_as_a_link(tmp_path):
    """W&B's ``wandb/latest-run``, ``debug.log`` and its link to its cache are its own, not the run's."""
    run_dir, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    (outside / "core-debug.log").write_text("the logger's")
    logger = run_dir / LOGGER_DIRS[0]
    (logger / "offline-run-1" / "logs").mkdir(parents=True)
    (logger / "latest-run").symlink_to("offline-run-1")
    (logger / "debug.log").symlink_to("offline-run-1/logs/debug.log")
    (logger / "offline-run-1" / "logs" / "debug-core.log").symlink_to(outside / "core-debug.log")
    refuse_symlinks(run_dir)
    with owning(run_dir):
        start_over(run_dir)  # a fresh start removes the links, never what they point to
    assert not logger.exists() and (outside / "core-debug.log").read_text() == "the logger's"
    logger.parent.mkdir(exist_ok=True)
    logger.symlink_to(outside, target_is_directory=True)
    with pytest.raises(SymlinkInRunError, match="wandb is a symbolic link"):
        refuse_symlinks(run_dir)


# --------------------------------------------------------------------------- locks


def test_a_second_holder_is_refused_in_one_line_naming_the_pid(tmp_path, capsys):
    run_dir = tmp_path / "run"
    with held_by(run_dir / LOCK_FILE, 4242):
        code, err = _train(run_dir, capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"maopd train: run directory {run_dir} is in use by another process (pid 4242)")
    assert sorted(p.name for p in run_dir.iterdir()) == [LOCK_FILE]  # nothing of the refused run


def test_a_lock_left_by_a_killed_holder_is_taken_over_and_removed(tmp_path, dead_pid):
    (tmp_path / LOCK_FILE).write_text(f"{dead_pid}\n")  # its process is gone, so is its flock
    with owning(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with owning(tmp_path):  # this process holds it already: a no-op
            pass
        assert (tmp_path / LOCK_FILE).is_file()
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_lock_is_shared_only_through_the_descriptor_that_holds_it(tmp_path, monkeypatch):
    """The environment is a hint, never a proof: naming the holder's pid (what an older version
    trusted) or a descriptor of another open file is refused; the holding descriptor itself is let in."""
    lock = tmp_path / LOCK_FILE
    with held_by(lock, 4242) as holding:
        monkeypatch.setenv(LOCKS_ENV, json.dumps({str(lock): 4242}))  # the holder's pid
        with pytest.raises(LockedError, match="pid 4242"):
            with owning(tmp_path):
                pass
        other = os.open(lock, os.O_RDWR)  # the same file, but not the open file that holds the lock
        try:
            monkeypatch.setenv(LOCKS_ENV, json.dumps({str(lock): other}))
            with pytest.raises(LockedError, match="pid 4242"):
                with owning(tmp_path):
                    pass
        finally:
            os.close(other)
        monkeypatch.setenv(LOCKS_ENV, json.dumps({str(lock): holding}))
        with owning(tmp_path):
            pass
    assert lock.is_file()  # the holder's, left alone


def test_the_pipeline_holds_its_stage_directories_before_any_work(tmp_path):
    from maopd.pipeline.config import load_preset
    from maopd.pipeline.job import run_pipeline

    config = load_preset("smoke", [f"run_dir={tmp_path / 'run'}"])
    with held_by(tmp_path / "run" / "stage2_full" / LOCK_FILE, 4242):  # a stage run of its own there
        with pytest.raises(LockedError, match=f"run directory {tmp_path / 'run' / 'stage2_full'} .*pid 4242"):
            run_pipeline(config)
        assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["stage2_full"]


def test_a_cache_entry_is_built_once_while_another_builder_holds_it(tmp_path):
    entry = tmp_path / "cache" / "base-abc"
    built = []

    def other_builder():  # finishes the entry, then lets go
        time.sleep(0.5)
        entry.mkdir(parents=True)
        (entry / "done.json").write_text("{}")

    with held_by(entry.with_name("base-abc.lock"), 4242):
        builder = threading.Thread(target=other_builder)
        builder.start()
        waiter = threading.Thread(
            target=lambda: built.append(
                build_directory_atomically(entry, lambda out: built.append("again"), "done.json")
            )
        )
        waiter.start()
        builder.join()
        time.sleep(0.2)
        assert waiter.is_alive()  # waits for the holder, does not build a second copy
    waiter.join(timeout=10)
    assert built == [entry]


def test_an_eval_records_file_has_one_writer(tmp_path):
    from maopd.evaluation.runner import run_attempts

    out = tmp_path / "records.jsonl"
    with held_by(tmp_path / "records.jsonl.lock", 4242):
        with pytest.raises(LockedError, match=f"records file {out} is in use by another process \\(pid 4242\\)"):
            run_attempts(lambda questions, seeds: [], [], out, "m")


# --------------------------------------------------------------------------- real processes


@pytest.mark.slow
def test_a_child_process_works_under_the_lock_its_parent_hands_down(tmp_path):
    child = [
        sys.executable,
        "-c",
        f"from maopd.base.run_dir import owning\nwith owning({str(tmp_path)!r}): print('ok')",
    ]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    with owning(tmp_path):  # sets LOCKS_ENV in this process's environment, which children inherit
        inherited = {**environment, **os.environ}
        handed = subprocess.run(child, capture_output=True, text=True, env=inherited, pass_fds=handed_down_fds())
        # the same environment without the descriptor: what a process naming the holder can forge
        forged = subprocess.run(child, capture_output=True, text=True, env=inherited)
        stranger = subprocess.run(
            child, capture_output=True, text=True, env={k: v for k, v in environment.items() if k != LOCKS_ENV}
        )
    assert handed.returncode == 0 and handed.stdout == "ok\n", handed.stderr
    for refused in (forged, stranger):
        assert refused.returncode != 0 and f"pid {os.getpid()}" in refused.stderr


@pytest.mark.slow
def test_a_second_run_in_a_run_dir_in_use_is_refused_and_a_killed_holder_lets_go(tmp_path):
    run_dir = tmp_path / "run"
    environment = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "maopd.cli", "train", *TINY, "steps=500", "--run-dir", str(run_dir)]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment)
    try:
        deadline = time.monotonic() + 300
        while not (run_dir / "metrics.jsonl").is_file() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        second = subprocess.run(
            [*command[:-3], "steps=500", "optim.lr=0.05", "--run-dir", str(run_dir)],
            capture_output=True,
            text=True,
            env=environment,
        )
        assert first.poll() is None, "the first run ended before the second one started"
    finally:
        first.kill()
        first.wait()
    assert second.returncode == 2 and second.stderr.count("\n") == 1
    assert f"run directory {run_dir} is in use by another process (pid {first.pid})" in second.stderr
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1))  # one run's rows, each step once
    assert "lr: 0.0001" in (run_dir / "config.yaml").read_text()
    with owning(run_dir):  # the kernel let go of the killed holder's lock
        assert (run_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"
