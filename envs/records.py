"""The workflow record: everything one finished trajectory produced, typed.

One ``WorkflowRecord`` per trajectory (one run of a workflow on one question); the environment
sets it as ``env.record`` when the episode ends. Code reads it through attributes
(``record.rewards.em``, ``record.counters.search_actions``, ``record.calls[0].outputs``).
``to_json()`` gives its JSON form, the dict that is written to JSONL files, and
``WorkflowRecord.from_json()`` reads that form back, checking every field's type.

Fields, in the order the JSON form has them:

``workflow``, ``question_id``, ``question``, ``golden_answers``
``subtasks``         [``Subtask``] every assignment the Leader made (empty in the cascade)
``dropped_subtasks`` subtasks beyond the number of Searcher slots, ignored
``reports``          [``Report``] every Searcher report
``selected_reports`` report numbers handed to the Answerer
``searches``         [``Search``] every executed search with the passages it returned
``candidates``       the Answerer's outputs (the single agent's final output), one per candidate
``extracted_answers`` text of each candidate's last <answer> tag, or None
``candidate_scores`` c_ij per candidate
``rewards``          ``RewardParts``
``counters``         ``Counters``
``format_errors``    [``FormatError``]
``calls``            [``CallRecord``] every model call with its final chat history: the
                     demonstrations for SFT
``duration_s``       wall-clock seconds from reset to the end of the episode

Every output a record keeps (``calls[].outputs`` and ``candidates``) is cut to the environment's
``max_action_chars``, the length the chat histories show; a call with an output that was longer
records every output's original length in ``output_chars``.

Versions
--------
``RECORD_VERSION`` is the newest format. A record states its version in ``version`` (the first key
of the JSON form) only when it uses a field the previous versions lack, so that every other record
is byte for byte what earlier versions wrote and their readers read it; a record without
``version`` is version 1. Version 1: the fields above. Version 2: adds ``CallRecord.output_chars``.
``from_json`` reads every version up to ``RECORD_VERSION`` and refuses a newer one.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any, Self, Union

from maopd.base.errors import UserError
from maopd.envs.retrieval.base import Passage

RECORD_VERSION = 2


class RecordFormatError(UserError, ValueError):
    """A workflow record's JSON form is malformed; the message names the field."""


def _omitted_when_none() -> Any:
    """A field that the JSON form leaves out while it is None (it is only there when it applies)."""
    return field(default=None, metadata={"omitted_when_none": True})


def _flattened() -> Any:
    """A dict field whose entries the JSON form holds as keys of their own, after the other fields."""
    return field(default_factory=dict, metadata={"flattened": True})


class JsonRecord:
    """``to_json``/``from_json`` for the record's dataclasses, from their fields and type hints.

    ``to_json`` shares the record's lists of plain values (strings, numbers, chat messages) instead
    of copying them: its result is for writing out, not for changing.
    """

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)

    @classmethod
    def from_json(cls, data: Any, where: str = "record") -> Self:
        """The record that ``data`` (its JSON form) holds; a missing field takes its default, a field
        of the wrong type is a ``RecordFormatError`` naming it as ``where.field``."""
        return _from_json(cls, data, where)


@dataclass
class Subtask(JsonRecord):
    """An assignment of the Leader: ``task`` went to Searcher slot ``agent`` in delegation round ``wave``."""

    wave: int = 0
    agent: str = ""
    task: str = ""


@dataclass
class Report(JsonRecord):
    """A Searcher's report, numbered from 1 in the order reports arrived; ``forced``: the
    ``(no report)`` a Searcher that failed its last step under ``force_finish`` gets."""

    number: int = 0
    wave: int = 0
    agent: str = ""
    task: str = ""
    text: str = ""
    forced: bool = False


@dataclass
class Search(JsonRecord):
    """An executed search of call ``agent`` in ``wave`` and the passages it returned, best first."""

    wave: int = 0
    agent: str = ""
    query: str = ""
    passages: list[Passage] = field(default_factory=list)


