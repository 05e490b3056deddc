"""Tiny random-initialised Qwen3 models, built offline from a seed, for tests and CPU demos.

The model has the architecture of the paper's Qwen3 policy (``Qwen3ForCausalLM``) at a size two
CPU cores run in milliseconds per token. Its weights are random: it produces gibberish, but real
token ids, log-probs, KV caches and gradients, which is what the rollout, scoring and training
code needs to be tested end to end. The same seed and config give identical weights.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerBase,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from transformers.utils import cached_file

from maopd.agents.model_files import ModelFileError, check_cached_model, check_loaded, check_model_dir
from maopd.agents.tokenizer import train_tokenizer
from maopd.base.atomic import write_files_atomically
from maopd.base.config import ConfigError, check_fields, checked, seed_field
from maopd.base.limits import HEADS, HIDDEN_SIZE, INTERMEDIATE_SIZE, LAYERS, POSITIONS


@dataclass
class TinyModelConfig:
    hidden_size: int = checked(64, ge=1, **HIDDEN_SIZE.constraint(), help="The width of the model's hidden states.")
    num_layers: int = checked(2, ge=1, **LAYERS.constraint(), help="Decoder layers.")
    num_heads: int = checked(4, ge=1, **HEADS.constraint(), help="Attention (query) heads per layer.")
    num_kv_heads: int = checked(
        2,
        ge=1,
        **HEADS.constraint(),
        help="Key/value heads per layer (grouped-query attention); num_heads must be a multiple of it.",
    )
    head_dim: int = checked(16, ge=1, **HIDDEN_SIZE.constraint(), help="The size of each attention head.")
    intermediate_size: int = checked(
        128, ge=1, **INTERMEDIATE_SIZE.constraint(), help="The width of each layer's feed-forward (MLP) block."
    )
    max_position_embeddings: int = checked(
        16384, ge=1, **POSITIONS.constraint(), help="The longest sequence, in tokens, the model is built for."
    )
    # a peaked random model is what makes the sampling, top-p and stop-tag tests meaningful
    initializer_range: float = checked(
        0.2,
        help="The standard deviation of the random initial weights: larger than Qwen's 0.02, so that a random "
        "model's next-token distributions are far from uniform.",
    )
    tie_word_embeddings: bool = checked(
        True, help="Share one matrix between the input embeddings and the output layer."
    )
    seed: int = seed_field(help="Seeds the random initial weights: the same seed and settings give the same model.")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"num_heads: must be a multiple of num_kv_heads ({self.num_kv_heads}), got {self.num_heads}"
            )


def qwen3_config(tokenizer: PreTrainedTokenizerBase, config: TinyModelConfig) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        intermediate_size=config.intermediate_size,
        max_position_embeddings=config.max_position_embeddings,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase,
    config: TinyModelConfig | None = None,
    dtype: torch.dtype = torch.float32,
) -> Qwen3ForCausalLM:
    """A random ``Qwen3ForCausalLM`` over ``tokenizer``'s vocabulary, identical for one seed."""
    config = config or TinyModelConfig()
    # fork_rng keeps the caller's global RNG state untouched by our seeding.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = Qwen3ForCausalLM(qwen3_config(tokenizer, config))
    return model.to(dtype).eval()


def build_tiny_lm(
    texts: Iterable[str] = (), config: TinyModelConfig | None = None, vocab_size: int = 4096
) -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerBase]:
    """A tokenizer trained on ``texts`` (see ``maopd.agents.tokenizer``) and a tiny model over it."""
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size)
    return build_tiny_model(tokenizer, config), tokenizer


def save_model(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, directory: str | Path) -> Path:
    """Save model and tokenizer side by side, loadable with ``load_model`` or ``from_pretrained``."""

    def save(staging: Path) -> None:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

    return write_files_atomically(directory, save)


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def load_model(
    source: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a local model directory or a Hugging Face hub id.

    A directory that exists is read as it is (never the hub). Anything else that looks like a
    hub id (``Qwen/Qwen3-0.6B``) goes through ``from_pretrained`` and its cache: downloaded when a
    hub is reachable, read from the cache alone when the user sets the standard
    ``HF_HUB_OFFLINE=1`` or when the hub's endpoint does not answer within ``HUB_PROBE_SECONDS``.
    A failure to get it says so in one line. A local directory, and a hub id's files in the cache,
    are checked before anything is allocated (``maopd.agents.model_files``): a damaged or oversized
    one raises ``ModelFileError`` naming the file.
    """
    path = Path(source)
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path}: no config.json; not a saved model directory")
        check_model_dir(path)  # a damaged config.json or weights file: an error that names it
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
        except OSError as exc:  # transformers' word for a missing or unreadable file of the model
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise ModelFileError(f"{path}: cannot load the model ({reason}); check the model directory") from None
        check_loaded(model, tokenizer, path)
        return model.to(device).eval(), tokenizer
    name = str(source)
    if not HUB_ID.match(name):
        raise FileNotFoundError(f"{name}: no such model directory, and not a Hugging Face hub id (org/name)")
    # an unreachable hub is found in seconds: the cache alone is read then, instead of the hub
    # client retrying a connection that cannot open
    cache_only = hub_offline() or not hub_reachable()
    try:
        config = cached_file(name, "config.json", local_files_only=cache_only)
    except OSError as exc:
        raise FileNotFoundError(hub_failure(name, exc)) from None
    check_cached_model(name, Path(config))  # sizes within bounds, and cached weights whole, before any allocation
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=cache_only)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, local_files_only=cache_only)
    except OSError as exc:
        raise FileNotFoundError(hub_failure(name, exc)) from None
    check_loaded(model, tokenizer, name)
    return model.to(device).eval(), tokenizer


HUB_PROBE_SECONDS = 3.0


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def hub_endpoint() -> tuple[str, int]:
    """The hub's host and port (``HF_ENDPOINT``, by default huggingface.co over https)."""
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    return endpoint.hostname or "", endpoint.port or (443 if endpoint.scheme == "https" else 80)


def hub_reachable(timeout: float = HUB_PROBE_SECONDS) -> bool:
    """Whether a connection to the hub's endpoint opens within ``timeout`` seconds."""
    try:
        with socket.create_connection(hub_endpoint(), timeout=timeout):
            return True
    except OSError:
        return False


def hub_failure(name: str, exc: BaseException) -> str:
    """One line: why ``name`` could not be loaded as a hub id, and what to do about it."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if hub_offline():
        where = "HF_HUB_OFFLINE is set and the model is not in the Hugging Face cache (HF_HUB_CACHE / HF_HOME)"
    elif not hub_reachable():
        host, port = hub_endpoint()
        where = (
            f"no such local directory, not in the Hugging Face cache, and the hub ({host}:{port}) cannot be "
            "reached; download it where a hub is reachable and set HF_HUB_OFFLINE=1, or pass a local directory"
        )
    else:
        where = (
            "no such local directory, and the Hugging Face hub did not provide it (no network, a wrong "
            "id, or a gated model); download it where a hub is reachable and set HF_HUB_OFFLINE=1, "
            "or pass a local directory"
        )
    return f"{name}: {where} [{reason}]"
