"""A step that hits NaN or inf stops the run and leaves what it was working on for inspection.

``save_nonfinite_step`` writes, under ``RUN_DIR/nonfinite/``:

* ``step_N.pt``: the step's tensors as far as it got (token ids, attention and response masks,
  role ids, π_old and Teacher log-probs, group rewards, advantages), and the workflow records as
  plain data. It holds nothing but tensors, dicts, lists, text and numbers, so it loads with
  ``torch.load(path, weights_only=True)``, which runs no code from the file.
* ``step_N.json``: a summary: the error, every saved tensor's shape and how many non-finite values
  it holds (with the first positions), and the step's questions.

The parameters at the moment of the error are not saved: they are the last checkpoint's plus the
updates of this step's earlier minibatches, if any.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from maopd.base.atomic import write_file_atomically
from maopd.base.json_files import write_json
from maopd.envs.records import WorkflowRecord

if TYPE_CHECKING:
    from maopd.training.advantages import PPOBatch
    from maopd.training.rollout import TeamBatch

NONFINITE = "nonfinite"
MAX_POSITIONS = 10  # non-finite positions listed per tensor in the summary


def step_tensors(
    rollout: TeamBatch | None,
    rewards: dict[str, torch.Tensor | None] | None,
    ppo: PPOBatch | None,
    pad_id: int,
) -> dict[str, torch.Tensor]:
    """The named tensors of a step, from whichever of its stages were reached."""
    tensors: dict[str, torch.Tensor | None] = {}
    if ppo is not None:
        tokens = ppo.tokens
        tensors.update(
            role_ids=ppo.role_ids,
            old_logprobs=ppo.old_logprobs,
            teacher_logprobs=ppo.teacher_logprobs,
            reference_logprobs=ppo.reference_logprobs,
            token_advantages=ppo.advantages.token_advantages,
            sequence_advantages=ppo.advantages.sequence_advantages,
        )
        for role, values in ppo.advantages.group_advantages.items():
            tensors[f"group_advantages/{role}"] = values
    elif rollout is not None:
        tokens = rollout.token_batch(pad_id)
        tensors.update(role_ids=rollout.role_ids(), old_logprobs=rollout.old_logprobs())
    else:
        return {}
    tensors.update(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask, response_mask=tokens.response_mask)
    for name, values in (rewards or {}).items():
        # ``roles``: the rewards of roles a workflow registers, one tensor per role
        for part, tensor in values.items() if isinstance(values, dict) else [(None, values)]:
            tensors[f"rewards/{name}" if part is None else f"rewards/{name}/{part}"] = tensor
    return {name: values.detach().cpu() for name, values in tensors.items() if values is not None}


def _describe(values: torch.Tensor) -> dict[str, Any]:
    summary: dict[str, Any] = {"shape": list(values.shape), "dtype": str(values.dtype).removeprefix("torch.")}
    if values.is_floating_point():
        bad = ~torch.isfinite(values)
        summary["nonfinite"] = int(bad.sum())
        summary["first_nonfinite_positions"] = bad.nonzero()[:MAX_POSITIONS].tolist()
    return summary


def _plain(value: Any) -> Any:
    """What JSON cannot write, as plain data: a NumPy scalar as its Python number, else its text."""
    return value.item() if isinstance(value, np.generic) else str(value)


def save_nonfinite_step(
    run_dir: str | Path,
    step: int,
    error: Exception,
    tensors: dict[str, torch.Tensor],
    records: list[list[WorkflowRecord]] | None,
    questions: list[str],
) -> Path:
    """Write ``nonfinite/step_{step}.pt`` and its ``.json`` summary; returns the ``.pt`` path."""
    directory = Path(run_dir) / NONFINITE
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step_{step}.pt"
    # records as JSON reads them back: plain types only (no tuples, no NumPy scalars), which
    # weights_only loading accepts; NaN and inf stay, they are what the dump is for
    rows = [[record.to_json() for record in row] for row in records] if records is not None else None
    plain_records = json.loads(json.dumps(rows, default=_plain))
    dump = {"step": step, "error": str(error), "tensors": tensors, "records": plain_records}
    write_file_atomically(path, lambda handle: torch.save(dump, handle))
    summary = {
        "step": step,
        "error": str(error),
        "batch": path.name,
        "tensors": {name: _describe(values) for name, values in tensors.items()},
        "questions": questions,
    }
    write_json(path.with_suffix(".json"), summary, indent=2)
    return path
