"""Rule-based policies for the three roles: a debugging team that solves easy (one-hop) questions.

* Leader: delegates the whole question as one subtask, then selects every report.
* Searcher: searches its task once, then reports the retrieved sentence that shares the most
  words with the task.
* Answerer: answers with the longest run of report words that the question does not contain
  ("Where was X born?" + "X was born in Tarvel." -> "Tarvel").

They read only what an LLM would read (the ``AgentTurn`` messages), so they exercise exactly the
same observation path. World-aware expert teams (``maopd.envs.synthwiki``) build on the same pieces.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from maopd.envs.policy import AgentOutput, AgentTurn, RoleRouter, RolesByRule
from maopd.envs.prompts import NO_FACTS, parse_passages, parse_reports, user_texts

STOPWORDS = frozenset(
    "a an the of in on at to for by with from is was are were be been which what who whom where when "
    "how did does do its it he she they his her their this that as and or".split()
)
_WORD = re.compile(r"[\w'-]+", re.UNICODE)


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def content_words(text: str) -> set[str]:
    return {w.lower() for w in words(text) if w.lower() not in STOPWORDS}


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def latest_passages(turn: AgentTurn) -> list[tuple[str, str]]:
    """(title, text) of the passages in the most recent ``<information>`` message."""
    messages = user_texts(turn, "<information>")
    return parse_passages(messages[-1]) if messages else []


def best_sentence(task: str, passages: Sequence[tuple[str, str]]) -> str | None:
    """The passage sentence sharing the most content words with ``task`` (earliest on ties)."""
    wanted = content_words(task)
    best, best_overlap = None, 0
    for _, text in passages:
        for sentence in sentences(text):
            overlap = len(wanted & content_words(sentence))
            if overlap > best_overlap:
                best, best_overlap = sentence, overlap
    return best


def novel_span(question: str, text: str) -> str:
    """The longest run of words in ``text`` that are neither in ``question`` nor stopwords (last on ties)."""
    asked = {w.lower() for w in words(question)}
    best: list[str] = []
    run: list[str] = []
    for word in words(text) + [""]:
        if word and word.lower() not in asked and word.lower() not in STOPWORDS:
            run.append(word)
            continue
        if run and len(run) >= len(best):
            best = run
        run = []
    return " ".join(best)


class ScriptedLeader:
    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        return [AgentOutput([self.decide(turn)]) for turn in turns]

    def decide(self, turn: AgentTurn) -> str:
        has_reports = any(m["role"] == "user" and m["content"].startswith("Reports:") for m in turn.messages)
        if "delegate" in turn.allowed and not has_reports:
            question = turn.task
            return f"<delegate>\n{question}\n</delegate>"
        return "<select>all</select>"


def search_once(turn: AgentTurn, query: str) -> str | None:
    """``<search>query</search>`` while the call has not searched yet and may, else None."""
    searched = any(m["role"] == "assistant" and "<search>" in m["content"] for m in turn.messages)
    return f"<search>{query}</search>" if not searched and "search" in turn.allowed else None


class ScriptedSearcher:
    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        return [AgentOutput([self.decide(turn)]) for turn in turns]

    def decide(self, turn: AgentTurn) -> str:
        task = turn.task
        search = search_once(turn, task)
        if search:
            return search
        fact = best_sentence(task, latest_passages(turn))
        return f"<report>{fact or NO_FACTS}</report>"


class ScriptedAnswerer:
    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        return [AgentOutput([self.decide(turn)] * turn.num_candidates) for turn in turns]

    def decide(self, turn: AgentTurn) -> str:
        body = turn.messages[-1]["content"]
        question = turn.task
        passages = [("", text) for _, _, text in parse_reports(body)]
        fact = best_sentence(question, passages) or ""
        return f"<answer>{novel_span(question, fact)}</answer>"


class ScriptedSolver:
    """The single agent: the Searcher's one search of the question, then the Answerer's span of
    the best passage sentence."""

    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        return [AgentOutput([self.decide(turn)]) for turn in turns]

    def decide(self, turn: AgentTurn) -> str:
        question = turn.task
        search = search_once(turn, question)
        if search:
            return search
        fact = best_sentence(question, latest_passages(turn)) or ""
        return f"<answer>{novel_span(question, fact)}</answer>"


def scripted_team() -> RoleRouter:
    """Every built-in role by the rules above; any other role by its declared rule."""
    return RoleRouter(
        {
            "leader": ScriptedLeader(),
            "searcher": ScriptedSearcher(),
            "answerer": ScriptedAnswerer(),
            "solver": ScriptedSolver(),
        },
        others=RolesByRule(),
    )
