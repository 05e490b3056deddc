"""``maopd eval run --policy checkpoint``: device, dtype, token limit, retriever config and the
hf / vLLM / OpenAI-compatible backends; a run directory as --model; EvalSettings holds what is read."""

import dataclasses
import json
import re

import pytest
import torch

from maopd.agents.tiny_model import build_tiny_lm
from maopd.cli import main
from maopd.envs.synthwiki import load_default_world
from maopd.evaluation import solvers
from maopd.evaluation.manifest import ManifestEntry, question_hash
from maopd.evaluation.records import load_records
from maopd.evaluation.runner import EvalSettings, settings_file


@pytest.fixture(scope="module")
def world():
    return load_default_world()


@pytest.fixture
def run_dir(tmp_path, world):
    """A run directory as training writes it (checkpoints/step_N/model + trainer state)."""
    from tests.checkpoints import save_test_checkpoint

    model, tokenizer = build_tiny_lm([q.question for q in world.splits["test"][:50]], vocab_size=600)
    save_test_checkpoint(tmp_path / "run", 2, model, tokenizer, keep_last=2)
    return tmp_path / "run"


@pytest.fixture
def manifest_path(tmp_path, world):
    path = tmp_path / "manifest.jsonl"
    entries = [ManifestEntry("synthwiki", q, question_hash(q.question)) for q in world.splits["test"][:2]]
    path.write_text("".join(json.dumps(e.to_dict()) + "\n" for e in entries))
    return path


def test_checkpoint_run_takes_device_dtype_tokens_retriever_and_a_run_dir(
    run_dir, manifest_path, tmp_path, monkeypatch, world
):
    from maopd.envs.retrieval import factory
    from maopd.envs.retrieval.bm25 import BM25Retriever

    built, loaded = [], []
    monkeypatch.setattr(
        factory, "build_retriever", lambda config, corpus: built.append(config) or BM25Retriever(world.corpus)
    )
    from maopd.agents import tiny_model

    original = tiny_model.load_model

    def spy(source, dtype=torch.float32, device="cpu"):
        loaded.append((str(source), dtype, str(device)))
        return original(source, dtype, device)

    monkeypatch.setattr(tiny_model, "load_model", spy)
    out = tmp_path / "records.jsonl"
    assert (
        main(
            [
                "eval",
                "run",
                "--manifest",
                str(manifest_path),
                "--policy",
                "checkpoint",
                "--model",
                str(run_dir),
                "--device",
                "cpu",
                "--dtype",
                "bfloat16",
                "--max-new-tokens",
                "3",
                "--workflow",
                "cascade",
                "--retriever-set",
                "kind=bm25",
                "--retriever-set",
                "cache=false",
                "--attempts",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert loaded == [(str(run_dir / "checkpoints" / "step_2" / "model"), torch.bfloat16, "cpu")]
    assert [c.kind for c in built] == ["bm25"]
    records = load_records([out])
    assert len(records) == 2
    # the default method names the model, so another model's run never resumes this one's records
    assert {record.method for record in records} == {f"{run_dir}-cascade"}
    made_with = json.loads(settings_file(out).read_text())[f"{run_dir}-cascade"]
    assert made_with["model"] == str((run_dir / "checkpoints" / "step_2" / "model").resolve())
    for record in records:  # 3 new tokens per call at most, for at most 3 agents in each of ≤ 20 steps
        assert 0 < record.counters["output_tokens"] <= 3 * 3 * 20


def test_backends_reuse_the_training_side_policies(monkeypatch):
    from maopd.agents import vllm_policy
    from maopd.agents.openai_policy import OpenAIPolicy

    policy = solvers.model_policy(
        "served-model", "openai", temperature=0.3, top_p=0.9, max_new_tokens=77, base_url="http://127.0.0.1:9/v1"
    )
    assert isinstance(policy, OpenAIPolicy)
    assert (policy.config.model, policy.config.max_tokens, policy.config.temperature) == ("served-model", 77, 0.3)
    with pytest.raises(ValueError, match="--base-url"):
        solvers.model_policy("served-model", "openai")

    calls = []

    class FakeVLLM:
        def __init__(self, model_dir, sampling, seed=0, dtype="float32", **kwargs):
            calls.append((model_dir, sampling.max_new_tokens, dtype))

    monkeypatch.setattr(vllm_policy, "VLLMPolicy", FakeVLLM)
    solvers.model_policy("org/name", "vllm", max_new_tokens=64, dtype="bfloat16")
    assert calls == [("org/name", 64, "bfloat16")]
    with pytest.raises(ValueError, match="unknown backend"):
        solvers.model_policy("m", "tgi")


def test_eval_settings_hold_only_what_the_runner_reads():
    assert {f.name for f in dataclasses.fields(EvalSettings)} == {"attempts", "batch_size", "seed", "keep_trajectory"}


def test_a_model_that_is_nowhere_is_a_one_line_error(manifest_path, tmp_path, capsys):
    assert (
        main(
            [
                "eval",
                "run",
                "--manifest",
                str(manifest_path),
                "--policy",
                "checkpoint",
                "--model",
                str(tmp_path / "nothing" / "here"),
                "--out",
                str(tmp_path / "r.jsonl"),
            ]
        )
        == 2
    )
    assert re.fullmatch(r"maopd eval run: --model: .*no such model directory.*\n", capsys.readouterr().err)


def test_every_sampling_default_reads_the_one_definition():
    import inspect

    from maopd.agents.openai_policy import OpenAIPolicyConfig
    from maopd.agents.sampling import SamplingConfig
    from maopd.envs.policy import SamplingSettings
    from maopd.pipeline.config import EvalConfig

    settings = SamplingSettings()
    sampling = SamplingConfig()
    assert (sampling.temperature, sampling.top_p, sampling.max_new_tokens) == (0.6, 0.95, 512)
    assert dataclasses.asdict(settings).items() <= dataclasses.asdict(sampling).items()
    client = OpenAIPolicyConfig("http://127.0.0.1:1/v1", "m")
    assert (client.temperature, client.top_p, client.max_tokens) == (0.6, 0.95, 512)
    assert (EvalConfig().temperature, EvalConfig().top_p) == (0.6, 0.95)
    for solver in (solvers.model_policy, solvers.checkpoint_solver):
        parameters = inspect.signature(solver).parameters
        assert {name: parameters[name].default for name in ("temperature", "top_p", "max_new_tokens")} == {
            "temperature": 0.6,
            "top_p": 0.95,
            "max_new_tokens": 512,
        }
