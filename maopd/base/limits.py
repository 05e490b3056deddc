"""Upper bounds on the sizes a config, a command line or a model's ``config.json`` may ask for.

A size past its bound is refused in one line, before anything is allocated, naming the bound and
how to raise it: ``rollout.batch_size=1000000000000`` would otherwise spend minutes building a
batch before running out of memory, and ``num_hidden_layers: 200000`` in a model's config.json
would build layers for as long. The bounds admit every config in ``configs/`` and the models the
project runs (Qwen3-4B: 36 layers, hidden size 2560, a vocabulary of 151,936) with room to spare;
a larger model or run raises one with the environment variable ``MAOPD_LIMIT_<NAME>`` (read when
the package is imported), e.g. ``MAOPD_LIMIT_LAYERS=1024``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from maopd.base.errors import UserError

ENV_PREFIX = "MAOPD_LIMIT_"


@dataclass(frozen=True)
class Limit:
    """The bound on one kind of size: its name (``layers``), what it bounds, and its default."""

    name: str
    what: str
    default: int

    @property
    def env(self) -> str:
        return f"{ENV_PREFIX}{self.name.upper()}"

    @property
    def bound(self) -> int:
        text = os.environ.get(self.env, "")
        if not text:
            return self.default
        if not text.isdigit() or int(text) < 1:
            raise UserError(f"{self.env}={text!r}: must be a positive integer (the bound on {self.what})")
        return int(text)

    def raise_it(self) -> str:
        """How to raise the bound, as a refusal says it."""
        return f"the bound on {self.what} is {self.bound:,}; raise it with {self.env}=<n> if this is meant"

    def constraint(self) -> dict:
        """``checked``'s arguments for a config field bounded so (``checked(32, ge=1, **BATCH.constraint())``)."""
        return {"le": self.bound, "note": f"raise the bound with {self.env}=<n> if this is meant"}

    def problem(self, value: object) -> str | None:
        """Why ``value`` is refused (not a positive integer, or past the bound), or None."""
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be a positive integer, got {value!r}"
        if value < 1:
            return f"must be at least 1, got {value}"
        if value > self.bound:
            return f"{value:,} is over the bound ({self.raise_it()})"
        return None


LAYERS = Limit("layers", "a model's layers", 512)
HIDDEN_SIZE = Limit("hidden_size", "a model's hidden size (and feed-forward width / 4)", 65_536)
INTERMEDIATE_SIZE = Limit("intermediate_size", "a model's feed-forward width", 262_144)
HEADS = Limit("heads", "a model's attention heads per layer", 1_024)
VOCABULARY = Limit("vocabulary", "a model's vocabulary", 1_048_576)
POSITIONS = Limit("positions", "a model's positions (max_position_embeddings)", 16_777_216)
BATCH = Limit("batch", "questions or attempts per step or batch", 65_536)
GROUP = Limit("group", "trajectories per question (the group)", 1_024)
NEW_TOKENS = Limit("new_tokens", "tokens generated per model call", 131_072)
INPUT_TOKENS = Limit("input_tokens", "prompt tokens per model call", 1_048_576)

# config.json's size fields, by the names transformers' configs give them
MODEL_CONFIG_LIMITS = {
    "num_hidden_layers": LAYERS,
    "hidden_size": HIDDEN_SIZE,
    "intermediate_size": INTERMEDIATE_SIZE,
    "num_attention_heads": HEADS,
    "num_key_value_heads": HEADS,
    "vocab_size": VOCABULARY,
    "max_position_embeddings": POSITIONS,
}
