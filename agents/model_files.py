"""Checks of a saved model directory before use, so that a damaged or wrong one is named, not a crash.

Before anything is allocated (``check_model_dir``):

* ``config.json`` parses, and its sizes (layers, hidden size, feed-forward width, heads, vocabulary,
  positions) are positive integers within ``maopd.base.limits`` (``num_hidden_layers: 200000``
  would build layers for as long, ``hidden_size: 1e6`` fail deep inside torch);
* the weights transformers would load (safetensors, else ``pytorch_model.bin``; one file or the
  shards of an index) can be read: every safetensors file is as long as its header says (a
  truncated copy), every ``.bin`` file loads as tensors only (``torch.load(weights_only=True)``,
  memory-mapped: a pickled object that would run code is refused, not run);
* every tensor the architecture needs is there, with the shape the config implies, stored as
  floating point (``expected_tensors`` builds the architecture on torch's meta device, which
  allocates nothing): a missing ``model.embed_tokens.weight`` would otherwise run with random
  weights, and weights saved as int32 would be cast silently.

A Hugging Face hub id gets the same checks (``check_cached_model``) on its files in the Hugging Face
cache: its ``config.json`` always, before anything is allocated; its weights when the cache holds all
of them already (weights still to be downloaded are checked once loaded).

After loading (``check_loaded``): every weight is finite (all-NaN embeddings), and the chat template
renders in transformers' Jinja sandbox. The checks read headers and tensor metadata, not tensor bytes,
before loading (a ``.bin`` file of torch's legacy format, which cannot be memory-mapped, is read
whole); flipped bits inside a finite tensor are not caught.
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
# torch's names of dtypes as safetensors names them, so that both formats' refusals read alike
SAFETENSORS_NAMES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}
# the weights transformers loads, in the order it prefers them: (one file, the index of its shards)
SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")
TORCH_BIN = ("pytorch_model.bin", "pytorch_model.bin.index.json")
LOCAL_FIX = "copy or save the model again"

Stored = dict[str, tuple[str, tuple[int, ...]]]


class ModelFileError(UserError, ValueError):
    """A file of a local model directory is damaged or unreadable. The message names the file."""


class DamagedWeightsError(Exception):
    """A weights file that cannot be read as the tensors it should hold; the message names it."""


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


def weights_format(model_dir: Path) -> tuple[str, str] | None:
    """``SAFETENSORS`` or ``TORCH_BIN``: the weights of ``model_dir`` transformers would load, or None
    when it holds neither (weights in another format are left to ``from_pretrained``)."""
    for names in (SAFETENSORS, TORCH_BIN):
        if any((model_dir / name).exists() for name in names):
            return names
    return None


def weight_files(model_dir: Path, names: tuple[str, str]) -> list[Path]:
    """The files of ``model_dir``'s weights in format ``names``: the one file, or each shard its index names."""
    single, index = names
    if not (model_dir / index).is_file():
        return [model_dir / single]
    try:
        shards = json.loads((model_dir / index).read_text(encoding="utf-8"))["weight_map"].values()
        return [model_dir / shard for shard in sorted(set(shards))]
    except (ValueError, KeyError, AttributeError, TypeError, UnicodeDecodeError) as exc:
        raise DamagedWeightsError(f"{index}: unreadable ({exc})") from None


def _safetensors_tensors(path: Path) -> Stored:
    """Name -> (dtype, shape) of a safetensors file's tensors, from its header."""
    problem = safetensors_problem(path)
    if problem:
        raise DamagedWeightsError(problem)
    with open(path, "rb") as handle:
        (header_size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(header_size))
    return {name: (entry["dtype"], tuple(entry["shape"])) for name, entry in header.items() if name != "__metadata__"}


