"""The score matrix: every evaluation score of several systems over several training seeds.

``scores[q, a, s, m]`` is the strict exact-match score (the records' ``score``, 0 or 1) of attempt
``a`` of question ``q`` in the evaluation of system ``m`` trained with seed ``s``. Every cell is
filled: each system has, in every seed, the same questions with the same number of attempts
(a missing cell is an error, never a silent gap). Questions are ``(dataset, question_id)`` pairs
sorted as ``metrics.arrange`` sorts them, so statistics from the matrix equal those from the
records. The file format (JSON, one question a line) is documented in docs/evaluation.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from maopd.base.arguments import repeated
from maopd.base.atomic import write_text_atomically
from maopd.base.errors import UserError
from maopd.base.json_files import read_json_file
from maopd.evaluation.metrics import arrange
from maopd.evaluation.records import EvalRecord

FORMAT = "maopd score matrix"
VERSION = 1
AXES = ("question", "attempt", "seed", "system")
WRITTEN_BY = "give the score_matrix.json a seed report writes"
SCORE = "strict exact match (records' score) of each workflow's final output, 0 or 1"


class ScoreMatrixError(UserError, ValueError):
    """A score matrix (or the records it is built from) is malformed; the message names the problem."""


@dataclass(frozen=True, eq=False)
class ScoreMatrix:
    questions: tuple[tuple[str, str], ...]  # (dataset, question_id), sorted, unique
    seeds: tuple[str, ...]  # training seeds' labels, e.g. the run directories' names
    systems: tuple[str, ...]
    scores: np.ndarray  # float, (questions, attempts, seeds, systems)

    def __post_init__(self) -> None:
        problem = _problem(self.questions, self.seeds, self.systems, self.scores)
        if problem:
            raise ScoreMatrixError(f"score matrix: {problem}")

    @property
    def attempts(self) -> int:
        return self.scores.shape[1]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ScoreMatrix)
            and (self.questions, self.seeds, self.systems) == (other.questions, other.seeds, other.systems)
            and np.array_equal(self.scores, other.scores)
        )

    def system(self, name: str) -> np.ndarray:
        """One system's scores, (questions, attempts, seeds); an unknown name is a one-line error."""
        if name not in self.systems:
            raise ScoreMatrixError(f"no system {name!r} in the score matrix; its systems: {', '.join(self.systems)}")
        return self.scores[:, :, :, self.systems.index(name)]

    def by_dataset(self, per_question: np.ndarray) -> dict[str, np.ndarray]:
        """A per-question vector split into the datasets' vectors, as the metrics macro-average them."""
        datasets = np.array([dataset for dataset, _ in self.questions], dtype=object)
        return {d: per_question[datasets == d] for d in sorted(set(datasets))}


def _problem(questions, seeds, systems, scores) -> str | None:
    """What makes these axes and scores not a score matrix, or None."""
    for name, axis in (("seeds", seeds), ("systems", systems)):
        if not axis or not all(isinstance(v, str) and v for v in axis):
            return f"{name} must be a non-empty list of non-empty strings"
        if len(set(axis)) != len(axis):
            return f"{name} repeat a name: {', '.join(repeated(axis))}"
    if not questions or not all(
        isinstance(q, tuple) and len(q) == 2 and all(isinstance(p, str) and p for p in q) for q in questions
    ):
        return "questions must be a non-empty list of [dataset, question_id] string pairs"
    if list(questions) != sorted(set(questions)):
        return "questions must be unique and sorted by (dataset, question_id)"
    if not isinstance(scores, np.ndarray) or scores.ndim != len(AXES) or scores.dtype != float:
        return f"scores must be a float array with axes {' × '.join(AXES)}"
    expected = (len(questions), scores.shape[1], len(seeds), len(systems))
    if scores.shape != expected or scores.shape[1] < 1:
        return f"scores have shape {scores.shape}; the axes give {expected} (and at least 1 attempt)"
    if not np.isfinite(scores).all() or (scores < 0).any() or (scores > 1).any():
        return "every score must be a number between 0 and 1"
    return None


