"""A checkpoint as training writes it (model, a full trainer state, config), for tests that need one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from maopd.training import checkpoint as ckpt
from maopd.training.config import build_config


def trainer_state(model: torch.nn.Module, step: int) -> dict[str, Any]:
    """A trainer state with every field a resume restores, as ``Trainer.state_dict`` has them."""
    return {
        "step": step,
        "optimizer": torch.optim.AdamW(model.parameters()).state_dict(),
        "loader": {"epoch": 0, "position": step, "seed": 0},
        "rng": ckpt.capture_rng_state(),
    }


def save_test_checkpoint(run_dir: str | Path, step: int, model, tokenizer, keep_last: int = 3, state=None) -> Path:
    """``run_dir/checkpoints/step_<step>`` of a Stage I run, saved by ``save_checkpoint``."""
    state = trainer_state(model, step) if state is None else state
    return ckpt.save_checkpoint(run_dir, step, model, tokenizer, state, build_config({"stage": "stage1"}), keep_last)
