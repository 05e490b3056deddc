"""The data of PPO-ptx: fixed training examples, sampled for every PPO minibatch.

The update adds ``ptx.coef`` times their mean token negative log-likelihood to each minibatch's
loss (``Trainer.update``). ``ptx.data`` is a ``.jsonl`` file whose lines are either

* ``{"text": ...}``: plain text, cut into ``ptx.seq_len``-token windows (language modelling), or
* ``{"messages": [...], "role": ...}``: one model call as a chat, with the loss on the assistant
  turns exactly as in SFT (``maopd.training.sft.encode_call``); calls over ``ptx.seq_len`` are skipped.

The pipeline writes the demonstrations π_0 was fine-tuned on (``RUN_DIR/ptx_data.jsonl``), so
the term anchors what SFT taught (following formats, copying values from passages) while the
advantages move the rest; ``ptx_source: pretraining`` writes its pretraining passages instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from maopd.base.atomic import write_text_atomically
from maopd.base.config import ConfigError
from maopd.base.json_files import iter_json_lines, json_text
from maopd.training.sft import SFTExample, encode_call, language_model_windows


def write_rows(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """``rows`` (``{"text": ...}`` or ``{"messages": ..., "role": ...}``) as a ``.jsonl`` file,
    written whole or not at all (a run interrupted while writing must not resume on half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, "".join(json_text(row, str(path), ensure_ascii=False) + "\n" for row in rows))
    return path


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``ptx.data`` file; errors name the file and line."""
    rows = []
    for where, row in iter_json_lines(path, ConfigError, "ptx.data file"):
        valid_text = isinstance(row, dict) and isinstance(row.get("text"), str)
        valid_chat = isinstance(row, dict) and isinstance(row.get("messages"), list)
        if not (valid_text or valid_chat):
            raise ConfigError(f'ptx.data: {where} has neither a "text" string nor a "messages" list')
        rows.append(row)
    return rows


class PtxData:
    """The examples of ``ptx.data``; ``sample`` draws ``batch_size`` of them with the caller's generator.

    Calls of the roles in ``skip_roles`` are left out: the trainer passes the roles whose PPO loss
    weight is 0 ("w/o direct Searcher supervision"), so no term gives such a role's tokens gradient.
    """

    def __init__(self, path: str | Path, tokenizer, seq_len: int, batch_size: int, skip_roles: Sequence[str] = ()):
        rows = read_rows(path)
        texts = [row["text"] for row in rows if "text" in row]
        chats = [
            encode_call(tokenizer, row["messages"], row.get("role", ""))
            for row in rows
            if "messages" in row and row.get("role") not in skip_roles
        ]
        self.examples = language_model_windows(texts, tokenizer, seq_len) + [c for c in chats if len(c) <= seq_len]
        if not self.examples:
            raise ConfigError(f"ptx.data: {path} gives no example of at most ptx.seq_len = {seq_len} tokens")
        self.batch_size = batch_size

    def sample(self, generator: torch.Generator) -> list[SFTExample]:
        rows = torch.randint(len(self.examples), (self.batch_size,), generator=generator)
        return [self.examples[int(i)] for i in rows]
