"""A world's facts as a language model's pretraining states them, by popularity.

Every fact (subject, relation or attribute, value) of a knowledge graph, with its subject's
popularity (``maopd.envs.synthwiki.popularity``: rank, band and the number of times pretraining states
it). ``statements`` writes a fact that many times in the varied phrasings of
``schema.RECALL_STATEMENTS``; ``question_answer`` writes it as a question with its answer, the form
a model learns to extract facts from (Allen-Zhu & Li, Physics of Language Models 3.1).
``chance_rates`` is the baseline a closed-book probe is judged against: guessing each relation's
most common value. The knowledge probe (``benchmarks/knowledge_probe.py``), π_0's pretraining
(``maopd.training.base_model``) and the gates (``maopd tune gates``) all read facts from here.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from maopd.envs.datasets import Question
from maopd.envs.synthwiki.generator import Entity
from maopd.envs.synthwiki.grammar import fact_sentence, recall_statement, subquestion
from maopd.envs.synthwiki.popularity import ExposureCurve, band, entity_ranks
from maopd.envs.synthwiki.schema import format_value, value_answers


@dataclass(frozen=True)
class Fact:
    subject: str
    predicate: str
    value: str  # as stated
    answers: tuple[str, ...]  # every accepted surface form
    rank: int
    band: str
    exposures: int
    split: str = ""  # the split of the subject's sub-graph


def graph_facts(world_seed: int, entities: Sequence[Entity], curve: ExposureCurve) -> list[Fact]:
    """Every fact of the graph, with its subject's popularity rank, band and exposures."""
    ranks = entity_ranks(world_seed, entities)
    facts = []
    for entity in entities:
        rank = ranks[entity.id]
        popularity = (rank, band(rank, len(entities)), curve.exposures(rank, len(entities)), entity.split)
        for relation, target in sorted(entity.relations.items()):
            obj = entities[target]
            facts.append(Fact(entity.name, relation, obj.name, obj.surfaces, *popularity))
        for attribute, value in sorted(entity.attributes.items()):
            text = format_value(attribute, value)
            facts.append(Fact(entity.name, attribute, text, value_answers(attribute, value), *popularity))
    return facts


def statements(fact: Fact, phrasings: int, rng: random.Random, report_form: bool = False) -> list[str]:
    """The fact stated ``exposures`` times, cycling from a random one through the first
    ``phrasings`` phrasings and, with ``report_form``, the canonical sentence a Searcher's report
    writes (``grammar.fact_sentence``)."""
    forms = [
        *(lambda f, k=k: recall_statement(f.predicate, f.subject, f.value, k) for k in range(phrasings)),
        *([lambda f: fact_sentence(f.predicate, f.subject, f.value)] if report_form else []),
    ]
    start = rng.randrange(len(forms))
    return [forms[(start + i) % len(forms)](fact) for i in range(fact.exposures)]


def question_answer(fact: Fact) -> str:
    """The fact as its one-hop question followed by the answer."""
    return f"{subquestion(fact.predicate, fact.subject)} {fact.value}."


def lookup_question(fact: Fact) -> Question:
    """The fact's one-hop question, as an environment plays it."""
    return Question(
        f"lookup/{fact.subject}/{fact.predicate}",
        subquestion(fact.predicate, fact.subject),
        fact.answers,
        {"hops": 1, "type": "lookup"},
    )


def chance_rates(facts: Sequence[Fact]) -> dict[str, float]:
    """Per predicate: the share of its facts whose value is its most common value."""
    values: dict[str, Counter] = {}
    for fact in facts:
        values.setdefault(fact.predicate, Counter())[fact.value] += 1
    return {p: counter.most_common(1)[0][1] / sum(counter.values()) for p, counter in values.items()}
