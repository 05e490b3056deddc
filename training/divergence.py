"""Teacher–student divergence on Searcher tokens, logged per Stage II step.

Computed in ``Trainer.prepare`` from tensors the trainer already holds once the Teacher has scored
the batch (nothing new is scored): the batch's token ids, ``response_mask``, ``role_ids``, π_old's
sampling log-probs and the Teacher's log-probs, plus the tokenizer to find the decision tokens.
π_T below is the Teacher of the Searchers' OPD (π_0 in "w/ base-model teacher"). Only the rows the
Teacher scored count, and only a step with OPD has a Teacher: a variant without distillation logs
no ``teacher/*`` metric.

* ``teacher/searcher_kl_k1``: mean over the Searcher response tokens the Teacher scored of
  log π_old(a_t) − log π_T(a_t), the k1 estimate of KL(π_old‖π_T) (unbiased, can be negative);
* ``teacher/searcher_kl_k3``: mean over the same tokens of ρ − 1 − log ρ with ρ = π_T/π_old
  (``maopd.training.losses.kl_k3``; unbiased, ≥ 0);
* ``teacher/decision_log_ratio``: mean over Searcher turns with a decision token of
  log π_T(a_d) − log π_old(a_d) at that token (> 0: the Teacher likes the decision the student
  made more than the student does); ``teacher/decision_tokens``: how many turns had one;
* ``teacher/searcher_tokens``: the number of those Searcher response tokens (0: no Searcher call,
  and then the other metrics are absent from the step's row).

The **decision token** of a Searcher turn (one contiguous run of generated tokens of a Searcher
call) is the token at which the output commits to ``<search>`` vs ``<report>``: decode the turn's
tokens (``skip_special_tokens=True``, as the rollout does), take the first occurrence of either
opening tag ``<search>`` or ``<report>``, and the decision token is the first token whose decoded
prefix reaches past its ``<`` — i.e. the token holding the first letter of the tag name, where the
two tags first differ (with the tiny tokenizer, where each tag is one added token, that is the tag
token itself). A turn without either opening tag has no decision token.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import torch

from maopd.envs.actions import SEARCHER
from maopd.training.losses import kl_k3, masked_where

_DECISION_TAG = re.compile(r"<(?:search|report)>")


def response_runs(response_mask: torch.Tensor) -> list[tuple[int, int]]:
    """(start, end) of each contiguous run of 1s in a [T] response mask: one per generated turn."""
    mask = response_mask.bool().tolist()
    runs, start = [], None
    for t, on in enumerate([*mask, False]):
        if on and start is None:
            start = t
        elif not on and start is not None:
            runs.append((start, t))
            start = None
    return runs


def decision_index(token_ids: Sequence[int], decode: Callable[[list[int]], str]) -> int | None:
    """Index in ``token_ids`` (one turn's generated ids) of its decision token, or None."""
    ids = list(token_ids)
    match = _DECISION_TAG.search(decode(ids))
    if match is None:
        return None
    needed = match.start() + 2  # the prefix must hold "<" and the tag name's first letter
    low, high = 0, len(ids) - 1  # the smallest k whose decoded prefix ids[: k + 1] is long enough
    while low < high:
        middle = (low + high) // 2
        if len(decode(ids[: middle + 1])) >= needed:
            high = middle
        else:
            low = middle + 1
    return low


def decision_positions(
    input_ids: torch.Tensor,
    response_mask: torch.Tensor,
    role_ids: torch.Tensor,
    decode: Callable[[list[int]], str],
) -> list[tuple[int, int]]:
    """(row, column) of the decision token of every Searcher turn that has one."""
    positions = []
    for row in (role_ids == SEARCHER).nonzero().flatten().tolist():
        for start, end in response_runs(response_mask[row]):
            index = decision_index(input_ids[row, start:end].tolist(), decode)
            if index is not None:
                positions.append((row, start + index))
    return positions


def searcher_divergence_metrics(
    input_ids: torch.Tensor,
    response_mask: torch.Tensor,
    role_ids: torch.Tensor,
    old_logprobs: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    scored: torch.Tensor,
    decode: Callable[[list[int]], str],
) -> dict[str, float]:
    """The ``teacher/*`` metrics above over the Searcher rows the Teacher scored (``scored`` [N],
    bool); only ``teacher/searcher_tokens`` (0) when it scored no Searcher token."""
    searcher_rows = (role_ids == SEARCHER) & scored.bool()
    mask = response_mask.bool() & searcher_rows[:, None]
    count = int(mask.sum())
    if count == 0:
        return {"teacher/searcher_tokens": 0.0}
    old = masked_where(mask, old_logprobs.float())
    teacher = masked_where(mask, teacher_logprobs.float())
    metrics = {
        "teacher/searcher_tokens": float(count),
        "teacher/searcher_kl_k1": float(masked_where(mask, old - teacher).sum()) / count,
        "teacher/searcher_kl_k3": float(masked_where(mask, kl_k3(old, teacher)).sum()) / count,
    }
    positions = decision_positions(input_ids, response_mask.bool() & searcher_rows[:, None], role_ids, decode)
    metrics["teacher/decision_tokens"] = float(len(positions))
    if positions:
        rows, columns = (torch.tensor(axis) for axis in zip(*positions))
        ratio = teacher_logprobs[rows, columns].float() - old_logprobs[rows, columns].float()
        metrics["teacher/decision_log_ratio"] = float(ratio.mean())
    return metrics
