"""A model directory is checked before use: sizes within bounds, every tensor there with its shape and a
floating-point dtype, finite weights, a chat template the sandbox renders; each refusal is one line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from maopd.agents.model_files import ModelFileError, check_model_dir
from maopd.agents.tiny_model import load_model, save_model


@pytest.fixture(scope="module")
def saved(lm, tmp_path_factory):
    return save_model(*lm, tmp_path_factory.mktemp("model") / "m")


def _copy(saved: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "m"
    copy.mkdir()
    for file in saved.iterdir():
        (copy / file.name).write_bytes(file.read_bytes())
    return copy


def _edit_weights(model_dir: Path, edit) -> None:
    tensors = load_file(model_dir / "model.safetensors")
    edit(tensors)
    save_file(tensors, model_dir / "model.safetensors")


def _edit_config(model_dir: Path, **changes) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps(config | changes))


def test_a_saved_model_passes(saved):
    check_model_dir(saved)
    load_model(saved)


# Weights that load without complaint from torch but are not the model config.json describes.
WEIGHT_DEFECTS = [
    (lambda t: t.pop("model.embed_tokens.weight"), "model.embed_tokens.weight is missing"),
    (lambda t: t.update({k: v.to(torch.int32) for k, v in t.items()}), "is stored as I32"),
    (
        lambda t: t.update({"model.norm.weight": torch.ones(3)}),
        r"model.norm.weight has shape \[3\]; config.json implies \[64\]",
    ),
]
WEIGHT_DEFECT_IDS = ["missing-embeddings", "int32", "wrong-shape"]


@pytest.mark.parametrize("edit, named", WEIGHT_DEFECTS, ids=WEIGHT_DEFECT_IDS)
def test_weights_that_are_not_the_configured_model_are_refused(saved, tmp_path, edit, named):
    model_dir = _copy(saved, tmp_path)
    _edit_weights(model_dir, edit)
    with pytest.raises(ModelFileError, match=named):
        check_model_dir(model_dir)


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"hidden_size": 1e6}, "hidden_size: must be a positive integer, got 1000000.0"),
        ({"num_hidden_layers": 200000}, "num_hidden_layers: 200,000 is over the bound .*MAOPD_LIMIT_LAYERS"),
        ({"vocab_size": 10**9}, "vocab_size: 1,000,000,000 is over the bound .*MAOPD_LIMIT_VOCABULARY"),
    ],
    ids=["float-hidden", "layers", "vocabulary"],
)
def test_sizes_past_their_bound_are_refused_before_any_allocation(saved, tmp_path, changes, named):
    model_dir = _copy(saved, tmp_path)
    _edit_config(model_dir, **changes)
    start = time.perf_counter()
    with pytest.raises(ModelFileError, match=named):
        check_model_dir(model_dir)
    assert time.perf_counter() - start < 10  # refused, not built


def test_a_bound_is_raised_by_its_environment_variable(saved, tmp_path, monkeypatch):
    model_dir = _copy(saved, tmp_path)
    _edit_config(model_dir, num_hidden_layers=600)
    with pytest.raises(ModelFileError, match="MAOPD_LIMIT_LAYERS"):
        check_model_dir(model_dir)
    monkeypatch.setenv("MAOPD_LIMIT_LAYERS", "1000")
    with pytest.raises(ModelFileError, match="describes no model transformers can build"):  # past the bound
        check_model_dir(model_dir)


def test_non_finite_weights_are_refused_at_load(saved, tmp_path):
    model_dir = _copy(saved, tmp_path)
    _edit_weights(model_dir, lambda t: t["model.embed_tokens.weight"].fill_(float("nan")))
    with pytest.raises(ModelFileError, match="model.embed_tokens.weight holds non-finite values"):
        load_model(model_dir)


def test_a_chat_template_the_sandbox_refuses_is_one_error(saved, tmp_path):
    model_dir = _copy(saved, tmp_path)
    (model_dir / "chat_template.jinja").write_text("{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ModelFileError, match="its chat template does not render \\(SecurityError"):
        load_model(model_dir)


def test_eval_run_refuses_a_model_of_200000_layers_in_one_line(saved, tmp_path):
    model_dir = _copy(saved, tmp_path)
    _edit_config(model_dir, num_hidden_layers=200000)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(
        json.dumps({"dataset": "d", "id": "1", "question": "q?", "golden_answers": ["a"], "hash": "h"}) + "\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "maopd.cli", "eval", "run", "--manifest", str(manifest), "--policy", "checkpoint"]
        + ["--model", str(model_dir), "--out", str(tmp_path / "r.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "num_hidden_layers: 200,000 is over the bound" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def _as_bin(model_dir: Path, edit=lambda tensors: None, shards: int = 1) -> Path:
    """``model_dir`` with its weights as ``pytorch_model.bin`` (torch.save of the state dict, as
    transformers wrote them before safetensors), changed by ``edit``; with ``shards`` > 1, as the
    shards of a ``pytorch_model.bin.index.json``."""
    tensors = load_file(model_dir / "model.safetensors")
    edit(tensors)
    (model_dir / "model.safetensors").unlink()
    if shards == 1:
        torch.save(tensors, model_dir / "pytorch_model.bin")
        return model_dir
    names, weight_map = sorted(tensors), {}
    for shard in range(shards):
        file = f"pytorch_model-{shard + 1:05d}-of-{shards:05d}.bin"
        part = names[shard::shards]
        torch.save({name: tensors[name] for name in part}, model_dir / file)
        weight_map |= dict.fromkeys(part, file)
    (model_dir / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return model_dir


def test_bin_weights_pass_and_load(saved, tmp_path):
    model_dir = _as_bin(_copy(saved, tmp_path))
    check_model_dir(model_dir)
    model, _ = load_model(model_dir)
    assert torch.equal(model.model.norm.weight, load_file(saved / "model.safetensors")["model.norm.weight"])


@pytest.mark.parametrize("edit, named", WEIGHT_DEFECTS, ids=WEIGHT_DEFECT_IDS)
@pytest.mark.parametrize("shards", [1, 2], ids=["one-file", "sharded"])
def test_bin_weights_that_are_not_the_configured_model_are_refused(saved, tmp_path, edit, named, shards):
    model_dir = _as_bin(_copy(saved, tmp_path), edit, shards)
    with pytest.raises(ModelFileError, match=named):
        check_model_dir(model_dir)


def test_a_truncated_or_missing_bin_file_is_named(saved, tmp_path):
    (tmp_path / "truncated").mkdir()
    (tmp_path / "sharded").mkdir()
    model_dir = _as_bin(_copy(saved, tmp_path / "truncated"))
    weights = model_dir / "pytorch_model.bin"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelFileError, match=r"pytorch_model.bin: unreadable \(.*; the weights are damaged") as refused:
        check_model_dir(model_dir)
    assert "\n" not in str(refused.value)
    sharded = _as_bin(_copy(saved, tmp_path / "sharded"), shards=2)
    (sharded / "pytorch_model-00002-of-00002.bin").unlink()
    with pytest.raises(ModelFileError, match="pytorch_model-00002-of-00002.bin is missing"):
        check_model_dir(sharded)


def test_a_bin_file_that_would_run_code_is_refused_unrun(saved, tmp_path):
    marker = tmp_path / "ran"

    class Planted:
        def __reduce__(self):
            return (marker.write_text, ("the weights ran code",))

    model_dir = _as_bin(_copy(saved, tmp_path), lambda t: t.update({"model.norm.weight": Planted()}))
    with pytest.raises(ModelFileError, match="holds objects other than tensors, which are not loaded") as refused:
        check_model_dir(model_dir)
    assert not marker.exists()
    assert "weights_only" not in str(refused.value)  # torch's advice to unpickle is not passed on


def test_the_bounds_admit_qwen3_4b():
    """(Every config in configs/ loads within the bounds: tests/maopd/test_config_tree.py.)"""
    from maopd.agents.model_files import config_problem

    qwen3_4b = {
        "num_hidden_layers": 36,
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 151936,
        "max_position_embeddings": 262144,
    }
    assert config_problem(qwen3_4b) is None
