"""Questions in the FlashRAG dataset format: ``{"id", "question", "golden_answers": [...], "metadata"}``."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maopd.base.atomic import open_atomically
from maopd.base.errors import UserError
from maopd.base.json_files import iter_json_lines, json_text


class DatasetError(UserError, ValueError):
    """A dataset file or line is malformed. The message names the file and line."""


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    golden_answers: tuple[str, ...]
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "golden_answers": list(self.golden_answers),
            "metadata": self.metadata,
        }

    @classmethod
    def from_user(cls, row: Any) -> Question:
        """A question given in code (``reset(options={"question": ...})``, ``env(questions=[...])``):
        as ``from_dict``, but a missing ``id`` is derived from the question text."""
        if isinstance(row, dict) and "id" not in row and isinstance(row.get("question"), str):
            row = {**row, "id": derived_id(row["question"])}
        return cls.from_dict(row)

    @classmethod
    def from_dict(cls, row: Any, where: str = "question") -> Question:
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: expected a JSON object, got {type(row).__name__}")
        for name in ("id", "question", "golden_answers"):
            if name not in row:
                raise DatasetError(f"{where}: missing field {name!r}")
        if not isinstance(row["question"], str) or not row["question"].strip():
            raise DatasetError(f"{where}: field 'question' must be a non-empty string")
        answers = row["golden_answers"]
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            # a question without an answer runs, and fails only when it is scored
            raise DatasetError(f"{where}: field 'golden_answers' must be a non-empty list of strings")
        metadata = row.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise DatasetError(f"{where}: field 'metadata' must be an object")
        return cls(str(row["id"]), row["question"], tuple(answers), metadata)


def derived_id(text: str) -> str:
    """A stable id for a question given without one: ``q-`` and 12 hex digits of its text's SHA-256."""
    return "q-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def iter_questions(path: str | Path) -> Iterator[Question]:
    for where, row in iter_json_lines(path, DatasetError, "dataset file"):
        yield Question.from_dict(row, where)


def load_questions(path: str | Path) -> list[Question]:
    return list(iter_questions(path))


def write_questions(questions: list[Question], path: str | Path) -> None:
    with open_atomically(path) as handle:
        for q in questions:
            handle.write(json_text(q.to_dict(), f"{path}: question {q.id}", ensure_ascii=False) + "\n")
