"""Training checkpoints: written atomically, the last N kept, exact to resume from.

Layout under ``RUN_DIR/checkpoints/``::

    step_100/
        model/               Hugging Face format (config.json, model.safetensors, tokenizer files):
                             loadable by transformers' ``from_pretrained`` and by vLLM
        trainer_state.pt     step, optimizer state, RNG states, data-loader state
        config.yaml          the run's TrainConfig
    latest                   a text file naming the newest complete checkpoint ("step_100")

A checkpoint is assembled in a hidden temporary directory and moved into place with one
``os.replace``; the ``latest`` pointer is replaced the same way afterwards. A crash at any point
leaves the previous checkpoint and pointer intact (at worst a stray ``.tmp-*`` directory that the
next save removes).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from maopd.config import save_yaml

CHECKPOINTS = "checkpoints"
LATEST = "latest"
MODEL = "model"
TRAINER_STATE = "trainer_state.pt"


def checkpoint_root(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def capture_rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _write_text_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    trainer_state: dict[str, Any],
    config: Any,
    keep_last: int,
) -> Path:
    """Write ``checkpoints/step_{step}`` atomically, point ``latest`` at it, prune old ones."""
    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    for stray in root.glob(".tmp-*"):
        shutil.rmtree(stray, ignore_errors=True)
    tmp = root / f".tmp-step_{step}"
    model.save_pretrained(tmp / MODEL)
    tokenizer.save_pretrained(tmp / MODEL)
    torch.save(trainer_state, tmp / TRAINER_STATE)
    save_yaml(config, tmp / "config.yaml")

    final = root / f"step_{step}"
    if final.exists():  # saving the same step again (e.g. algo.save after a periodic save)
        shutil.rmtree(final)
    os.replace(tmp, final)
    _write_text_atomically(root / LATEST, final.name + "\n")
    prune_checkpoints(root, keep_last)
    return final


def _step_of(path: Path) -> int:
    return int(path.name.removeprefix("step_"))


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    found = [p for p in root.glob("step_*") if p.name[5:].isdigit() and (p / TRAINER_STATE).is_file()]
    return sorted(found, key=_step_of)


def prune_checkpoints(root: Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` checkpoints (never the one ``latest`` names)."""
    pointer = root / LATEST
    latest = pointer.read_text(encoding="utf-8").strip() if pointer.is_file() else None
    for old in list_checkpoints(root)[:-keep_last]:
        if old.name != latest:
            shutil.rmtree(old)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint ``latest`` names; if the pointer is missing, the newest complete one."""
    root = checkpoint_root(run_dir)
    pointer = root / LATEST
    if pointer.is_file():
        named = root / pointer.read_text(encoding="utf-8").strip()
        if (named / TRAINER_STATE).is_file():
            return named
    complete = list_checkpoints(root) if root.is_dir() else []
    return complete[-1] if complete else None


def load_trainer_state(checkpoint: str | Path) -> dict[str, Any]:
    # Our own file: it holds numpy RNG state and Python tuples, which weights_only refuses.
    return torch.load(Path(checkpoint) / TRAINER_STATE, map_location="cpu", weights_only=False)


def resolve_model_dir(path: str | Path) -> Path:
    """A Hugging Face model directory from a run directory, a checkpoint or a model directory."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    if (path / MODEL / "config.json").is_file():
        return path / MODEL
    checkpoint = latest_checkpoint(path)
    if checkpoint is not None:
        return checkpoint / MODEL
    raise FileNotFoundError(
        f"{path}: not a model directory (no config.json), a checkpoint (no model/) "
        f"or a run directory with checkpoints"
    )
