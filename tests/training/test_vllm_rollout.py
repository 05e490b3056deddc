"""``rollout.engine: vllm``: Stage I and Stage II steps on a vLLM engine, records token-exact with
what the engine produced, the weight sync and the check that catches a missed one, resume, and a
worker that ends with its trainer.

Starting an engine takes a while on a CPU, so the slow tests share runs: one Stage I run of two
steps, resumed once by the test of the sync check.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from maopd.agents.vllm_policy import VLLMPolicy, VLLMWorkerError
from maopd.base.config import ConfigError
from maopd.cli import main
from maopd.pipeline.config import load_preset, stage_config
from maopd.training.checkpoint import latest_checkpoint
from maopd.training.config import build_config, load_config
from maopd.training.model_loading import load_policy_model
from maopd.training.rollout_engine import EngineSyncError
from maopd.training.run_logging import read_metrics
from maopd.training.trainer import StageRun
from tests.vllm_support import require_vllm_python, save_tiny_model

ROOT = Path(__file__).resolve().parents[2]
# A learning rate large enough that one step moves the log-probs far beyond the sync tolerance.
VLLM = [
    "rollout.engine=vllm",
    "model.tiny.head_dim=32",
    "rollout.max_new_tokens=8",
    "env.max_steps=3",
    "optim.lr=1e-2",
    "logging.progress=false",
    "logging.tensorboard=false",
]


def stage1_config(run_dir: Path, *overrides: str):
    return load_config(ROOT / "configs/tiny_cpu_stage1.yaml", [f"run_dir={run_dir}", *VLLM, *overrides])


def test_the_old_key_decode_engine_still_loads_and_cannot_be_set_twice():
    assert build_config({"stage": "stage1", "rollout": {"decode_engine": "chunked"}}).rollout.engine == "chunked"
    assert build_config({"stage": "stage1"}, ["rollout.decode_engine=chunked"]).rollout.engine == "chunked"
    with pytest.raises(ConfigError, match="rollout.decode_engine: is the old name of rollout.engine"):
        build_config({"stage": "stage1", "rollout": {"decode_engine": "chunked", "engine": "continuous"}})


def test_engine_vllm_is_refused_up_front_without_the_venv_or_with_what_it_cannot_honour(monkeypatch):
    monkeypatch.setattr("maopd.training.config.vllm_python", lambda: None)
    with pytest.raises(ConfigError, match=r"rollout.engine: .*`bash scripts/setup_vllm.sh`$"):
        build_config({"stage": "stage1"}, ["rollout.engine=vllm", "model.tiny.head_dim=32"])
    monkeypatch.setattr("maopd.training.config.vllm_python", lambda: Path(sys.executable))
    for setting, key in [
        ("rollout.top_p=0.9", "rollout.top_p"),
        ("distributed.fsdp=true", "distributed.fsdp"),
        ("rollout.decode_compile=reduce-overhead", "rollout.decode_compile"),
        ("model.tiny.head_dim=16", "model.tiny.head_dim"),
    ]:
        overrides = ["rollout.engine=vllm", "model.tiny.head_dim=32", setting]
        with pytest.raises(ConfigError, match=f"^{key}: "):
            build_config({"stage": "stage1"}, overrides)


def test_the_pipeline_runs_every_stage_on_the_engine_its_stages_section_names(monkeypatch):
    monkeypatch.setattr("maopd.training.config.vllm_python", lambda: Path(sys.executable))
    with pytest.raises(ConfigError, match="^base_model.head_dim: .*set base_model.head_dim=32$"):
        load_preset("smoke", ["stages.rollout.engine=vllm", "base_model.head_dim=16"])
    config = load_preset("smoke", ["stages.rollout.engine=vllm"])  # the smoke π_0's head size is one vLLM serves
    for stage, variant in config.stage_runs():
        teacher = Path("stage1") if stage == "stage2" else None
        assert stage_config(config, stage, variant, Path("pi0"), teacher).rollout.engine == "vllm"


class EngineCalls:
    """What the engine was asked and answered: prompt ids -> the candidates it returned."""

    def __init__(self, monkeypatch):
        self.answers: dict[tuple[int, ...], list] = {}
        generate = VLLMPolicy.generate

        def spy(policy, prompt_ids_batch, *args, **kwargs):
            results = generate(policy, prompt_ids_batch, *args, **kwargs)
            for prompt, candidates in zip(prompt_ids_batch, results):
                self.answers.setdefault(tuple(prompt), []).extend(candidates)
            return results

        monkeypatch.setattr(VLLMPolicy, "generate", spy)

    def assert_token_exact(self, batch) -> None:
        """Every generated run of every sequence is a candidate the engine returned for exactly the
        ids before it, with its log-probs: nothing was decoded and re-encoded on the way."""
        assert batch.sequences
        for sequence in batch.sequences:
            ids, mask = sequence.input_ids, sequence.response_mask
            starts = [i for i in range(len(ids)) if mask[i] and not mask[i - 1]]
            assert starts
            for start in starts:
                end = next((i for i in range(start, len(ids)) if not mask[i]), len(ids))
                candidates = self.answers[tuple(ids[:start])]
                matches = [c for c in candidates if c.token_ids == ids[start:end]]
                assert matches, "a generated run is not what the engine returned for its prompt"
                assert matches[0].logprobs == sequence.old_logprobs[start:end]


@pytest.fixture(scope="module")
def stage1_run(tmp_path_factory):
    """Two Stage I steps on the engine: (run directory, each step's metrics, engine calls, last batch)."""
    require_vllm_python()
    run_dir = tmp_path_factory.mktemp("vllm") / "stage1"
    with pytest.MonkeyPatch.context() as monkeypatch:
        calls = EngineCalls(monkeypatch)
        with StageRun(stage1_config(run_dir, "steps=2")) as run:
            metrics = [run.step(), run.step()]
            batch = run.trainer.last_batch
    return run_dir, metrics, calls, batch


@pytest.mark.slow
def test_stage1_steps_on_the_engine_keep_its_tokens_and_sync_its_weights(stage1_run):
    run_dir, metrics, calls, batch = stage1_run
    calls.assert_token_exact(batch)
    for step in metrics:
        # π_old is what the engine recorded; the trainer's re-score of the same tokens agrees
        assert 0 < step["rollout/engine_logprob_gap_max"] < 1e-3
        assert step["rollout/engine_logprob_gap_mean"] <= step["rollout/engine_logprob_gap_max"]
        assert step["rollout/engine_probe_gap"] < 1e-3 and step["time/weight_sync_s"] > 0
    assert [row["step"] for row in read_metrics(run_dir)] == [1, 2]
    assert latest_checkpoint(run_dir).name == "step_2"
    assert (run_dir / "rollout_engine" / "engine.log").stat().st_size > 0
    assert (run_dir / "rollout_engine" / "model" / "config.json").is_file()


@pytest.mark.slow
def test_a_resumed_engine_serves_the_checkpoint_and_the_sync_check_catches_a_skipped_sync(
    stage1_run, tmp_path, monkeypatch
):
    run_dir, *_ = stage1_run
    resumed = tmp_path / "resumed"  # a copy: the fixture's run is shared by the other tests
    checkpoint = latest_checkpoint(run_dir)
    shutil.copytree(checkpoint, resumed / "checkpoints" / checkpoint.name)
    (resumed / "checkpoints" / "latest").write_text(f"{checkpoint.name}\n")
    shutil.copy(run_dir / "config.yaml", resumed / "config.yaml")  # a run resumes only under its config
    config = stage1_config(resumed, "steps=3")
    with StageRun(config, resume=True) as run:
        trainer = run.trainer
        assert trainer.step == 2
        tolerance = trainer.engine.tolerance
        # the engine serves the restored weights (checked at start), not π_0's
        assert trainer.engine.probe_gap(trainer.model) <= tolerance
        pi0, _ = load_policy_model(config.model, trainer.device)
        assert trainer.engine.probe_gap(pi0) > 10 * tolerance

        monkeypatch.setattr(VLLMPolicy, "sync_weights", lambda policy, model: None)
        before = copy.deepcopy(trainer.model)
        with pytest.raises(EngineSyncError) as caught:
            run.step()
        message = str(caught.value)
        assert "\n" not in message and "after the weight sync of step 3" in message
        assert str(resumed / "rollout_engine" / "engine.log") in message
        assert trainer.engine.probe_gap(trainer.model) > 10 * tolerance  # the update moved the weights
        assert trainer.engine.probe_gap(before) <= tolerance  # and the engine kept the old ones
        monkeypatch.undo()
        assert trainer.engine.sync(trainer.model, 3)["rollout/engine_probe_gap"] <= tolerance

        # a dead worker: one line naming its log, not a dump of it
        os.kill(trainer.policy.worker_pid, signal.SIGKILL)
        with pytest.raises(VLLMWorkerError) as caught:
            trainer.engine.probe_gap(trainer.model)
        message = str(caught.value)
        assert "\n" not in message and message.endswith(str(resumed / "rollout_engine" / "engine.log"))


@pytest.mark.slow
def test_a_stage2_step_on_the_engine_from_the_command_line(stage1_run, tmp_path):
    run_dir, *_ = stage1_run
    stage2 = tmp_path / "stage2"
    command = ["train", "--config", str(ROOT / "configs/tiny_cpu_stage2.yaml"), f"run_dir={stage2}"]
    assert main([*command, f"teacher.path={run_dir}", "steps=1", *VLLM, "env.max_steps=5"]) == 0
    (row,) = read_metrics(stage2)
    assert "reward/leader" in row and row["rollout/engine_logprob_gap_max"] < 1e-3
    assert row["rollout/engine_probe_gap"] < 1e-3


@pytest.mark.slow
def test_the_worker_ends_with_the_process_that_started_it(tmp_path):
    """Its parent is killed while the engine loads: no pipe closes in time to tell it, the watchdog does."""
    python = require_vllm_python()
    save_tiny_model(tmp_path / "model")
    parent = f"""
import os, sys, threading, time
from maopd.agents.vllm_policy import VLLMPolicy
kwargs = {{"python": {str(python)!r}, "log_path": {str(tmp_path / "engine.log")!r}}}
threading.Thread(target=VLLMPolicy, args=({str(tmp_path / "model")!r},), kwargs=kwargs, daemon=True).start()
while True:
    found = [p for task in os.listdir(f"/proc/{{os.getpid()}}/task")
             for p in open(f"/proc/{{os.getpid()}}/task/{{task}}/children").read().split()]
    if found:
        print(found[0], flush=True)
        os.kill(os.getpid(), 9)
    time.sleep(0.1)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, env=env, timeout=300)
    worker = int(done.stdout.split()[0])
    deadline = time.monotonic() + 60
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _alive(worker)
    # it ended before its engine started (without the watchdog it would load, then read the closed input)
    assert "init engine" not in (tmp_path / "engine.log").read_text()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (an exited process that nobody has reaped yet does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_the_smoke_job_runs_every_stage_on_the_engine(tmp_path):
    require_vllm_python()
    run_dir = tmp_path / "smoke"
    assert main(["train", "--preset", "smoke", "--run-dir", str(run_dir), "rollout.engine=vllm"]) == 0
    for stage in ("stage1", "stage2_full", "single"):
        last = read_metrics(run_dir / stage)[-1]
        assert "time/weight_sync_s" in last and "rollout/engine_logprob_gap_max" in last, stage
        assert (run_dir / stage / "rollout_engine" / "engine.log").is_file()
    summary = (run_dir / "eval" / "summary.json").read_text()
    assert "MultiAgent-OPD" in summary and "Search-R1 (single agent + RL)" in summary
