"""The torchrun learner: 2 gloo processes on CPU take the same step as one process.

Each launch is real: ``torch.distributed.run`` starts two ranks of ``maopd train`` on
127.0.0.1, they roll out their halves of the batch, all-reduce the loss denominator and the
gradients (or shard the model with FSDP2), and rank 0 writes the checkpoint. The updated weights
are compared with a one-process run of the same config.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from maopd.agents.tiny_model import load_model
from maopd.base.config import ConfigError
from maopd.training.config import build_config
from maopd.training.distributed import DistributedConfig, DistributedContext
from maopd.training.ptx import write_rows
from maopd.training.run_logging import read_metrics
from maopd.training.trainer import Trainer, train_stage

REPO = Path(__file__).resolve().parents[2]
LAUNCH_TIMEOUT_S = 240
LR = 1e-3
# Adam's first steps move a weight by about lr·g/(|g| + 1e-8): for gradients near 1e-8 the float
# rounding of summing the ranks' gradients in another order shows up as a few % of lr.
ADAM_ATOL = 0.05 * LR
# Where a gradient sum is itself rounding noise its sign can flip, and Adam's first step then moves
# that weight by ±lr in either run, so a rare entry is far outside ADAM_ATOL. Each
# entry still lies within 2·lr per step, and all but 1 in 10,000 (rounded up) within ADAM_ATOL.
ROUNDING_OUTLIER_RATE = 1e-4


def assert_same_adam_step(got: dict, expected: dict, atol: float, steps: int = 1) -> None:
    for name, reference in expected.items():
        difference = (got[name] - reference).abs()
        assert float(difference.max()) <= 2 * LR * steps * (1 + 1e-3), name
        outliers = int((difference > atol).sum())
        assert outliers <= math.ceil(difference.numel() * ROUNDING_OUTLIER_RATE), (name, outliers)


def stage2_data(models: Path, run_dir: Path, **distributed) -> dict:
    """Stage II with OPD from a Teacher; B = 4 so each of 2 ranks rolls out 2 questions."""
    return {
        "stage": "stage2",
        "steps": 1,
        "run_dir": str(run_dir),
        "model": {"path": str(models / "pi0"), "device": "cpu"},
        "teacher": {"path": str(models / "teacher")},
        "env": {"max_steps": 6, "num_searchers": 2, "num_candidates": 2, "force_finish": True},  # every role trains
        "rollout": {"batch_size": 4, "group_size": 2, "max_new_tokens": 8, "max_questions": 16},
        "optim": {"minibatches": 1, "micro_batch_size": 3, "lr": LR},
        "checkpoint": {"every": 1},
        "logging": {"tensorboard": False, "progress": False, "sample_every": 1},
        "distributed": distributed,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun_train(config_path: Path, nproc: int = 2) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        "-m",
        "maopd.cli",
        "train",
        "--config",
        str(config_path),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        command, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result


def weights(run_dir: Path, step: int = 1) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step_{step}" / "model" / "model.safetensors")


@pytest.fixture(scope="module")
def single_process_run(models, tmp_path_factory):
    return train_in_one_process(stage2_data(models, tmp_path_factory.mktemp("single") / "run"))


def train_in_one_process(data: dict) -> Path:
    """Train in this process with the ranks' thread count (torchrun runs them with
    OMP_NUM_THREADS=1): the matmul reduction order, and with it every sampled token, is the same."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_stage(build_config(data))
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.parametrize("fsdp", [False, True], ids=["replicated", "fsdp2"])
def test_two_gloo_ranks_take_the_single_process_step(models, tmp_path, single_process_run, fsdp):
    config_path = tmp_path / "stage2.yaml"
    run_dir = tmp_path / "run"
    config_path.write_text(yaml.safe_dump(stage2_data(models, run_dir, fsdp=fsdp)))
    torchrun_train(config_path)

    expected, got = weights(single_process_run), weights(run_dir)
    initial = load_file(models / "pi0" / "model.safetensors")
    assert expected.keys() == got.keys()
    moved = max(float((expected[name] - initial[name]).abs().max()) for name in expected)
    assert moved > 1e-4  # the step did change the weights, so the comparison means something
    assert_same_adam_step(got, expected, atol=ADAM_ATOL)

    # rank 0 alone wrote one metrics row, with the global loss and the same clipped gradient
    (one,), (two,) = read_metrics(single_process_run), read_metrics(run_dir)
    for name in ("loss/total", "optim/grad_norm", "leader/sequences", "answerer/sequences"):
        # abs: the loss is a small sum of terms of both signs, summed in another order per rank (the
        # weights above are the exact check; float32 order noise shows on the loss)
        assert two[name] == pytest.approx(one[name], rel=1e-4, abs=5e-5), name
    assert two["optim/updates"] == one["optim/updates"] == 1
    samples = (run_dir / "samples" / "step_1.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in samples] == [1, 1]


@pytest.mark.slow
def test_two_fsdp_ranks_with_ptx_and_dynamic_sampling_take_the_single_process_step(models, tmp_path):
    """PPO-ptx and a dynamic-sampling round under FSDP2 on 2 ranks. The ptx file holds one
    window, so every rank draws the same examples and the ranks' summed ptx gradient (each
    scaled by 1/world size) is the single process's; the random π_0 solves nothing, so both
    runs draw a second round, find no informative question, and train on their first round."""
    _, tokenizer = load_model(models / "pi0")
    text = "Minikas River is 2492 km long."
    ptx_file = write_rows([{"text": text}], tmp_path / "ptx.jsonl")
    settings = {
        "ptx": {"coef": 0.5, "data": str(ptx_file), "batch_size": 2, "seq_len": len(tokenizer.encode(text)) + 1}
    }

    def with_settings(data: dict) -> dict:
        data = {**data, **settings}
        data["rollout"] = {**data["rollout"], "dynamic_sampling_rounds": 1}
        return data

    config_path, run_dir = tmp_path / "stage2.yaml", tmp_path / "run"
    config_path.write_text(yaml.safe_dump(with_settings(stage2_data(models, run_dir, fsdp=True))))
    torchrun_train(config_path)
    reference = train_in_one_process(with_settings(stage2_data(models, tmp_path / "single")))

    # the clipped gradient is the single process's to float rounding, so the ptx term is counted once
    (one,), (two,) = read_metrics(reference), read_metrics(run_dir)
    assert two["optim/grad_norm"] == pytest.approx(one["optim/grad_norm"], rel=1e-5)
    # Adam's first step amplifies that rounding where a weight's gradient sum is near zero, to a
    # small fraction of a step of lr
    expected, got = weights(reference), weights(run_dir)
    assert_same_adam_step(got, expected, atol=2 * ADAM_ATOL)
    assert one["rollout/rounds"] == two["rollout/rounds"] == 2
    assert one["rollout/informative_fraction"] == two["rollout/informative_fraction"] == 0
    assert two["loss/ptx"] == pytest.approx(one["loss/ptx"], rel=1e-5)
    assert two["loss/total"] == pytest.approx(one["loss/total"], rel=1e-4, abs=5e-5)


@pytest.mark.slow
def test_two_ranks_resume_from_the_checkpoint_rank0_wrote(models, tmp_path):
    """Step 2 resumed on 2 ranks from the step-1 checkpoint rank 0 wrote equals step 2 resumed in
    one process from the same checkpoint (optimizer state, loader position and step seed all come
    from the checkpoint; that a resumed run equals an uninterrupted one is tested in one process
    in test_trainer_e2e). Both start from the same weights: a one-process step 1 differs from the
    ranks' in float rounding, which Adam's first step can turn into ±lr on a few weights and step
    2's sampling into other tokens (a change of the Teacher's batch size alone did that)."""
    config_path, run_dir = tmp_path / "stage2.yaml", tmp_path / "run"
    data = stage2_data(models, run_dir, fsdp=True)
    config_path.write_text(yaml.safe_dump(data))
    torchrun_train(config_path)
    shutil.copytree(run_dir, tmp_path / "single")
    config_path.write_text(yaml.safe_dump({**data, "steps": 2}))
    torchrun_train(config_path)

    reference = train_in_one_process({**stage2_data(models, tmp_path / "single"), "steps": 2})
    expected, got = weights(reference, 2), weights(run_dir, 2)
    assert_same_adam_step(got, expected, atol=ADAM_ATOL, steps=2)
    assert [row["step"] for row in read_metrics(run_dir)] == [1, 2]


def test_context_reads_torchrun_variables():
    assert DistributedContext.from_env({}) == DistributedContext(0, 1, 0)
    context = DistributedContext.from_env({"RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "1"})
    assert context.shard(list(range(8))) == [1, 4, 7] and not context.is_main
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        DistributedContext.from_env({"RANK": "2", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="RANK='x'"):
        DistributedContext.from_env({"RANK": "x"})


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"mixed_precision": "bfloat16"}, "distributed.mixed_precision"),
        ({"cpu_offload": True}, "distributed.cpu_offload"),
        ({"timeout_s": 0}, "distributed.timeout_s"),
        ({"backend": "mpi"}, "distributed.backend"),
    ],
)
def test_distributed_config_errors_name_the_field(models, tmp_path, settings, field):
    with pytest.raises(ConfigError, match=field):
        build_config(stage2_data(models, tmp_path / "run", **settings))


def test_fsdp_outside_torchrun_is_refused(models, tmp_path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    config = build_config(stage2_data(models, tmp_path / "run", fsdp=True))
    with pytest.raises(ConfigError, match="distributed.fsdp: launch with torchrun"):
        Trainer(config)


def test_defaults_are_one_plain_process():
    assert DistributedConfig() == DistributedConfig(fsdp=False, mixed_precision="none", cpu_offload=False)
