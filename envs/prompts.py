"""Role prompts, the exact text of every environment-inserted message, and its parsers.

All roles are played by one model; the system prompt selects the role. Everything the
environment inserts into a model's context (passages, subtasks, reports, feedback) is built here,
with tag look-alikes neutralized, so the chat format has a single source of truth. The parsers
that rule-based policies use to read those messages back sit beside their writers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from maopd.envs import team
from maopd.envs.actions import neutralize_tags
from maopd.envs.policy import AgentTurn
from maopd.envs.retrieval.base import Passage
from maopd.envs.roles import ROLES

# Each role's system prompt and last-turn notice live on its ``Role`` (``maopd.envs.roles``).
ROLE_PROMPTS = {name: team.role(name).prompt for name in ROLES}
LAST_TURN_NOTICE = {name: notice for name in ROLES if (notice := team.role(name).last_turn_notice)}

NO_FACTS = "No relevant information found."  # the report of a Searcher that found nothing

# The Prompted Critic's judge (training/critic.py): a user message to the shared model, which
# answers <judge>yes</judge> or <judge>no</judge> (``judgement_text``). The prompt names the tag
# without a complete example, like the role prompts. The paper's Appendix C.4 template is not in our
# excerpts; this one is ours, with the same three slots.
CRITIC_PROMPT = (
    "You are a strict critic of a search assistant's report.\n"
    "Original question: {question}\n"
    "Sub-question given to the search assistant: {sub_query}\n"
    "Report: {summary}\n"
    "Does the report give specific, relevant facts that help answer the sub-question? "
    "Reply with a <judge> tag holding yes or no, and close the tag."
)
_JUDGE = re.compile(r"<judge>\s*(yes|no)\s*</judge>", re.IGNORECASE)


def critic_message(question: str, sub_query: str, summary: str) -> dict[str, str]:
    return {"role": "user", "content": CRITIC_PROMPT.format(question=question, sub_query=sub_query, summary=summary)}


def judgement_text(useful: bool) -> str:
    return f"<judge>{'yes' if useful else 'no'}</judge>"


def parse_judgement(text: str) -> float:
    """1.0 when the last ``<judge>`` tag says yes; anything else (no, missing, malformed) is 0."""
    verdicts = _JUDGE.findall(text)
    return float(bool(verdicts) and verdicts[-1].lower() == "yes")


def has_verdict(text: str) -> bool:
    """Whether a judge output holds a verdict ``parse_judgement`` can read."""
    return bool(_JUDGE.search(text))


def system_message(role: str) -> dict[str, str]:
    return {"role": "system", "content": team.role(role).prompt}


def task_message(task: str) -> dict[str, str]:
    return {"role": "user", "content": f"Task: {neutralize_tags(task)}"}


def solver_question_message(question: str) -> dict[str, str]:
    return {"role": "user", "content": f"Question: {neutralize_tags(question)}"}


def team_instructions(num_searchers: int, max_rounds: int) -> str:
    """The Leader's first message after its question (``AgentTurn.instructions``)."""
    return f"You have {num_searchers} Searchers per wave and at most {max_rounds} waves."


def question_message(question: str, num_searchers: int, max_rounds: int) -> dict[str, str]:
    return {
        "role": "user",
        "content": f"Question: {neutralize_tags(question)}\n{team_instructions(num_searchers, max_rounds)}",
    }


def format_passages(passages: Sequence[Passage], max_chars: int) -> str:
    if not passages:
        return "<information>\nNo results.\n</information>"
    lines = []
    for rank, passage in enumerate(passages, start=1):
        text = passage.text if len(passage.text) <= max_chars else passage.text[:max_chars] + "…"
        lines.append(f"[{rank}] {neutralize_tags(passage.title)}: {neutralize_tags(text)}")
    return "<information>\n" + "\n".join(lines) + "\n</information>"


def information_message(passages: Sequence[Passage], max_chars: int) -> dict[str, str]:
    return {"role": "user", "content": format_passages(passages, max_chars)}


def format_reports(reports: Sequence[tuple[int, str, str]]) -> str:
    """``reports`` holds (number, subtask, text); numbers are what the Leader selects by."""
    if not reports:
        return "Reports: none."
    lines = ["Reports:"]
    for number, subtask, text in reports:
        lines.append(f"[Report {number}] ({neutralize_tags(subtask)}) {neutralize_tags(text)}")
    return "\n".join(lines)


def reports_message(reports: Sequence[tuple[int, str, str]]) -> dict[str, str]:
    return {"role": "user", "content": format_reports(reports)}


def answerer_message(question: str, reports: Sequence[tuple[int, str, str]]) -> dict[str, str]:
    return {
        "role": "user",
        "content": f"Question: {neutralize_tags(question)}\n\n{format_reports(reports)}",
    }


def feedback_message(error: str, allowed: Sequence[str]) -> dict[str, str]:
    kinds = " or ".join(f"<{k}>" for k in allowed)
    return {"role": "user", "content": f"Invalid action ({neutralize_tags(error)}). Use {kinds}."}


# ----- reading the messages back ----------------------------------------------------------------
_PASSAGE_LINE = re.compile(r"^\[\d+\] (?P<title>[^:]*): (?P<text>.*)$")  # format_passages
_REPORT_LINE = re.compile(r"^\[Report (?P<number>\d+)\] \((?P<task>.*?)\) (?P<text>.*)$")  # format_reports


def strip_label(text: str, label: str) -> str:
    """The first line of ``text`` without its ``label`` ("Question:", "Task:")."""
    first = text.split("\n", 1)[0].strip()
    return first[len(label) :].strip() if first.startswith(label) else first


def user_texts(turn: AgentTurn, prefix: str) -> list[str]:
    """Every environment-inserted message of ``turn`` that starts with ``prefix``, in order."""
    return [m["content"] for m in turn.messages if m["role"] == "user" and m["content"].startswith(prefix)]


def parse_passages(content: str) -> list[tuple[str, str]]:
    """(title, text) of every passage line of one ``format_passages`` message."""
    return list(_parse_passages(content))


@functools.lru_cache(maxsize=1 << 14)  # a Searcher's menu re-reads every message of its call at each step
def _parse_passages(content: str) -> tuple[tuple[str, str], ...]:
    return tuple((m["title"], m["text"]) for m in map(_PASSAGE_LINE.match, content.splitlines()) if m)


def passage_texts(turn: AgentTurn) -> list[str]:
    """Every passage the Searcher has read in this call, in order."""
    return [text for message in user_texts(turn, "<information>") for _, text in parse_passages(message)]


def parse_reports(text: str) -> list[tuple[int, str, str]]:
    """(number, subtask, text) of every ``format_reports`` line in ``text``."""
    return [(int(m["number"]), m["task"], m["text"]) for m in map(_REPORT_LINE.match, text.splitlines()) if m]
