"""Closed-book knowledge: which facts of a world a model knows without searching, and what it recalls.

Search collapse, the failure the paper's Searcher supervision prevents, needs a tempting local
optimum: questions that can sometimes be answered without search. ``ClosedBook`` defines it once
per world, for every consumer:

* a fact (subject, predicate) is **memorised** with probability ``known_fraction`` (decided by a
  hash of the world seed, the subject's canonical name and the predicate, so aliases agree);
* a memorised fact is recalled **right** with probability ``recall_accuracy`` (again by hash),
  else as another value of the same predicate; a fact that is not memorised is recalled as such a
  wrong value too, so recalling always sounds confident, as a language model's guess does.

A 1-hop question is then answerable closed-book with probability about
``known_fraction · recall_accuracy``, a k-hop chain about its k-th power. The option mode's
"report from memory" Searcher option (``envs.option.menus``, the ``lazy_searcher_v1`` scenario)
and the memorised sentences a base model is pretrained on (``SFTConfig.closed_book``, through
``memorised_sentences``) both read this one definition.
"""

from __future__ import annotations

import bisect
import functools
import zlib
from dataclasses import dataclass

from envs.retrieval.corpus import Corpus
from envs.synthwiki.grammar import Chain, Comparison, fact_sentence
from envs.synthwiki.knowledge import Knowledge, Step, resolve
from maopd.base.config import check_fields, probability


@dataclass(frozen=True)
class ClosedBookConfig:
    known_fraction: float = probability(0.7)  # share of the world's facts a model knows without search
    recall_accuracy: float = probability(0.9)  # share of known facts it recalls right
    seed: int = 0

    def __post_init__(self) -> None:
        check_fields(self)


def _draw(*parts: object) -> float:
    """A deterministic uniform in [0, 1) from ``parts``."""
    return zlib.crc32("\x1f".join(map(str, parts)).encode()) / 2**32


class ClosedBook:
    def __init__(self, corpus: Corpus, config: ClosedBookConfig):
        self.config = config
        self.knowledge = Knowledge(document.text for document in corpus.documents)
        self._values: dict[str, list[str]] = {}
        for (_, predicate), value in self.knowledge.values.items():
            self._values.setdefault(predicate, []).append(value)
        for values in self._values.values():
            values.sort()

    def canonical(self, name: str) -> str:
        return min(self.knowledge.same.get(name, {name}))

    def known(self, subject: str, predicate: str) -> bool:
        return _draw(self.config.seed, "known", self.canonical(subject), predicate) < self.config.known_fraction

    def recall(self, subject: str, predicate: str) -> str | None:
        """The value a model states for the fact without searching; None if the world lacks the fact."""
        truth = self.knowledge.lookup(subject, predicate)
        if truth is None:
            return None
        subject = self.canonical(subject)
        right = (
            self.known(subject, predicate)
            and _draw(self.config.seed, "right", subject, predicate) < self.config.recall_accuracy
        )
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

    def memorised_sentences(self) -> list[str]:
        """The known facts as the model states them (wrong ones included): what it was pretrained on."""
        sentences = []
        for subject, predicate in sorted(self.knowledge.values):
            if self.known(subject, predicate):
                sentences.append(fact_sentence(predicate, subject, self.recall(subject, predicate) or ""))
        return sentences


@functools.lru_cache(maxsize=8)
def closed_book(corpus: Corpus, config: ClosedBookConfig) -> ClosedBook:
    """One ``ClosedBook`` per (corpus, config) in a process: parsing a world's facts takes a while."""
    return ClosedBook(corpus, config)
