"""Fixtures shared by test modules; a module that defines a fixture of the same name uses its own."""

import pytest

from agents.tiny_model import build_tiny_lm


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
