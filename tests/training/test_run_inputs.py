"""A training run records its input files by content (``RUN_DIR/inputs.json``), and a resume whose
model, Teacher, corpus, questions or PPO-ptx data holds other content than the recorded one is refused
in one line naming the file; an unchanged input, moved or not, resumes."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from maopd.base.config import ConfigError
from maopd.base.fingerprint import content_fingerprint
from maopd.base.run_dir import CONFIG_FILE, write_record
from maopd.cli import main
from maopd.training.config import build_config
from maopd.training.run_inputs import INPUTS_FILE, checked_inputs, input_files, record_inputs
from maopd.training.run_logging import read_metrics

REPO = Path(__file__).resolve().parents[2]
TINY_RUN = [
    "env.max_steps=3",
    "rollout.max_new_tokens=8",
    "logging.progress=false",
    "logging.tensorboard=false",
]


def _corpus(path: Path, capital: str = "Paris") -> Path:
    rows = [{"id": "0", "contents": f"France\n{capital} is the capital of France."}, {"id": "1", "contents": "B\nb."}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _rewrite_weights(model_dir: Path) -> None:
    """The same tensors, names and shapes, with other values: a model rewritten in place."""
    tensors = load_file(model_dir / "model.safetensors")
    tensors["model.norm.weight"] = tensors["model.norm.weight"] + 1
    save_file(tensors, model_dir / "model.safetensors", metadata={"format": "pt"})


@pytest.fixture
def inputs(models, tmp_path):
    """A copy of π_0 and of the Teacher, a corpus and PPO-ptx examples, and a Stage II config on them."""
    for name in ("pi0", "teacher"):
        shutil.copytree(models / name, tmp_path / name)
    ptx = tmp_path / "ptx.jsonl"
    ptx.write_text(json.dumps({"text": "Paris is the capital of France."}) + "\n")
    (tmp_path / "run").mkdir()  # as the run holds it
    settings = {
        "stage": "stage2",
        "run_dir": str(tmp_path / "run"),
        "model": {"path": str(tmp_path / "pi0")},
        "teacher": {"path": str(tmp_path / "teacher")},
        "env": {"corpus": str(_corpus(tmp_path / "corpus.jsonl"))},
        "ptx": {"coef": 0.1, "data": str(ptx)},
    }
    return tmp_path, build_config(settings)


def test_a_run_records_each_input_by_content(inputs):
    root, config = inputs
    record_inputs(config.run_dir, checked_inputs(config, resuming=False))
    recorded = json.loads((Path(config.run_dir) / INPUTS_FILE).read_text())
    assert sorted(recorded) == ["corpus", "model", "ptx_data", "teacher"]
    for name, path in (("model", "pi0"), ("teacher", "teacher"), ("corpus", "corpus.jsonl"), ("ptx_data", "ptx.jsonl")):
        assert recorded[name] == {"file": str(root / path), "sha256": content_fingerprint(root / path)}
    checked_inputs(config, resuming=True)  # unchanged: resumes


def test_unused_and_absent_inputs_are_not_recorded(models, tmp_path):
    config = build_config({"stage": "stage1", "run_dir": str(tmp_path / "run"), "ptx": {"data": "unused.jsonl"}})
    assert input_files(config) == {"model": None, "corpus": None, "questions": None, "ptx_data": None}
    stage1 = build_config({"stage": "stage1", "model": {"path": str(models / "pi0")}, "teacher": {"path": "t"}})
    assert "teacher" not in input_files(stage1)  # Stage I loads no Teacher


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda root: _corpus(root / "corpus.jsonl", "Rome"), "corpus.jsonl: the corpus holds other content"),
        (lambda root: _rewrite_weights(root / "pi0"), "pi0: the model holds other content"),
        (lambda root: _rewrite_weights(root / "teacher"), "teacher: the teacher holds other content"),
        (lambda root: (root / "ptx.jsonl").write_text('{"text": "Rome."}\n'), "ptx.jsonl: the ptx data holds other"),
    ],
    ids=["corpus", "model", "teacher", "ptx"],
)
def test_a_resume_refuses_an_input_rewritten_in_place(inputs, change, named):
    root, config = inputs
    record_inputs(config.run_dir, checked_inputs(config, resuming=False))
    change(root)
    with pytest.raises(ConfigError, match=named) as refused:
        checked_inputs(config, resuming=True)
    assert "\n" not in str(refused.value)
    assert "restore it, or train in another run_dir" in str(refused.value)


def test_an_input_moved_but_unchanged_resumes(inputs):
    """By content, not by path (a run directory and its inputs copied elsewhere)."""
    root, config = inputs
    record_inputs(config.run_dir, checked_inputs(config, resuming=False))
    shutil.move(root / "corpus.jsonl", root / "moved.jsonl")
    moved = dataclasses.replace(config, env=dataclasses.replace(config.env, corpus=str(root / "moved.jsonl")))
    checked_inputs(moved, resuming=True)


def test_a_resume_without_a_record_of_an_input_is_refused(inputs):
    root, config = inputs
    with pytest.raises(ConfigError, match="no fingerprint recorded"):
        checked_inputs(config, resuming=True)


def test_the_record_is_redacted_as_config_yaml_is(models, tmp_path):
    secret = "sk-hostileSECRET0123456789abcdef"
    corpus = _corpus(tmp_path / secret / "corpus.jsonl")
    config = build_config({"stage": "stage1", "run_dir": str(tmp_path / "run"), "env": {"corpus": str(corpus)}})
    Path(config.run_dir).mkdir()
    record_inputs(config.run_dir, checked_inputs(config, resuming=False))
    write_record(config, config.run_dir)
    for record in (INPUTS_FILE, CONFIG_FILE):
        text = (Path(config.run_dir) / record).read_text()
        assert secret not in text and "sk-***" in text, record


@pytest.mark.slow
def test_maopd_train_resumes_only_from_the_inputs_that_made_the_run(models, tmp_path, capsys):
    """A one-step run on a model directory and a corpus file; its corpus and then its model rewritten
    in place: each resume is one line naming the file; restored, the run resumes."""
    shutil.copytree(models / "pi0", tmp_path / "pi0")
    corpus = _corpus(tmp_path / "corpus.jsonl")
    config = str(REPO / "configs" / "tiny_cpu_stage1.yaml")
    run = ["train", "--config", config, *TINY_RUN, f"model.path={tmp_path / 'pi0'}", f"env.corpus={corpus}"]
    run_dir = ["--run-dir", str(tmp_path / "run")]
    assert main([*run, "steps=1", *run_dir]) == 0
    capsys.readouterr()
    original = corpus.read_bytes()
    _corpus(corpus, "Rome")
    assert main([*run, "steps=2", *run_dir]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"maopd train: {corpus}: the corpus holds other content"), err
    corpus.write_bytes(original)
    weights = (tmp_path / "pi0" / "model.safetensors").read_bytes()
    _rewrite_weights(tmp_path / "pi0")
    assert main([*run, "steps=2", *run_dir]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"maopd train: {tmp_path / 'pi0'}: the model holds other"), err
    (tmp_path / "pi0" / "model.safetensors").write_bytes(weights)
    assert sorted(json.loads((tmp_path / "run" / INPUTS_FILE).read_text())) == ["corpus", "model"]
    assert main([*run, "steps=2", *run_dir]) == 0
    assert [row["step"] for row in read_metrics(tmp_path / "run")] == [1, 2]