@dataclass
class RewardParts(JsonRecord):
    """The trajectory's rewards (envs/rewards.py): ``em`` is R_EM; ``leader`` the Leader's reward
    (None in the workflows without one); ``answerer`` one reward per candidate; ``searchers`` each
    Searcher slot's mean over its calls; ``searcher_calls`` and ``search_bonus`` (b_S) one entry per
    Searcher call, in the order of the record's Searcher calls; ``assign_bonus`` R_assign; ``roles``
    the reward of each role only some workflows have, by the role's name (the single agent's
    ``solver``), each a key of its own in the JSON form."""

    em: float = 0.0
    leader: float | None = None
    answerer: list[float] = field(default_factory=list)
    searchers: dict[str, float] = field(default_factory=dict)
    searcher_calls: list[float] = field(default_factory=list)
    search_bonus: list[float] = field(default_factory=list)
    assign_bonus: float = 0.0
    roles: dict[str, float] = _flattened()


@dataclass
class Counters(JsonRecord):
    """Per-trajectory counters, as the paper's Appendix A records them.

    ``search_actions`` counts executed searches (non-empty query in a complete ``<search>`` tag);
    ``searches_with_passages`` those that returned at least one passage; ``tool_steps`` is C_tool,
    the environment steps containing at least one search action. Token counts add up what the
    policy reported per call (0 when a policy reports none). ``no_answer`` (1 when the workflow
    ended without an Answerer candidate) and ``unreported_calls`` (Searcher calls whose budget ran
    out before they reported) are only set, and only in the JSON form, under ``force_finish=False``.
    """

    search_actions: int = 0
    searches_with_passages: int = 0
    reports: int = 0
    forced_reports: int = 0
    task_assignments: int = 0
    delegation_rounds: int = 0
    format_failures: int = 0
    tool_steps: int = 0
    env_steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    no_answer: int | None = _omitted_when_none()
    unreported_calls: int | None = _omitted_when_none()


@dataclass
class FormatError(JsonRecord):
    """A format failure: what was wrong with ``agent``'s output in environment step ``env_step``."""

    env_step: int = 0
    agent: str = ""
    error: str = ""


@dataclass
class CallRecord(JsonRecord):
    """One model call: ``call_id`` (``searcher_0@w2`` for a Searcher assignment, else the agent),
    its ``role`` and delegation ``wave`` (None outside the Searchers), its final chat history
    ``messages`` ({role, content} dicts), its ``outputs`` in order and the token counts its policy
    reported. ``output_chars``: every output's length before it was cut to ``max_action_chars``,
    present only when one was cut."""

    call_id: str = ""
    agent: str = ""
    role: str = ""
    wave: int | None = None
    messages: list[dict[str, str]] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    output_chars: list[int] | None = _omitted_when_none()


@dataclass
class WorkflowRecord(JsonRecord):
    """Everything one finished trajectory produced; the fields are the module docstring's."""

    workflow: str = ""
    question_id: str = ""
    question: str = ""
    golden_answers: list[str] = field(default_factory=list)
    subtasks: list[Subtask] = field(default_factory=list)
    dropped_subtasks: list[str] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)
    selected_reports: list[int] = field(default_factory=list)
    searches: list[Search] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)
    extracted_answers: list[str | None] = field(default_factory=list)
    candidate_scores: list[float] = field(default_factory=list)
    rewards: RewardParts = field(default_factory=RewardParts)
    counters: Counters = field(default_factory=Counters)
    format_errors: list[FormatError] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def version(self) -> int:
        """The oldest format that holds this record: what its JSON form states (module docstring)."""
        # version 2 added output_chars
        return 2 if any(call.output_chars is not None for call in self.calls) else 1

    def to_json(self) -> dict[str, Any]:
        version = self.version
        return {"version": version, **_to_json(self)} if version > 1 else _to_json(self)

    @classmethod
    def from_json(cls, data: Any, where: str = "record") -> WorkflowRecord:
        if isinstance(data, dict) and "version" in data:
            version = data["version"]
            if isinstance(version, bool) or not isinstance(version, int) or version < 1:
                raise RecordFormatError(f"field '{where}.version' must be a positive integer, got {version!r}")
            if version > RECORD_VERSION:
                raise RecordFormatError(
                    f"'{where}' is a version {version} workflow record; this multiagent-opd reads versions up to "
                    f"{RECORD_VERSION}: upgrade it to read this file"
                )
        return _from_json(cls, data, where)

    def searcher_calls(self) -> list[CallRecord]:
        """The Searcher calls, in the order of ``rewards.searcher_calls`` and ``rewards.search_bonus``."""
        return [call for call in self.calls if call.role == "searcher"]

    def __getitem__(self, key: str) -> Any:
        # code that reads the record as a dict (env.record["rewards"]) is told how to read it
        shown = f"record.{key}" if isinstance(key, str) and key.isidentifier() else "the record's attributes"
        raise TypeError(
            f"a WorkflowRecord is read through attributes: {shown} (docs/environments.md); "
            f"record.to_json() gives the JSON dict"
        )


