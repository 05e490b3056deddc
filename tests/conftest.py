"""Fixtures shared by test modules; a module that defines a fixture of the same name uses its own."""

import pytest

from maopd.agents.tiny_model import TinyModelConfig, build_tiny_lm, build_tiny_model, save_model


@pytest.fixture(scope="module")
def lm():
    """A random tiny Qwen3 and its tokenizer, trained in-process on two sentences."""
    return build_tiny_lm(["The capital of France is Paris.", "Who wrote Hamlet? Shakespeare."])


@pytest.fixture(scope="module")
def model(lm):
    return lm[0]


@pytest.fixture(scope="module")
def tokenizer(lm):
    return lm[1]


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """π_0 (tiny, random) and a Teacher with the same tokenizer but other weights, on disk."""
    from maopd.training.config import ModelConfig
    from maopd.training.model_loading import build_tiny_policy

    root = tmp_path_factory.mktemp("models")
    pi0, tokenizer = build_tiny_policy(ModelConfig())
    save_model(pi0, tokenizer, root / "pi0")
    save_model(build_tiny_model(tokenizer, TinyModelConfig(seed=7)), tokenizer, root / "teacher")
    return root


@pytest.fixture(scope="session")
def smoke_model(tmp_path_factory):
    """π_0 of the smoke config, built through the CLI (once per session: tests/training/test_sft.py
    and the gates test read it)."""
    from maopd.cli import main

    out = tmp_path_factory.mktemp("smoke") / "model"
    assert main(["sft", "--smoke", "--out", str(out)]) == 0
    return out


@pytest.fixture
def dead_pid():
    """A process id no process can hold: above Linux's PID_MAX_LIMIT (2**22), so no subprocess is needed."""
    return 2**22 + 1
