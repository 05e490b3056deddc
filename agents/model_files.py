"""Checks of a saved model directory before use, so that a damaged or wrong one is named, not a crash.

Before anything is allocated (``check_model_dir``):

* ``config.json`` parses, and its sizes (layers, hidden size, feed-forward width, heads, vocabulary,
  positions) are positive integers within ``maopd.base.limits`` (``num_hidden_layers: 200000``
  would build layers for as long, ``hidden_size: 1e6`` fail deep inside torch);
* every safetensors file is as long as its header says (a truncated copy);
* every tensor the architecture needs is there, with the shape the config implies, stored as
  floating point (``expected_tensors`` builds the architecture on torch's meta device, which
  allocates nothing): a missing ``model.embed_tokens.weight`` would otherwise run with random
  weights, and weights saved as int32 would be cast silently.

After loading (``check_loaded``): every weight is finite (all-NaN embeddings), and the chat template
renders in transformers' Jinja sandbox. The checks read headers, not tensor bytes, before loading;
flipped bits inside a finite tensor are not caught.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from maopd.base.errors import UserError
from maopd.base.limits import MODEL_CONFIG_LIMITS

# safetensors' names of the dtypes a model's weights may be stored in
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2")


class ModelFileError(UserError, ValueError):
    """A file of a local model directory is damaged or unreadable. The message names the file."""


def safetensors_problem(path: Path) -> str | None:
    """Why a ``.safetensors`` file is unusable (its header or its size), or None."""
    if not path.is_file():
        return f"{path.name} is missing"
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            (header_size,) = struct.unpack("<Q", handle.read(8))
            if header_size > size:
                return f"{path.name}: truncated header"
            header = json.loads(handle.read(header_size))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    except (struct.error, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        return f"{path.name}: unreadable header ({exc})"
    if size != 8 + header_size + end:
        return f"{path.name}: {size} bytes, its header describes {8 + header_size + end}"
    return None


def _shard_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if not index.is_file():
        return [model_dir / "model.safetensors"]
    shards = json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()
    return [model_dir / shard for shard in sorted(set(shards))]


def stored_tensors(model_dir: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each tensor of ``model_dir``'s safetensors weights: name -> (dtype, shape), from the headers."""
    stored = {}
    for shard in _shard_files(model_dir):
        with open(shard, "rb") as handle:
            (header_size,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(header_size))
        for name, entry in header.items():
            if name != "__metadata__":
                stored[name] = (entry["dtype"], tuple(entry["shape"]))
    return stored


def config_problem(config: dict[str, Any]) -> str | None:
    """Why ``config.json``'s sizes are refused (not a positive integer, or past a bound), or None."""
    sections = [config, *(v for k, v in config.items() if k.endswith("_config") and isinstance(v, dict))]
    for section in sections:
        for field, limit in MODEL_CONFIG_LIMITS.items():
            if field in section and section[field] is not None:
                problem = limit.problem(section[field])
                if problem is not None:
                    return f"{field}: {problem}"
    return None


def expected_tensors(model_dir: Path) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """The tensors the architecture of ``model_dir``'s config needs (name -> shape), and those of them
    that may be left out (tied to another: the output head tied to the embeddings). Built on the meta
    device: nothing is allocated."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    tied = getattr(model, "_tied_weights_keys", None) or {}
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    optional = set(tied) if getattr(text_config, "tie_word_embeddings", False) else set()
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}, optional


def tensors_problem(model_dir: Path) -> str | None:
    """Why the stored tensors cannot be the model ``config.json`` describes: one missing, of another
    shape, or not stored as floating point; None when they can."""
    try:
        expected, optional = expected_tensors(model_dir)
    except Exception as exc:  # noqa: BLE001 -- transformers' own validation of the user's file raises many types
        return f"config.json: describes no model transformers can build ({' '.join(str(exc).split())[:200]})"
    stored = stored_tensors(model_dir)
    for name, (dtype, _) in stored.items():
        if dtype not in FLOAT_DTYPES:
            return f"{name} is stored as {dtype}; a model's weights are floating point ({', '.join(FLOAT_DTYPES)})"
    prefix = ""  # weights saved from the bare model (no "model." in front) load into the causal LM too
    if not any(name in stored for name in expected):
        prefix = next((name.split(".")[0] + "." for name in expected if "." in name), "")
    for name, shape in expected.items():
        key = name.removeprefix(prefix) if prefix and name.removeprefix(prefix) in stored else name
        if key not in stored:
            if name in optional:
                continue
            return f"{name} is missing from the weights (the model would run with random values there)"
        if stored[key][1] != shape:
            return f"{key} has shape {list(stored[key][1])}; config.json implies {list(shape)}"
    return None


def weights_problem(model_dir: Path) -> str | None:
    """Why the safetensors weights of ``model_dir`` (one file, or the shards of an index) are unusable."""
    index = model_dir / "model.safetensors.index.json"
    if not index.is_file():
        return safetensors_problem(model_dir / "model.safetensors")
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (ValueError, KeyError, AttributeError, TypeError) as exc:
        return f"{index.name}: unreadable ({exc})"
    for shard in shards:
        problem = safetensors_problem(model_dir / shard)
        if problem:
            return problem
    return None


def check_model_dir(model_dir: Path) -> None:
    """Raise ``ModelFileError`` naming the file if ``config.json`` or the safetensors weights of a
    local model directory are damaged. Weights in other formats are left to ``from_pretrained``."""
    config = model_dir / "config.json"
    try:
        loaded = json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelFileError(
            f"{config}: not valid JSON ({exc}); the model directory is damaged: copy or save the model again"
        ) from None
    if not isinstance(loaded, dict):
        raise ModelFileError(
            f"{config}: expected a JSON object; the model directory is damaged: copy or save the model again"
        )
    problem = config_problem(loaded)
    if problem:
        raise ModelFileError(f"{config}: {problem}")
    if (model_dir / "model.safetensors").exists() or (model_dir / "model.safetensors.index.json").exists():
        problem = weights_problem(model_dir)
        if problem:
            raise ModelFileError(
                f"{model_dir}/{problem}; the weights are damaged (a truncated copy or an "
                "interrupted save?): copy or save the model again"
            )
        problem = tensors_problem(model_dir)
        if problem:
            raise ModelFileError(
                f"{model_dir}: {problem}; these are not the weights of the model config.json describes: "
                "copy or save the model again"
            )


def check_loaded(model: Any, tokenizer: Any, source: str | Path) -> None:
    """Raise ``ModelFileError`` naming ``source`` when a loaded model holds a non-finite weight, or its
    chat template does not render in transformers' Jinja sandbox (a template the sandbox refuses)."""
    import torch
    from jinja2 import TemplateError

    for name, parameter in model.named_parameters():
        if not bool(torch.isfinite(parameter).all()):
            raise ModelFileError(
                f"{source}: {name} holds non-finite values (NaN or inf); the weights are damaged: "
                "copy or save the model again"
            )
    if getattr(tokenizer, "chat_template", None):
        try:
            tokenizer.apply_chat_template(
                [{"role": "user", "content": "?"}], tokenize=False, add_generation_prompt=True
            )
        except TemplateError as exc:
            raise ModelFileError(
                f"{source}: its chat template does not render ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:200]}); fix chat_template in its tokenizer files"
            ) from None
