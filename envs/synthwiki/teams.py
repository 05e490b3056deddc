"""The SynthWiki expert team: every role played by rule, from the text an LLM would see.

* Leader: parses the question into a chain of hops (or a comparison), delegates the next
  unresolved hop as its sub-question (both look-ups of a comparison in one wave), reads the
  reports, and selects all reports once every hop is resolved.
* Searcher: parses its task the same way, searches the sub-question of the next unresolved hop
  (then the bare entity name if that missed), reads the facts in the passages, and reports the
  resolved hops as canonical fact sentences. Given a whole multi-hop question (the cascade
  workflow) it searches hop after hop.
* Answerer: resolves the question's chain through the facts in the reports and answers.

The experts never read the world's graph: they parse questions, passages and reports with
``envs.synthwiki.grammar``, so their accuracy measures how solvable the world is by search.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agents.actions import parse_subtasks
from agents.policy import AgentOutput, AgentTurn, RoleRouter
from envs.synthwiki.grammar import (
    Chain,
    Comparison,
    fact_sentence,
    parse_facts,
    parse_question,
    subquestion,
)
from envs.synthwiki.schema import ATTRIBUTES

NO_FACTS = "No relevant information found."
_PASSAGE_LINE = re.compile(r"^\[\d+\] (?P<title>[^:]*): (?P<text>.*)$")
_REPORT_LINE = re.compile(r"^\[Report (?P<number>\d+)\] \((?P<task>.*?)\) (?P<text>.*)$")
_TAG = {kind: re.compile(rf"<{kind}>(.*?)</{kind}>", re.DOTALL) for kind in ("search", "delegate")}


class Knowledge:
    """Facts read so far, looked up by any surface form of the subject (name or alias)."""

    def __init__(self, texts: Iterable[str] = ()):
        self.values: dict[tuple[str, str], str] = {}
        self.same: dict[str, set[str]] = {}
        for text in texts:
            self.add(text)

    def add(self, text: str) -> None:
        for fact in parse_facts(text):
            if fact.predicate == "alias":
                group = self.same.get(fact.subject, {fact.subject}) | self.same.get(fact.value, {fact.value})
                for name in group:
                    self.same[name] = group
            else:
                self.values.setdefault((fact.subject, fact.predicate), fact.value)

    def lookup(self, subject: str, predicate: str) -> str | None:
        for name in sorted(self.same.get(subject, {subject})):
            value = self.values.get((name, predicate))
            if value is not None:
                return value
        return None


@dataclass(frozen=True)
class Step:
    predicate: str
    subject: str
    value: str | None

    def sentence(self) -> str:
        return fact_sentence(self.predicate, self.subject, self.value or "")


def resolve(plan: Chain | Comparison, knowledge: Knowledge) -> tuple[list[Step], list[Step]]:
    """(resolved steps, missing steps): a chain stops at its first missing hop; a comparison
    needs its two look-ups."""
    if isinstance(plan, Comparison):
        steps = [Step(plan.attribute, name, knowledge.lookup(name, plan.attribute)) for name in (plan.first, plan.second)]
        return [s for s in steps if s.value], [s for s in steps if not s.value]
    resolved: list[Step] = []
    subject = plan.topic
    for predicate in plan.steps:
        value = knowledge.lookup(subject, predicate)
        if value is None:
            return resolved, [Step(predicate, subject, None)]
        resolved.append(Step(predicate, subject, value))
        subject = value
    return resolved, []


def final_answer(plan: Chain | Comparison, knowledge: Knowledge) -> str | None:
    resolved, missing = resolve(plan, knowledge)
    if missing:
        return None
    if isinstance(plan, Comparison):
        first, second = (int(re.sub(r"\D", "", step.value)) for step in resolved)
        first_wins = (first < second) == ATTRIBUTES[plan.attribute].smaller_wins
        return plan.first if first_wins else plan.second
    return resolved[-1].value


# ----- reading turns ---------------------------------------------------------------------------
def strip_label(text: str, label: str) -> str:
    first = text.split("\n", 1)[0].strip()
    return first[len(label):].strip() if first.startswith(label) else first


def user_texts(turn: AgentTurn, prefix: str) -> list[str]:
    return [m["content"] for m in turn.messages if m["role"] == "user" and m["content"].startswith(prefix)]


def passage_texts(turn: AgentTurn) -> list[str]:
    """Every passage the Searcher has read in this call, in order."""
    return [
        match["text"]
        for message in user_texts(turn, "<information>")
        for match in map(_PASSAGE_LINE.match, message.splitlines())
        if match
    ]


def reports(text: str) -> list[tuple[int, str, str]]:
    """(number, subtask, text) of every report line in ``text``."""
    return [
        (int(m["number"]), m["task"], m["text"]) for m in map(_REPORT_LINE.match, text.splitlines()) if m
    ]


def own_actions(turn: AgentTurn, kind: str) -> list[str]:
    return [
        match.strip()
        for message in turn.messages
        if message["role"] == "assistant"
        for match in _TAG[kind].findall(message["content"])
    ]


# ----- roles -------------------------------------------------------------------------------------
class _Role:
    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        return [AgentOutput([self.decide(turn)] * turn.num_candidates) for turn in turns]

    def decide(self, turn: AgentTurn) -> str:
        raise NotImplementedError


class ExpertLeader(_Role):
    def decide(self, turn: AgentTurn) -> str:
        question = strip_label(turn.task, "Question:")
        plan = parse_question(question)
        knowledge = Knowledge(text for message in user_texts(turn, "Reports:") for _, _, text in reports(message))
        delegated = {task for content in own_actions(turn, "delegate") for task in parse_subtasks(content)}
        if plan is None:
            wanted = [] if delegated else [question]
        else:
            _, missing = resolve(plan, knowledge)
            wanted = [subquestion(step.predicate, step.subject) for step in missing]
            wanted = [task for task in wanted if task not in delegated]
        if wanted and "delegate" in turn.allowed:
            return "<delegate>\n" + "\n".join(wanted) + "\n</delegate>"
        return "<select>all</select>"


class ExpertSearcher(_Role):
    def decide(self, turn: AgentTurn) -> str:
        task = strip_label(turn.task, "Task:")
        plan = parse_question(task)
        knowledge = Knowledge(passage_texts(turn))
        if plan is None:
            return self._search_or_report(turn, [task], [])
        resolved, missing = resolve(plan, knowledge)
        queries = [q for step in missing for q in (subquestion(step.predicate, step.subject), step.subject)]
        return self._search_or_report(turn, queries, resolved)

    @staticmethod
    def _search_or_report(turn: AgentTurn, queries: list[str], resolved: list[Step]) -> str:
        searched = set(own_actions(turn, "search"))
        fresh = [query for query in queries if query not in searched]
        if fresh and "search" in turn.allowed:
            return f"<search>{fresh[0]}</search>"
        text = " ".join(step.sentence() for step in resolved) or NO_FACTS
        return f"<report>{text}</report>"


class ExpertAnswerer(_Role):
    def decide(self, turn: AgentTurn) -> str:
        body = turn.messages[-1]["content"]
        question = strip_label(body, "Question:")
        plan = parse_question(question)
        knowledge = Knowledge(text for _, _, text in reports(body))
        answer = final_answer(plan, knowledge) if plan is not None else None
        return f"<answer>{answer or 'unknown'}</answer>"


def expert_team() -> RoleRouter:
    return RoleRouter({"leader": ExpertLeader(), "searcher": ExpertSearcher(), "answerer": ExpertAnswerer()})
