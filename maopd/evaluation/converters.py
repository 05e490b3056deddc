"""Converters from the raw dataset formats in ``shared/data/real/`` to FlashRAG questions.

Each converter yields ``Example``s: a ``Question`` (``id``, ``question``, ``golden_answers``,
``metadata``) and the paragraphs the raw row carries, as (title, text) pairs. Paragraphs let a
closed-corpus benchmark pool every question's context into one corpus (``pool_corpus``).
Errors name the file and the line (JSON Lines) or the item (JSON arrays).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maopd.base.json_files import iter_json_lines, read_json_file
from maopd.envs.datasets import DatasetError, Question, iter_questions
from maopd.envs.retrieval.corpus import Corpus, Document


@dataclass(frozen=True)
class Example:
    question: Question
    paragraphs: tuple[tuple[str, str], ...] = ()


def _rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, row) for a JSON Lines file or a JSON array file."""
    if not path.is_file():
        raise DatasetError(f"dataset file {path} does not exist")
    with path.open(encoding="utf-8-sig", errors="replace") as handle:
        is_array = handle.read(4096).lstrip().startswith("[")
    if not is_array:
        yield from iter_json_lines(path, DatasetError, "dataset file")
        return
    for number, row in enumerate(read_json_file(path, DatasetError, "dataset file"), start=1):
        yield f"{path}: item {number}", row


def _field(row: Any, name: str, where: str, kind: type | tuple[type, ...] = str) -> Any:
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if name not in row:
        raise DatasetError(f"{where}: missing field {name!r}")
    if not isinstance(row[name], kind):
        raise DatasetError(f"{where}: field {name!r} has type {type(row[name]).__name__}")
    return row[name]


def _paragraphs(items: Any, title: str, text: str, where: str) -> tuple[tuple[str, str], ...]:
    """(title, text) pairs from a list of paragraph objects."""
    if not isinstance(items, list) or not all(isinstance(p, dict) and title in p and text in p for p in items):
        raise DatasetError(f"{where}: paragraphs must be objects with {title!r} and {text!r}")
    return tuple((p[title], p[text]) for p in items)


def _answers(*groups: Any) -> tuple[str, ...]:
    """Unique non-empty answers in order."""
    seen: dict[str, None] = {}
    for group in groups:
        for answer in [group] if isinstance(group, str) else group:
            if isinstance(answer, str) and answer.strip():
                seen.setdefault(answer.strip(), None)
    return tuple(seen)


def _question(qid: Any, text: str, answers: tuple[str, ...], where: str, **metadata: Any) -> Question:
    if not answers:
        raise DatasetError(f"{where}: no answer")
    return Question.from_dict(
        {"id": str(qid), "question": text, "golden_answers": list(answers), "metadata": metadata}, where
    )


def convert_flashrag(path: Path) -> Iterator[Example]:
    for question in iter_questions(path):
        yield Example(question)


def convert_hotpotqa(path: Path) -> Iterator[Example]:
    """HotpotQA distractor: ``context`` is {title: [...], sentences: [[...]]}."""
    for where, row in _rows(path):
        context = _field(row, "context", where, dict)
        paragraphs = tuple(
            (title, "".join(sentences))
            for title, sentences in zip(context.get("title", []), context.get("sentences", []))
        )
        question = _question(
            _field(row, "id", where),
            _field(row, "question", where),
            _answers(_field(row, "answer", where)),
            where,
            type=row.get("type"),
            level=row.get("level"),
        )
        yield Example(question, paragraphs)


def convert_2wiki(path: Path) -> Iterator[Example]:
    """2WikiMultihopQA: ``context`` is [[title, [sentences]]] (absent on some rows)."""
    for where, row in _rows(path):
        qid = _field(row, "_id", where)
        context = row.get("context") or []
        if not all(isinstance(item, list) and len(item) == 2 for item in context):
            raise DatasetError(f"{where}: field 'context' must be a list of [title, sentences]")
        paragraphs = tuple((title, " ".join(sentences)) for title, sentences in context)
        question = _question(
            qid,
            _field(row, "question", where),
            _answers(_field(row, "answer", where)),
            where,
            type=row.get("type"),
        )
        yield Example(question, paragraphs)


def _string_list(value: Any, where: str, name: str) -> list:
    """A list that some sources store as its JSON or Python repr."""
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(value)
            except (ValueError, SyntaxError):
                continue
            if isinstance(parsed, list):
                return parsed
    raise DatasetError(f"{where}: field {name!r} is not a list")


def convert_musique(path: Path) -> Iterator[Example]:
    """MuSiQue-Ans: ``answer`` plus ``answer_aliases``; ``paragraphs`` [{title, paragraph_text}]."""
    for where, row in _rows(path):
        paragraphs = _paragraphs(_field(row, "paragraphs", where, list), "title", "paragraph_text", where)
        aliases = _string_list(row.get("answer_aliases", []), where, "answer_aliases")
        question = _question(
            _field(row, "id", where),
            _field(row, "question", where),
            _answers(_field(row, "answer", where), aliases),
            where,
        )
        yield Example(question, paragraphs)


def convert_popqa(path: Path) -> Iterator[Example]:
    """PopQA: ``possible_answers`` is a JSON string; ``paragraphs`` [{title, text}]."""
    for where, row in _rows(path):
        answers = _string_list(_field(row, "possible_answers", where, (str, list)), where, "possible_answers")
        paragraphs = _paragraphs(row.get("paragraphs", []), "title", "text", where)
        question = _question(
            _field(row, "id", where, (str, int)),
            _field(row, "question", where),
            _answers(answers),
            where,
            prop=row.get("prop"),
            s_pop=row.get("s_pop"),
        )
        yield Example(question, paragraphs)


def convert_bamboogle_decomposed(path: Path) -> Iterator[Example]:
    """Bamboogle with gold two-step decompositions; ids are the 0-based item positions."""
    for index, (where, row) in enumerate(_rows(path)):
        question = _question(
            index,
            _field(row, "Question", where),
            _answers(_field(row, "Answer", where)),
            where,
            decomposition=[row.get("Q1"), row.get("Q2")],
        )
        yield Example(question)


def convert_dpr_nq(path: Path) -> Iterator[Example]:
    """DPR NQ: ``answers`` list and ``positive_ctxs`` [{title, text}]; ids are item positions."""
    for index, (where, row) in enumerate(_rows(path)):
        paragraphs = _paragraphs(_field(row, "positive_ctxs", where, list), "title", "text", where)
        question = _question(
            index, _field(row, "question", where), _answers(_field(row, "answers", where, list)), where
        )
        yield Example(question, paragraphs)


CONVERTERS: dict[str, Callable[[Path], Iterator[Example]]] = {
    "flashrag": convert_flashrag,
    "hotpotqa": convert_hotpotqa,
    "2wiki": convert_2wiki,
    "musique": convert_musique,
    "popqa": convert_popqa,
    "bamboogle-decomposed": convert_bamboogle_decomposed,
    "dpr-nq": convert_dpr_nq,
}


def convert(path: str | Path, fmt: str) -> list[Example]:
    if fmt not in CONVERTERS:
        raise DatasetError(f"unknown format {fmt!r}; expected one of {sorted(CONVERTERS)}")
    return list(CONVERTERS[fmt](Path(path)))


def pool_corpus(examples: list[Example]) -> Corpus:
    """One corpus of every example's paragraphs, deduplicated by title + text."""
    unique = dict.fromkeys(paragraph for example in examples for paragraph in example.paragraphs)
    return Corpus(Document(f"p{number}", title, text) for number, (title, text) in enumerate(unique))
