"""A noisy SynthWiki team: the expert team with per-role failure knobs.

Each knob is the probability of one realistic mistake (or, for ``searcher_memory_report``, of the
shortcut a model with parametric knowledge takes: answering from memory what it knows instead of
searching it).
Call-level mistakes (skip the search, query the wrong entity, report too early) are drawn once when
a Searcher call starts and kept for the whole call; output-level mistakes (misformat, drop a report,
answer from the wrong report) are drawn per output. Draws come from one ``random.Random(seed)``
consumed in call order, so a run is reproducible from the seed. Accuracy falls smoothly as the
knobs rise (see docs/synthwiki.md for measured figures).

The single agent's solver (``maopd.envs.single_search_v1``) searches like a Searcher and answers like
the Answerer, so it takes the Searcher's call-level mistakes (skip the search: answer at once;
query the wrong entity: answer from what came back; answer after the first search; answer from
the closed book) and the Answerer's output-level ones (answer with another fact's value), with
the Searcher's misformat knob on its searches and the Answerer's on its answers.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, fields

from maopd.agents.expert_team import (
    ExpertAnswerer,
    ExpertLeader,
    ExpertSearcher,
    ExpertSolver,
    answer_text,
)
from maopd.base.config import check_fields, probability
from maopd.envs.actions import action_contents
from maopd.envs.policy import AgentOutput, AgentTurn, RolesByRule
from maopd.envs.prompts import NO_FACTS, parse_reports, passage_texts
from maopd.envs.synthwiki.closed_book import ClosedBook
from maopd.envs.synthwiki.grammar import Chain, Comparison, parse_facts, parse_question
from maopd.envs.synthwiki.knowledge import Knowledge, Step, resolve


@dataclass
class NoiseConfig:
    """Probabilities of each mistake, per role."""

    searcher_skip_search: float = probability(
        0.0, help="The probability that a Searcher call reports at once, without searching."
    )
    searcher_wrong_entity: float = probability(
        0.0, help="The probability that a Searcher call queries a misspelt entity and reports what comes back."
    )
    searcher_early_report: float = probability(
        0.0,
        help="The probability that a Searcher call reports right after its first search, with the first sentence "
        "of the first passage it found.",
    )
    searcher_misformat: float = probability(
        0.0, help="The probability that a Searcher output lacks a complete action tag (its closing tag is dropped)."
    )
    searcher_memory_report: float = probability(
        0.0,
        help="The probability that a Searcher call reports at once, without searching, the facts of its task that "
        "the team's closed book knows; a task with a fact it does not know is searched as usual. Needs a closed book.",
    )
    leader_drop_report: float = probability(
        0.0, help="The probability that the Leader leaves one report out of its selection."
    )
    leader_misformat: float = probability(
        0.0, help="The probability that a Leader output lacks a complete action tag (its closing tag is dropped)."
    )
    answerer_wrong_report: float = probability(
        0.0,
        help="The probability that the Answerer answers with a value drawn at random from the facts of the reports "
        "it was given (the single agent: of its passages) instead of working the answer out.",
    )
    answerer_misformat: float = probability(
        0.0, help="The probability that an Answerer output lacks a complete action tag (its closing tag is dropped)."
    )

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def uniform(cls, rate: float) -> NoiseConfig:
        """Every knob at ``rate``."""
        return cls(**{spec.name: rate for spec in fields(cls)})


def misformat(text: str) -> str:
    """Drop the closing tag: the most common format failure of a small model."""
    return text[: text.rfind("</")] if "</" in text else text


def misspell(name: str, rng: random.Random) -> str:
    vowels = [i for i, ch in enumerate(name) if ch in "aeiou"]
    if not vowels:
        return name
    i = rng.choice(vowels)
    return name[:i] + rng.choice([v for v in "aeiou" if v != name[i]]) + name[i + 1 :]


def named_entity(plan: Chain | Comparison | None) -> str | None:
    """The entity a question names (the first one, for a comparison)."""
    if isinstance(plan, Chain):
        return plan.topic
    return plan.first if isinstance(plan, Comparison) else None


class NoisyTeam:
    """A ``Policy`` playing every role like the expert, with the mistakes of ``noise``."""

    def __init__(self, noise: NoiseConfig, seed: int = 0, closed_book: ClosedBook | None = None):
        self.noise = noise
        self.closed_book = closed_book
        self.rng = random.Random(seed)
        self.leader, self.searcher, self.answerer = ExpertLeader(), ExpertSearcher(), ExpertAnswerer()
        self.solver = ExpertSolver()
        self.by_rule = RolesByRule()
        self._call_mistakes: dict[tuple[str, str], str | None] = {}

    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        return [AgentOutput([self._one(turn) for _ in range(turn.num_candidates)]) for turn in turns]

    def _chance(self, probability: float) -> bool:
        return probability > 0 and self.rng.random() < probability

    def _one(self, turn: AgentTurn) -> str:
        role = turn.role
        if role == "leader":
            text = self._leader(turn)
        elif role == "searcher":
            text = self._searcher(turn)
        elif role == "solver":
            text = self._solver(turn)
            role = "searcher" if text.startswith("<search>") else "answerer"  # whose misformat knob
        elif role == "answerer":
            text = self._answerer(turn)
        else:  # a role the expert was not written for: its declared rule, without mistakes
            (output,) = self.by_rule.act([turn])
            return output.texts[0]
        if self._chance(getattr(self.noise, f"{role}_misformat")):
            return misformat(text)
        return text

    def _leader(self, turn: AgentTurn) -> str:
        text = self.leader.decide(turn)
        if text.startswith("<select>") and self._chance(self.noise.leader_drop_report):
            numbers = [
                n
                for message in turn.messages
                if message["role"] == "user"
                for n, _, _ in parse_reports(message["content"])
            ]
            if numbers:
                numbers.remove(self.rng.choice(numbers))
                kept = numbers or [max(numbers, default=0) + 99]  # select nothing that exists
                return "<select>" + ", ".join(map(str, kept)) + "</select>"
        return text

    def _call_mistake(self, turn: AgentTurn) -> str | None:
        """The call-level mistake of ``turn``'s call, drawn at its first output."""
        key = (turn.call_id, turn.task)
        if not any(m["role"] == "assistant" for m in turn.messages):
            self._call_mistakes[key] = self._draw_call_mistake()
        return self._call_mistakes.get(key)

    def _searcher(self, turn: AgentTurn) -> str:
        mistake = self._call_mistake(turn)
        searched = action_contents(turn.messages, "search")
        task = turn.task
        if mistake == "skip_search":
            return f"<report>{NO_FACTS}</report>"
        if mistake == "memory_report" and (known := self._known(task)):
            return f"<report>{' '.join(step.sentence() for step in known)}</report>"
        if mistake == "wrong_entity":
            if search := self._misspelt_search(turn, task, searched):
                return search
            step = self._top_passage_step(turn, task)
            return f"<report>{step.sentence() if step else NO_FACTS}</report>"
        if mistake == "early_report" and searched:
            passages = passage_texts(turn)
            first = passages[0].split(". ")[0].rstrip(".") + "." if passages else NO_FACTS
            return f"<report>{first}</report>"
        return self.searcher.decide(turn)

    def _misspelt_search(self, turn: AgentTurn, question: str, searched: list[str]) -> str | None:
        """The wrong-entity mistake's first move: search ``question`` with its subject misspelt
        (None once the call has searched, or when it may not)."""
        if searched or "search" not in turn.allowed:
            return None
        topic = named_entity(parse_question(question)) or question
        return f"<search>{question.replace(topic, misspell(topic, self.rng))}</search>"

    def _known(self, question: str) -> list[Step]:
        """Every step of ``question`` as the team's closed book recalls it, when it knows them all
        (none otherwise: the question is then searched)."""
        plan = parse_question(question)
        steps = self.closed_book.recall_steps(plan) if plan else []
        return steps if self.closed_book.knows(steps) else []

    def _draw_call_mistake(self) -> str | None:
        # memory_report is drawn only with a closed book, so a team without one makes the same draws as
        # if the mistake did not exist
        shortcuts = ("memory_report",) if self.closed_book is not None else ()
        for mistake in ("skip_search", "wrong_entity", "early_report", *shortcuts):
            if self._chance(getattr(self.noise, f"searcher_{mistake}")):
                return mistake
        return None

    @staticmethod
    def _top_passage_step(turn: AgentTurn, task: str) -> Step | None:
        """The asked predicate read from whatever passage came back, as if it were about the task's subject."""
        plan = parse_question(task)
        missing = resolve(plan, Knowledge())[1] if plan is not None else []
        for step in missing:
            for text in passage_texts(turn):
                for fact in parse_facts(text):
                    if fact.predicate == step.predicate:
                        return Step(step.predicate, step.subject, fact.value)
        return None

    def _solver(self, turn: AgentTurn) -> str:
        mistake = self._call_mistake(turn)
        question = turn.task
        searched = action_contents(turn.messages, "search")
        if mistake == "skip_search":
            return answer_text(question, Knowledge())
        if mistake == "memory_report" and (known := self._known(question)):
            return answer_text(question, Knowledge(step.sentence() for step in known))
        if mistake == "wrong_entity":
            if search := self._misspelt_search(turn, question, searched):
                return search
            step = self._top_passage_step(turn, question)
            return f"<answer>{step.value if step else 'unknown'}</answer>"
        if mistake == "early_report" and searched:
            return answer_text(question, Knowledge(passage_texts(turn)))
        text = self.solver.decide(turn)
        if text.startswith("<answer>") and self._chance(self.noise.answerer_wrong_report):
            values = [fact.value for passage in passage_texts(turn) for fact in parse_facts(passage)]
            if values:
                return f"<answer>{self.rng.choice(values)}</answer>"
        return text

    def _answerer(self, turn: AgentTurn) -> str:
        if self._chance(self.noise.answerer_wrong_report):
            found = parse_reports(turn.messages[-1]["content"])
            values = [fact.value for _, _, text in found for fact in parse_facts(text)]
            if values:
                return f"<answer>{self.rng.choice(values)}</answer>"
        return self.answerer.decide(turn)
