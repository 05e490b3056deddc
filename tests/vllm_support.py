"""What the vLLM tests share: finding the vLLM venv, and the tiny model they serve.

The vLLM venv is built by ``scripts/setup_vllm.sh``. Without it the vLLM tests skip with that
command as the reason, except where ``MAOPD_REQUIRE_VLLM=1`` (set by ``.ci/run``): there they
fail, so CI never passes without having run them.
"""

import os

import pytest

from maopd.agents.tiny_model import TinyModelConfig, build_tiny_lm, save_model
from maopd.agents.vllm_policy import vllm_python

# vLLM's CPU attention supports head sizes 32, 64, 80, …; the tiny default of 16 is not one.
VLLM_TINY_CONFIG = TinyModelConfig(head_dim=32)
TEXTS = ["The capital of France is Paris.", "Who wrote Hamlet? Shakespeare wrote Hamlet."]


def require_vllm_python():
    python = vllm_python()
    if python is None:
        reason = "no vLLM venv; create it with `bash scripts/setup_vllm.sh`"
        if os.environ.get("MAOPD_REQUIRE_VLLM") == "1":
            pytest.fail(f"MAOPD_REQUIRE_VLLM=1 but {reason}")
        pytest.skip(reason)
    return python


def save_tiny_model(directory):
    """The tiny Qwen3 model (vLLM-compatible head size) and tokenizer, saved in ``directory``."""
    model, tokenizer = build_tiny_lm(TEXTS, VLLM_TINY_CONFIG)
    save_model(model, tokenizer, directory)
    return model, tokenizer
