"""The texts of PPO-ptx: a fixed set of language-modelling windows, sampled for every minibatch.

The update adds ``ptx.coef`` times their mean token negative log-likelihood to each PPO
minibatch's loss (``Trainer.update``). The pipeline writes π_0's own pretraining texts (passages
and restated sentences: where copying a value is learned) to ``RUN_DIR/ptx_texts.jsonl``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

from maopd.config import ConfigError
from training.sft import SFTExample, language_model_windows


def write_texts(texts: Sequence[str], path: str | Path) -> Path:
    """``texts`` as a ``.jsonl`` file of ``{"text": ...}`` lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    return path


def read_texts(path: str | Path) -> list[str]:
    """The texts of a ``.jsonl`` file; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"ptx.texts: {path} is not a file")
    texts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            text = json.loads(line)["text"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ConfigError(f"ptx.texts: {path} line {number} is not a {{\"text\": ...}} object") from exc
        if not isinstance(text, str):
            raise ConfigError(f"ptx.texts: {path} line {number}: \"text\" must be a string")
        texts.append(text)
    return texts


class PtxWindows:
    """The windows of ``ptx.texts``; ``sample`` draws a batch with the caller's generator."""

    def __init__(self, path: str | Path, tokenizer, seq_len: int, batch_size: int):
        self.windows = language_model_windows(read_texts(path), tokenizer, seq_len)
        if not self.windows:
            raise ConfigError(f"ptx.texts: {path} holds fewer than ptx.seq_len = {seq_len} tokens")
        self.batch_size = batch_size

    def sample(self, generator: torch.Generator) -> list[SFTExample]:
        rows = torch.randint(len(self.windows), (self.batch_size,), generator=generator)
        return [self.windows[int(i)] for i in rows]
