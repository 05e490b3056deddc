"""Run k independent workflows per manifest question and save one scored record per attempt.

The runner knows nothing about environments or models: it calls ``solve(questions, seeds)``,
which must return one workflow record (envs/records.py) per question, in order. Sampling
settings (the paper's: one answer candidate per request, temperature 0.6, top-p 0.95) belong to
``solve`` (``benchmarks.eval.solvers``); ``EvalSettings`` holds only what the runner reads.

Resuming: records already in the output file for this method are skipped, never rerun. Records
are appended one batch at a time with a single write followed by fsync; a batch cut short by a
crash leaves at most one partial last line, which the next run drops before appending.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from benchmarks.eval.manifest import ManifestEntry
from benchmarks.eval.records import RecordError, from_workflow, record_line
from envs.datasets import Question
from maopd.base.json_files import drop_torn_last_line, iter_json_lines

Solve = Callable[[list[Question], list[int]], list[dict[str, Any]]]


@dataclass(frozen=True)
class EvalSettings:
    """What the runner reads: attempts per question (the paper's k = 4), batch size, seed."""

    attempts: int = 4
    batch_size: int = 8
    seed: int = 0
    keep_trajectory: bool = True


def attempt_seed(seed: int, dataset: str, question_id: str, attempt: int) -> int:
    """A seed per (question, attempt) that does not depend on batching or on resumption."""
    digest = hashlib.sha256(f"{seed}:{dataset}:{question_id}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def finished_keys(path: Path, method: str) -> set[tuple[str, str, int]]:
    """(dataset, question_id, attempt) already recorded for ``method``; drops a partial last line."""
    if not path.exists():
        return set()
    drop_torn_last_line(path)
    done = set()
    for where, row in iter_json_lines(path, RecordError, "record file"):
        try:
            key = (row["dataset"], str(row["question_id"]), int(row["attempt"]))
        except (KeyError, TypeError, ValueError):
            raise RecordError(f"{where}: not a record; refusing to append to this file") from None
        if row.get("method") == method:
            done.add(key)
    return done


def _append(path: Path, lines: Sequence[str]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write("".join(lines))
        handle.flush()
        os.fsync(handle.fileno())


def run_attempts(
    solve: Solve,
    manifest: Sequence[ManifestEntry],
    out_path: str | Path,
    method: str,
    settings: EvalSettings = EvalSettings(),
) -> int:
    """Run every missing (question, attempt) of ``manifest`` through ``solve``; returns how many ran."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    done = finished_keys(out_path, method)
    todo = [
        (entry, attempt)
        for attempt in range(settings.attempts)
        for entry in manifest
        if (entry.dataset, entry.question.id, attempt) not in done
    ]
    with tqdm(
        total=len(manifest) * settings.attempts,
        initial=len(manifest) * settings.attempts - len(todo),
        desc=f"eval {method}",
        unit="workflow",
    ) as bar:
        for start in range(0, len(todo), settings.batch_size):
            batch = todo[start : start + settings.batch_size]
            seeds = [attempt_seed(settings.seed, e.dataset, e.question.id, a) for e, a in batch]
            workflows = solve([e.question for e, _ in batch], seeds)
            if len(workflows) != len(batch):
                raise ValueError(f"solve returned {len(workflows)} workflow records for {len(batch)} questions")
            lines = []
            for (entry, attempt), seed, workflow in zip(batch, seeds, workflows):
                if str(workflow.get("question_id")) != entry.question.id:
                    raise ValueError(
                        f"solve returned a record for question {workflow.get('question_id')!r} "
                        f"where {entry.question.id!r} was expected"
                    )
                record = from_workflow(workflow, method, entry.dataset, attempt, seed, settings.keep_trajectory)
                lines.append(record_line(record))
            _append(out_path, lines)
            bar.update(len(batch))
    return len(todo)
