"""The action grammar shared by the environments and every policy.

Each role acts by writing one action tag; free text around it (for example ReAct-style
reasoning before a search) is allowed and ignored. Which tags a role may write is its ``Role``'s
``actions`` (``maopd.envs.team``); the built-in roles' are:

=========  ==========================================  ======================================
role       action                                      meaning
=========  ==========================================  ======================================
searcher   ``<search>query</search>``                  retrieve top-k passages for ``query``
searcher   ``<report>text</report>``                   finish the (sub)task with a report
leader     ``<delegate>one subtask per line</delegate>``  start a wave, one Searcher a line
leader     ``<select>1, 3</select>`` / ``<select>all</select>``  hand these reports to the Answerer
answerer   ``<answer>text</answer>``                   the final answer
solver     ``<search>query</search>``                  retrieve top-k passages (single agent)
solver     ``<answer>text</answer>``                   the final answer (single agent)
=========  ==========================================  ======================================

Parsing rules (documented in docs/environments.md and tested):

* Outputs longer than ``max_chars`` are truncated to ``max_chars`` and flagged: an over-long
  output is a format failure even if the kept prefix holds a valid tag.
* The action is the **last complete** action tag of the role's kinds in the output, which for the
  Answerer is exactly the paper's "last ``<answer>`` tag" rule. Tags are case-sensitive.
* A search needs a non-empty query; a report, a delegation and a selection need non-empty content.
  An answer may be empty (it then scores 0 but is not a format failure).
* A tag of a kind the role may not use *now* (see the environment's ``action_mask``) is a
  format failure.

The parser only ever reads a policy's own output. Text the environment inserts (passages,
subtasks, reports) is never parsed, and ``neutralize_tags`` escapes tag look-alikes in it so that
an adversarial passage cannot impersonate an action in a model's context either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from maopd.envs import team
from maopd.envs.roles import ROLES
from maopd.envs.team import ACTION_KINDS, EXTRA_ACTION_KINDS

# Every built-in role (``maopd.envs.roles``); a role's id in training batches is ``team.role_id``.
ROLE_IDS = {name: team.role_id(name) for name in ROLES}
LEADER, SEARCHER, ANSWERER, SOLVER = (ROLE_IDS[name] for name in ROLES)
ROLE_ACTION_KINDS = {name: team.role(name).actions for name in ROLES}
STOP_STRINGS = tuple(f"</{kind}>" for kind in ACTION_KINDS)
# Tags the environment itself writes around inserted text; escaped in inserted text too.
STRUCTURAL_TAGS = ("information", "think", "task", "reports")

# A complete tag holds no opening tag of its own kind: in "<select> the reports … <select>all</select>"
# (a model echoing the last-turn notice) the action is "all", not " the reports … <select>all".
_TAG_PATTERNS = {
    kind: re.compile(rf"<{kind}>((?:(?!<{kind}>).)*?)</{kind}>", re.DOTALL)
    for kind in (*ACTION_KINDS, *EXTRA_ACTION_KINDS)
}
VERDICTS = ("yes", "no")  # what a <judge> holds
_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\(?\d+[.):]|task\s*\d+\s*:)\s*", re.IGNORECASE)
_ANY_TAG = re.compile(
    r"<(/?)\s*(" + "|".join(ACTION_KINDS + EXTRA_ACTION_KINDS + STRUCTURAL_TAGS) + r")\s*>", re.IGNORECASE
)


@dataclass(frozen=True)
class ParsedAction:
    """One parsed output. ``kind`` is None when no valid action was found (a format failure)."""

    kind: str | None
    content: str = ""
    error: str | None = None
    truncated: bool = False
    subtasks: tuple[str, ...] = field(default=())
    selection: tuple[int, ...] | None = None  # None means "all reports"

    @property
    def valid(self) -> bool:
        return self.error is None


def strict_answer(text: str) -> str | None:
    """The text inside the last complete ``<answer>`` tag, stripped; None if there is none."""
    matches = _TAG_PATTERNS["answer"].findall(text)
    return matches[-1].strip() if matches else None


def parse_subtasks(content: str) -> tuple[str, ...]:
    """One subtask per non-empty line, with list markers such as ``1.`` or ``-`` removed."""
    tasks = (_LIST_MARKER.sub("", line, count=1).strip() for line in content.splitlines())
    return tuple(task for task in tasks if task)


def parse_selection(content: str) -> tuple[int, ...] | None:
    """``all`` gives None (every report); otherwise report numbers, 1-based, in order, unique.

    Raises ValueError on anything else, so that a garbled selection is a format failure.
    """
    text = content.strip().lower()
    if text in {"all", "*"}:
        return None
    tokens = [t for t in re.split(r"[\s,;]+", text.replace("report", "")) if t]
    if not tokens:
        raise ValueError("empty selection")
    numbers = []
    for token in tokens:
        token = token.strip("#[]()")
        if not token.isdigit():
            raise ValueError(f"selection item {token!r} is not a report number")
        if int(token) not in numbers:
            numbers.append(int(token))
    return tuple(numbers)


def parse_action(text: str, role: str, allowed: tuple[str, ...] | None = None, max_chars: int = 8192) -> ParsedAction:
    """Parse one output of ``role``; ``allowed`` narrows the kinds permitted at this moment."""
    role_kinds = team.role(role).actions  # a ValueError naming the roles for an unknown one
    if not isinstance(text, str):
        return ParsedAction(None, error=f"output is {type(text).__name__}, not text")
    truncated = len(text) > max_chars
    if truncated:
        text = text[:max_chars]
    allowed = role_kinds if allowed is None else allowed

    last_kind, last_end, last_content = None, -1, ""
    for kind in role_kinds:
        for match in _TAG_PATTERNS[kind].finditer(text):
            if match.end() > last_end:
                last_kind, last_end, last_content = kind, match.end(), match.group(1)
    if last_kind is None:
        tags = " or ".join(f"<{k}>…</{k}>" for k in allowed)
        return ParsedAction(None, error=f"no complete action tag; expected {tags}", truncated=truncated)

    content = last_content.strip()
    error = None
    subtasks: tuple[str, ...] = ()
    selection: tuple[int, ...] | None = None
    if truncated:
        error = f"output longer than {max_chars} characters was truncated"
    elif last_kind not in allowed:
        error = f"<{last_kind}> is not allowed now; allowed: {', '.join(allowed)}"
    elif last_kind in ("search", "report") and not content:
        error = f"empty <{last_kind}>"
    elif last_kind == "delegate":
        subtasks = parse_subtasks(content)
        if not subtasks:
            error = "<delegate> holds no subtask"
    elif last_kind == "select":
        try:
            selection = parse_selection(content)
        except ValueError as exc:
            error = f"bad <select>: {exc}"
    elif last_kind == "judge" and content.lower() not in VERDICTS:
        error = f"bad <judge>: {content[:40]!r} is neither yes nor no"
    kind = last_kind if error is None else None
    if kind == "judge":
        content = content.lower()
    return ParsedAction(kind, content, error, truncated, subtasks, selection)


def neutralize_tags(text: str) -> str:
    """Escape anything that looks like an action or structural tag in environment-inserted text."""
    return _ANY_TAG.sub(lambda m: f"&lt;{m.group(1)}{m.group(2)}&gt;", text)


def action_contents(messages: Sequence[Mapping[str, str]], kind: str) -> list[str]:
    """The stripped content of every complete ``kind`` tag in the assistant's own messages."""
    return [
        match.strip()
        for message in messages
        if message["role"] == "assistant"
        for match in _TAG_PATTERNS[kind].findall(message["content"])
    ]