def matrix_from_records(
    per_seed: Mapping[str, Sequence[EvalRecord]], systems: Sequence[str] | None = None
) -> ScoreMatrix:
    """The score matrix of the records of each training seed (``{seed label: records}``).

    ``systems`` defaults to every method in the records. Each must have, in every seed, the same
    questions and attempts per question; attempts keep their order (``metrics.arrange``)."""
    arranged = {seed: arrange(records) for seed, records in per_seed.items()}
    if not arranged:
        raise ScoreMatrixError("score matrix: no seeds given")
    names = sorted({m for methods in arranged.values() for m in methods}) if systems is None else list(systems)
    cells = {}
    for seed, methods in arranged.items():
        for name in names:
            if name not in methods:
                raise ScoreMatrixError(f"score matrix: system {name!r} has no records in seed {seed!r}")
            scores = methods[name]
            questions = [(d, q) for d in sorted(scores.question_ids) for q in scores.question_ids[d]]
            table = np.concatenate([scores.attempt_values[d]["score"] for d in sorted(scores.question_ids)])
            cells[seed, name] = (questions, table)
    (first_seed, first_name), (questions, first) = next(iter(cells.items()))
    for (seed, name), (other, table) in cells.items():
        if other != questions:
            differ = sorted(set(other) ^ set(questions))
            raise ScoreMatrixError(
                f"score matrix: {name!r} in seed {seed!r} and {first_name!r} in seed {first_seed!r} differ on "
                f"{len(differ)} question(s), e.g. {', '.join('/'.join(q) for q in differ[:5])}"
            )
        if table.shape != first.shape:
            raise ScoreMatrixError(
                f"score matrix: {name!r} in seed {seed!r} has {table.shape[1]} attempts per question, "
                f"{first_name!r} in seed {first_seed!r} {first.shape[1]}"
            )
    scores = np.stack(
        [np.stack([cells[seed, name][1] for name in names], axis=-1) for seed in arranged], axis=2
    ).astype(float)
    return ScoreMatrix(tuple(questions), tuple(arranged), tuple(names), scores)


def _number(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def write_matrix(matrix: ScoreMatrix, path: str | Path) -> Path:
    """Write ``matrix`` as JSON: the axes first, then one line per question of ``scores``."""
    header = {
        "format": FORMAT,
        "version": VERSION,
        "score": SCORE,
        "axes": list(AXES),
        "attempts": matrix.attempts,
        "seeds": list(matrix.seeds),
        "systems": list(matrix.systems),
    }
    rows = [
        json.dumps([[[_number(float(v)) for v in seed] for seed in attempt] for attempt in q]) for q in matrix.scores
    ]
    lines = ["{", *(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}," for k, v in header.items())]
    lines += [
        '  "questions": [',
        ",\n".join(f"    {json.dumps(list(q), ensure_ascii=False)}" for q in matrix.questions),
    ]
    lines += ["  ],", '  "scores": [', ",\n".join(f"    {row}" for row in rows), "  ]", "}"]
    path = Path(path)
    write_text_atomically(path, "\n".join(lines) + "\n")
    return path


def read_matrix(path: str | Path) -> ScoreMatrix:
    """Read a file ``write_matrix`` wrote; a malformed one is a one-line error naming it."""
    path = Path(path)
    try:
        data = read_json_file(path, ScoreMatrixError, "score matrix")
    except ScoreMatrixError as exc:
        raise ScoreMatrixError(f"{exc}; {WRITTEN_BY}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ScoreMatrixError(f'{path}: not a score matrix (no "format": {json.dumps(FORMAT)}); {WRITTEN_BY}')
    if data.get("version") != VERSION:
        raise ScoreMatrixError(f"{path}: score matrix version {data.get('version')!r}; this code reads {VERSION}")
    if data.get("axes") != list(AXES):
        raise ScoreMatrixError(f'{path}: "axes" must be {json.dumps(list(AXES))}')
    missing = [k for k in ("attempts", "seeds", "systems", "questions", "scores") if k not in data]
    if missing:
        raise ScoreMatrixError(f"{path}: score matrix lacks {', '.join(missing)}")
    attempts, seeds, systems = data["attempts"], data["seeds"], data["systems"]
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ScoreMatrixError(f'{path}: "attempts" must be a positive integer')
    if not isinstance(seeds, list) or not isinstance(systems, list) or not isinstance(data["questions"], list):
        raise ScoreMatrixError(f'{path}: "seeds", "systems" and "questions" must be lists')
    questions = tuple(tuple(q) if isinstance(q, list) else q for q in data["questions"])
    shape = (len(questions), attempts, len(seeds), len(systems))
    scores = data["scores"]
    if not _has_shape(scores, shape):
        raise ScoreMatrixError(
            f'{path}: "scores" must be nested lists of numbers of shape {shape} ({" × ".join(AXES)})'
        )
    try:
        return ScoreMatrix(questions, tuple(seeds), tuple(systems), np.asarray(scores, dtype=float))
    except ScoreMatrixError as exc:
        raise ScoreMatrixError(f"{path}: {exc}") from None


def _has_shape(value: object, shape: tuple[int, ...]) -> bool:
    """Whether nested lists ``value`` have exactly ``shape``, with real numbers as leaves."""
    if not shape:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, list) and len(value) == shape[0] and all(_has_shape(v, shape[1:]) for v in value)
