"""Cheap structural checks of a saved model directory, so that a damaged one is named, not a crash.

They read headers, not tensor bytes: a truncated ``.safetensors`` file (its header lists every
tensor's byte range) or an unparsable ``config.json`` is caught; flipped bits inside a tensor are not.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from maopd.base.errors import UserError


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
    if (model_dir / "model.safetensors").exists() or (model_dir / "model.safetensors.index.json").exists():
        problem = weights_problem(model_dir)
        if problem:
            raise ModelFileError(
                f"{model_dir}/{problem}; the weights are damaged (a truncated copy or an "
                "interrupted save?): copy or save the model again"
            )
