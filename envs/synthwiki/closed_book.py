"""Closed-book knowledge: which facts of a world a model recalls without searching, by popularity.

Search collapse, the failure the paper's Searcher supervision prevents, needs a tempting local
optimum: questions that can sometimes be answered without search. Language models know the facts
of popular entities and not those of the long tail (Mallen et al. 2023), and a fact is stored only
after about a hundred statements in varied phrasings (Allen-Zhu & Li 2024), so ``ClosedBook``
defines what a model recalls by the subject's popularity band (``maopd.envs.synthwiki.popularity``, the
one definition every consumer reads):

* a fact (subject, predicate) is **recalled right** with the probability its subject's band is
  given (``ClosedBookConfig.popular``, ``middle``, ``long_tail``), decided by a hash of the seed,
  the subject's canonical name and the predicate, so aliases agree;
* any other fact is recalled as another value of the same predicate, so recalling always sounds
  confident, as a language model's guess does.

The option mode's "report from memory" Searcher option (``maopd.envs.option.menus``, the ``lazy_searcher_v1``
scenario) and the demonstrating team of π_0's build (``maopd.training.base_model``: it reports from
memory only what π_0 was pretrained to know) both read this one definition.
"""

from __future__ import annotations

import bisect
import functools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from maopd.base.config import check_fields, probability, seed_field
from maopd.envs.retrieval.corpus import Corpus
from maopd.envs.synthwiki.grammar import Chain, Comparison
from maopd.envs.synthwiki.knowledge import Knowledge, Step, resolve
from maopd.envs.synthwiki.popularity import band, popularity_ranks


@dataclass(frozen=True)
class ClosedBookConfig:
    """The probability that a fact is recalled right, by its subject's popularity band."""

    popular: float = probability(
        0.9, help="The probability that a fact about a subject of the most popular quarter is recalled right."
    )
    middle: float = probability(
        0.6,
        help="The probability that a fact about a subject of the middle band (neither the most popular quarter "
        "nor the least popular half) is recalled right.",
    )
    long_tail: float = probability(
        0.0, help="The probability that a fact about a subject of the least popular half is recalled right."
    )
    seed: int = seed_field(
        help="Seeds the draws that decide which facts are recalled right and what a wrong recall says instead."
    )

    def __post_init__(self) -> None:
        check_fields(self)


def _draw(*parts: object) -> float:
    """A deterministic uniform in [0, 1) from ``parts``."""
    return zlib.crc32("\x1f".join(map(str, parts)).encode()) / 2**32


class ClosedBook:
    def __init__(self, corpus: Corpus, config: ClosedBookConfig, world_seed: int):
        self.config = config
        self.knowledge = Knowledge(document.text for document in corpus.documents)
        # every passage is one entity, titled by its name: popularity ranks its canonical names
        self.ranks = popularity_ranks(world_seed, (self.canonical(d.title) for d in corpus.documents))
        self._values: dict[str, list[str]] = {}
        for (_, predicate), value in self.knowledge.values.items():
            self._values.setdefault(predicate, []).append(value)
        for values in self._values.values():
            values.sort()

    def canonical(self, name: str) -> str:
        return min(self.knowledge.same.get(name, {name}))

    def band(self, subject: str) -> str:
        """The popularity band of ``subject`` (any surface form of an entity of the world)."""
        return band(self.ranks[self.canonical(subject)], len(self.ranks))

    def known(self, subject: str, predicate: str) -> bool:
        """Whether the fact is recalled right: a draw against its subject's band's probability."""
        chance = getattr(self.config, self.band(subject))
        return _draw(self.config.seed, "known", self.canonical(subject), predicate) < chance

    def recall(self, subject: str, predicate: str) -> str | None:
        """The value a model states for the fact without searching; None if the world lacks the fact."""
        truth = self.knowledge.lookup(subject, predicate)
        if truth is None:
            return None
        subject = self.canonical(subject)
        right = self.known(subject, predicate)
        # The guess is a draw from the predicate's sorted values other than the truth, indexed
        # around the truth's run instead of copying the list (thousands of values; menus ask often).
        values = self._values[predicate]
        low, high = bisect.bisect_left(values, truth), bisect.bisect_right(values, truth)
        wrong = len(values) - (high - low)
        if right or not wrong:
            return truth
        index = int(_draw(self.config.seed, "guess", subject, predicate) * wrong)
        return values[index if index < low else index + high - low]

    def recall_steps(self, plan: Chain | Comparison, known: Knowledge | None = None) -> list[Step]:
        """The steps of ``plan`` that ``known`` (facts already found; none by default) lacks, as
        recalled from memory, stopping at a step the world lacks. A chain follows its own recalls:
        a wrong recalled hop leads the next hop astray, as it does for a model."""
        resolved, missing = resolve(plan, known or Knowledge())
        if isinstance(plan, Comparison):
            return [Step(step.predicate, step.subject, self.recall(step.subject, step.predicate)) for step in missing]
        steps, subject = [], missing[0].subject if missing else None
        for predicate in plan.steps[len(resolved) :]:
            value = self.recall(subject, predicate)
            steps.append(Step(predicate, subject, value))
            if value is None:
                break
            subject = value
        return steps

    def knows(self, steps: Sequence[Step]) -> bool:
        """Whether every one of ``steps`` (from ``recall_steps``) is recalled right: the model knows
        them rather than guesses."""
        return bool(steps) and all(s.value is not None and self.known(s.subject, s.predicate) for s in steps)


@functools.lru_cache(maxsize=8)
def closed_book(corpus: Corpus, config: ClosedBookConfig, world_seed: int) -> ClosedBook:
    """One ``ClosedBook`` per (corpus, config, world seed) in a process: parsing a world's facts
    takes a while."""
    return ClosedBook(corpus, config, world_seed)