def _bin_tensors(path: Path) -> Stored:
    """Name -> (dtype, shape) of a ``pytorch_model.bin`` file's tensors. It is read as tensors only
    (``weights_only``: a pickled object that would run code is refused) and memory-mapped, so its
    tensor bytes are not read; a file of torch's legacy format, which cannot be mapped, is read whole."""
    import pickle

    import torch

    if not path.is_file():
        raise DamagedWeightsError(f"{path.name} is missing")
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap can only be used" not in str(exc):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise DamagedWeightsError(
            f"{path.name}: holds objects other than tensors, which are not loaded (unpickling them could run code)"
        ) from None
    except Exception as exc:  # noqa: BLE001 -- torch's reading of a damaged file raises many types
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise DamagedWeightsError(f"{path.name}: unreadable ({reason})") from None
    if not isinstance(state, dict):
        raise DamagedWeightsError(f"{path.name}: holds a {type(state).__name__}, not a mapping of names to tensors")
    stored = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise DamagedWeightsError(f"{path.name}: {name} holds a {type(value).__name__}, not a tensor")
        dtype = str(value.dtype).removeprefix("torch.")
        stored[name] = (SAFETENSORS_NAMES.get(dtype, dtype), tuple(value.shape))
    return stored


def stored_tensors(model_dir: Path, names: tuple[str, str] = SAFETENSORS) -> Stored:
    """Each tensor of ``model_dir``'s weights in format ``names`` (safetensors headers, or the state
    dicts of ``.bin`` files): name -> (dtype, shape). ``DamagedWeightsError`` names a file that is
    missing or cannot be read."""
    read = _safetensors_tensors if names == SAFETENSORS else _bin_tensors
    stored = {}
    for file in weight_files(model_dir, names):
        stored |= read(file)
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


def tensors_problem(model_dir: Path, stored: Stored) -> str | None:
    """Why the ``stored`` tensors cannot be the model ``model_dir``'s ``config.json`` describes: one
    missing, of another shape, or not stored as floating point; None when they can."""
    try:
        expected, optional = expected_tensors(model_dir)
    except Exception as exc:  # noqa: BLE001 -- transformers' own validation of the user's file raises many types
        return f"config.json: describes no model transformers can build ({' '.join(str(exc).split())[:200]})"
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
    """Why the weights of ``model_dir`` (safetensors or ``.bin``, one file or the shards of an index)
    are unusable: a file missing, damaged or unreadable. Safetensors are read by their headers."""
    try:
        stored_tensors(model_dir, weights_format(model_dir) or SAFETENSORS)
    except DamagedWeightsError as exc:
        return str(exc)
    return None


def check_config_file(config: Path, fix: str = LOCAL_FIX) -> None:
    """Raise ``ModelFileError`` naming ``config`` (a model's ``config.json``) when it is not a JSON
    object or a size in it is past its bound; ``fix``: what to do about a damaged file."""
    try:
        loaded = json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{config}: not valid JSON ({exc}); the model directory is damaged: {fix}") from None
    if not isinstance(loaded, dict):
        raise ModelFileError(f"{config}: expected a JSON object; the model directory is damaged: {fix}")
    problem = config_problem(loaded)
    if problem:
        raise ModelFileError(f"{config}: {problem}")


def check_model_dir(model_dir: Path, fix: str = LOCAL_FIX) -> None:
    """Raise ``ModelFileError`` naming the file if ``config.json`` or the weights (safetensors or
    ``.bin``) of a model directory are damaged or are not the model the config describes. Weights in
    other formats are left to ``from_pretrained``. ``fix``: what to do about a damaged directory."""
    check_config_file(model_dir / "config.json", fix)
    names = weights_format(model_dir)
    if names is None:
        return
    try:
        stored = stored_tensors(model_dir, names)
    except DamagedWeightsError as exc:
        raise ModelFileError(
            f"{model_dir}/{exc}; the weights are damaged (a truncated copy or an interrupted save?): {fix}"
        ) from None
    problem = tensors_problem(model_dir, stored)
    if problem:
        raise ModelFileError(
            f"{model_dir}: {problem}; these are not the weights of the model config.json describes: {fix}"
        )


def check_cached_model(name: str, config: Path) -> None:
    """The checks of ``check_model_dir`` for hub id ``name``, whose ``config.json`` is at ``config`` in
    the Hugging Face cache, before anything is allocated: the config always; the weights when every
    file of them is in the cache already (weights still to be downloaded are checked once loaded)."""
    snapshot = config.parent
    fix = f"delete {snapshot.parent.parent} from the Hugging Face cache so that {name} is downloaded again"
    check_config_file(config, fix)
    names = weights_format(snapshot)
    try:
        complete = names is not None and all(file.is_file() for file in weight_files(snapshot, names))
    except DamagedWeightsError:
        complete = True  # an unreadable index: check_model_dir names it
    if complete:
        check_model_dir(snapshot, fix)


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
