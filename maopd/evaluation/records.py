"""The scored evaluation record: one JSON line per question × attempt (docs/evaluation.md).

A record carries what is needed to score it (``final_output`` and ``golden_answers``) and what
the cost analysis reads (the counters). Scores are always recomputed from ``final_output`` when
records are loaded, so records written by other systems need no score of their own and cannot
carry a score that disagrees with the protocol.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from maopd.base.config import shown
from maopd.base.errors import UserError
from maopd.base.json_files import iter_json_lines, json_text
from maopd.envs.actions import strict_answer
from maopd.envs.policy import MAX_TOKEN_COUNT
from maopd.envs.records import RecordFormatError, WorkflowRecord
from maopd.envs.rewards import exact_match
from maopd.evaluation.extraction import failure_kind, flexible_answer

# Workload counters, copied from the workflow record's ``counters`` (Appendix A); each is a field of
# ``maopd.envs.records.Counters``.
COUNTER_FIELDS = (
    "search_actions",
    "searches_with_passages",
    "reports",
    "task_assignments",
    "input_tokens",
    "output_tokens",
)
COST_FIELDS = COUNTER_FIELDS + ("duration_s",)
REQUIRED_FIELDS = ("method", "dataset", "question_id", "attempt", "golden_answers", "final_output")
# The smallest record that loads, for harnesses and tests that break one field of it.
MINIMAL_RECORD = {
    "method": "m",
    "dataset": "d",
    "question_id": "q",
    "attempt": 0,
    "golden_answers": ["a"],
    "final_output": "<answer>a</answer>",
}


class RecordError(UserError, ValueError):
    """A record file or line is malformed. The message names the file and line."""


@dataclass
class EvalRecord:
    method: str
    dataset: str
    question_id: str
    attempt: int
    golden_answers: list[str]
    final_output: str | None
    question: str = ""
    strict_answer: str | None = None
    flexible_answer: str | None = None
    flexible_rule: int = 6
    score: float = 0.0
    flexible_score: float = 0.0
    failure: str | None = None
    counters: dict[str, float] = field(default_factory=dict)
    seed: int | None = None
    trajectory: WorkflowRecord | None = None

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.method, self.dataset, self.question_id, self.attempt)

    @property
    def question_key(self) -> tuple[str, str]:
        return (self.dataset, self.question_id)

    def to_dict(self) -> dict[str, Any]:
        row = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "counters"}
        if self.trajectory is None:
            del row["trajectory"]
        else:
            row["trajectory"] = self.trajectory.to_json()
        row.update(self.counters)  # flat: the counters sit next to the scores
        return row


def scored(record: EvalRecord) -> EvalRecord:
    """Fill the extractions, scores and failure kind from ``final_output`` (in place)."""
    flexible = flexible_answer(record.final_output)
    record.strict_answer = None if record.final_output is None else strict_answer(record.final_output)
    record.flexible_answer = flexible.answer
    record.flexible_rule = flexible.rule
    record.score = exact_match(record.strict_answer, record.golden_answers)
    record.flexible_score = exact_match(flexible.answer, record.golden_answers)
    record.failure = failure_kind(record.final_output)
    return record


def from_workflow(
    workflow: WorkflowRecord,
    method: str,
    dataset: str,
    attempt: int,
    seed: int | None = None,
    keep_trajectory: bool = True,
) -> EvalRecord:
    """Turn an environment's workflow record (envs/records.py) into a scored eval record.

    The final output is the last Answerer candidate: evaluation asks for one candidate per
    answering request, and the paper scores the last output of the Answerer.
    """
    candidates = workflow.candidates
    record = EvalRecord(
        method=method,
        dataset=dataset,
        question_id=str(workflow.question_id),
        attempt=attempt,
        golden_answers=list(workflow.golden_answers),
        final_output=candidates[-1] if candidates else None,
        question=workflow.question,
        counters={name: getattr(workflow.counters, name) for name in COUNTER_FIELDS}
        | {"duration_s": float(workflow.duration_s)},
        seed=seed,
        trajectory=workflow if keep_trajectory else None,
    )
    return scored(record)


def read_trajectory(trajectory: Any, where: str) -> WorkflowRecord:
    """The workflow record a record's ``trajectory`` holds; RecordError naming the field when one
    has the wrong type. A trajectory written by another system may leave fields out."""
    try:
        return WorkflowRecord.from_json(trajectory, "trajectory")
    except RecordFormatError as error:
        raise RecordError(f"{where}: {error}") from None


def record_from_dict(row: Any, where: str) -> EvalRecord:
    """Validate one JSON object and score it; errors name ``where`` and the field."""
    if not isinstance(row, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for name in REQUIRED_FIELDS:
        if name not in row:
            raise RecordError(f"{where}: missing field {name!r}")
    for name in ("method", "dataset"):
        if not isinstance(row[name], str) or not row[name]:
            raise RecordError(f"{where}: field {name!r} must be a non-empty string")
    if isinstance(row["attempt"], bool) or not isinstance(row["attempt"], int) or row["attempt"] < 0:
        raise RecordError(f"{where}: field 'attempt' must be a non-negative integer")
    answers = row["golden_answers"]
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise RecordError(f"{where}: field 'golden_answers' must be a non-empty list of strings")
    if row["final_output"] is not None and not isinstance(row["final_output"], str):
        raise RecordError(f"{where}: field 'final_output' must be a string or null")
    counters = {}
    for name in COST_FIELDS:
        if name in row:
            value = row[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise RecordError(f"{where}: field {name!r} must be a number")
            # bounded, so that no sum or mean of counters overflows to inf
            if not 0 <= value <= MAX_TOKEN_COUNT:
                raise RecordError(f"{where}: field {name!r} must be a number in [0, 2**53], got {shown(value)}")
            counters[name] = value
    trajectory = row.get("trajectory")
    if trajectory is not None:
        trajectory = read_trajectory(trajectory, where)
    record = EvalRecord(
        method=row["method"],
        dataset=row["dataset"],
        question_id=str(row["question_id"]),
        attempt=row["attempt"],
        golden_answers=answers,
        final_output=row["final_output"],
        question=str(row.get("question", "")),
        counters=counters,
        seed=row.get("seed"),
        trajectory=trajectory,
    )
    return scored(record)


def iter_records(path: str | Path) -> Iterator[EvalRecord]:
    for where, row in iter_json_lines(path, RecordError, "record file"):
        yield record_from_dict(row, where)


def load_records(paths: Iterable[str | Path]) -> list[EvalRecord]:
    """Load several files; a repeated (method, dataset, question_id, attempt) is an error."""
    records: list[EvalRecord] = []
    seen: dict[tuple, str] = {}
    for path in paths:
        for number, record in enumerate(iter_records(path), start=1):
            if record.key in seen:
                raise RecordError(f"{path}: record {number} repeats {record.key} first seen in {seen[record.key]}")
            seen[record.key] = str(path)
            records.append(record)
    return records


def record_line(record: EvalRecord) -> str:
    return json_text(record.to_dict(), f"record {record.key}", ensure_ascii=False) + "\n"
