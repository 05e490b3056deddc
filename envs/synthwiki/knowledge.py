"""Facts read from SynthWiki text, and a question's plan resolved through them.

``Knowledge`` collects the facts of passages or reports (``maopd.envs.synthwiki.grammar.parse_facts``);
``resolve`` walks a question's chain of hops (or its two comparison look-ups) through them. The
expert team (``maopd.agents.expert_team``) and the option menus (``maopd.envs.option.menus``) reason with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from maopd.envs.prompts import strip_label
from maopd.envs.rewards import report_has_gold
from maopd.envs.synthwiki.grammar import Chain, Comparison, Fact, fact_sentence, parse_facts, parse_question
from maopd.envs.synthwiki.schema import ATTRIBUTES


class Knowledge:
    """Facts read so far, looked up by any surface form of the subject (name or alias)."""

    def __init__(self, texts: Iterable[str] = ()):
        self.values: dict[tuple[str, str], str] = {}
        self.same: dict[str, set[str]] = {}
        for text in texts:
            self.add(text)

    def add(self, text: str) -> None:
        self.add_facts(parse_facts(text))

    def add_facts(self, facts: Iterable[Fact]) -> None:
        for fact in facts:
            if fact.predicate == "alias":
                group = self.same.get(fact.subject, {fact.subject}) | self.same.get(fact.value, {fact.value})
                for name in group:
                    self.same[name] = group
            else:
                self.values.setdefault((fact.subject, fact.predicate), fact.value)

    def copy(self) -> Knowledge:
        """Another ``Knowledge`` with these facts. ``add`` replaces an alias group rather than
        changing it, so the copies share the groups."""
        other = Knowledge()
        other.values, other.same = dict(self.values), dict(self.same)
        return other

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
        steps = [
            Step(plan.attribute, name, knowledge.lookup(name, plan.attribute)) for name in (plan.first, plan.second)
        ]
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


def subtask_answer(task: str, knowledge: Knowledge) -> str | None:
    """The answer of a Searcher's (sub)task, a SynthWiki question (a leading "Task:" label is
    ignored), from the world's facts; None when the task is not a question of the world's grammar
    or the facts do not resolve it."""
    plan = parse_question(strip_label(task, "Task:"))
    return final_answer(plan, knowledge) if plan is not None else None


def report_states_answer(task: str, report: str, knowledge: Knowledge) -> bool:
    """Gold correctness of a Searcher report: it states the answer of its own (sub)task
    (``maopd.envs.rewards.report_has_gold`` against ``subtask_answer``). A useful first-hop report of a
    multi-hop question holds the bridge entity, not the question's answer, and counts as correct."""
    answer = subtask_answer(task, knowledge)
    return answer is not None and report_has_gold(report, [answer])