# ----- the JSON form, from the fields and their types ---------------------------------------------


@dataclass(frozen=True)
class _Field:
    name: str
    kind: Any
    omitted_when_none: bool
    flattened: bool
    required: bool


@functools.cache
def _layout(cls: type) -> tuple[_Field, ...]:
    """The fields of a record class, in order, with their types and how the JSON form holds them."""
    hints = typing.get_type_hints(cls)
    return tuple(
        _Field(
            f.name,
            hints[f.name],
            bool(f.metadata.get("omitted_when_none")),
            bool(f.metadata.get("flattened")),
            f.default is MISSING and f.default_factory is MISSING,
        )
        for f in fields(cls)
    )


def _to_json(record: Any) -> dict[str, Any]:
    data = {}
    for spec in _layout(type(record)):
        value = getattr(record, spec.name)
        if spec.flattened:
            data.update(value)
        elif value is not None or not spec.omitted_when_none:
            data[spec.name] = _json_value(value, spec.kind)
    return data


@functools.cache
def _holds_records(kind: Any) -> bool:
    """Whether values of type ``kind`` contain record dataclasses (else they are JSON as they are)."""
    if is_dataclass(kind):
        return True
    return any(_holds_records(arg) for arg in typing.get_args(kind))


def _json_value(value: Any, kind: Any) -> Any:
    if value is None or not _holds_records(kind):
        return value
    if is_dataclass(kind):
        return _to_json(value)
    args = typing.get_args(kind)
    if typing.get_origin(kind) is list:
        return [_json_value(item, args[0]) for item in value]
    if typing.get_origin(kind) is dict:
        return {key: _json_value(item, args[1]) for key, item in value.items()}
    return _json_value(value, next(arg for arg in args if arg is not type(None)))  # X | None


_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _from_json(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise RecordFormatError(f"field '{where}' must be an object, got {_type_name(data)}")
    values = {}
    layout = _layout(cls)
    for spec in layout:
        if spec.flattened:  # the keys that are no other field's
            named = {other.name for other in layout}
            rest = {key: value for key, value in data.items() if key not in named}
            values[spec.name] = _read(rest, spec.kind, where)
        elif spec.name in data:
            values[spec.name] = _read(data[spec.name], spec.kind, f"{where}.{spec.name}")
        elif spec.required:  # a passage's fields have no defaults
            raise RecordFormatError(f"field '{where}.{spec.name}' is missing")
    return cls(**values)


def _read(value: Any, kind: Any, where: str) -> Any:
    """``value`` checked against the type ``kind``; record dataclasses are built from their objects."""
    origin = typing.get_origin(kind)
    if is_dataclass(kind):
        return _from_json(kind, value, where)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in typing.get_args(kind):
            return None
        (inner,) = (arg for arg in typing.get_args(kind) if arg is not type(None))
        return _read(value, inner, where)
    if origin is list:
        if not isinstance(value, list):
            raise RecordFormatError(f"field '{where}' must be a list, got {_type_name(value)}")
        (item,) = typing.get_args(kind)
        return [_read(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordFormatError(f"field '{where}' must be an object, got {_type_name(value)}")
        _, item = typing.get_args(kind)
        return {k: _read(v, item, f"{where}.{k}") for k, v in value.items()}
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise RecordFormatError(f"field '{where}' must be {_NAMES[kind]}, got {_type_name(value)}")
    return value


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__
