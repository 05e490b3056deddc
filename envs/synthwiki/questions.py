"""SynthWiki questions in the FlashRAG format, with their gold decomposition.

Kinds: ``lookup`` (1 hop), ``composition`` (2 or 3 hops, each hop's answer names the next hop's
subject) and ``comparison`` (two attribute look-ups in one wave, then compare). The metadata of
every question holds ``hops``, ``type``, ``decomposition`` (waves of sub-questions with their
answers and supporting passage), ``supporting_passages`` and ``entities`` (every entity the
question touches, used to check that splits are disjoint).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

from maopd.envs.datasets import Question
from maopd.envs.synthwiki.generator import Entity, mention
from maopd.envs.synthwiki.grammar import (
    Chain,
    Comparison,
    chain_question,
    comparison_question,
    subquestion,
)
from maopd.envs.synthwiki.popularity import weakest_band
from maopd.envs.synthwiki.schema import (
    ATTRIBUTES,
    ENTITY_TYPES,
    RELATIONS,
    TYPE_ATTRIBUTES,
    format_value,
    value_answers,
)

KINDS = ("1-hop", "2-hop", "3-hop", "comparison")
DEFAULT_HOP_MIX = {"1-hop": 0.3, "2-hop": 0.35, "3-hop": 0.15, "comparison": 0.2}


def question_kind(question: Question) -> str:
    """Which of ``KINDS`` a question of this module is (from its metadata)."""
    meta = question.metadata
    return "comparison" if meta["type"] == "comparison" else f"{meta['hops']}-hop"


def chain_shapes(hops: int) -> list[tuple[str, ...]]:
    """Every sequence of ``hops`` steps whose types compose; the last step may be an attribute."""
    shapes: list[tuple[str, ...]] = []

    def extend(prefix: tuple[str, ...], subject_type: str) -> None:
        if len(prefix) == hops - 1:
            shapes.extend(prefix + (a,) for a in TYPE_ATTRIBUTES[subject_type])
            shapes.extend(prefix + (r.name,) for r in RELATIONS.values() if r.subject_type == subject_type)
            return
        for relation in RELATIONS.values():
            if relation.subject_type == subject_type:
                extend(prefix + (relation.name,), relation.object_type)

    for kind in ENTITY_TYPES:
        extend((), kind)
    return sorted(shapes)


def validate_hop_mix(hop_mix: Mapping[str, float]) -> dict[str, float]:
    unknown = set(hop_mix) - set(KINDS)
    if unknown:
        raise ValueError(f"hop_mix: unknown kinds {sorted(unknown)}; expected some of {KINDS}")
    if any(weight < 0 for weight in hop_mix.values()) or sum(hop_mix.values()) <= 0:
        raise ValueError("hop_mix: weights must be non-negative with a positive sum")
    return {kind: float(hop_mix.get(kind, 0.0)) for kind in KINDS}


def quotas(count: int, hop_mix: Mapping[str, float]) -> dict[str, int]:
    """Split ``count`` over the kinds in proportion to ``hop_mix`` (largest-remainder rounding)."""
    mix = validate_hop_mix(hop_mix)
    total = sum(mix.values())
    exact = {kind: count * weight / total for kind, weight in mix.items()}
    result = {kind: int(share) for kind, share in exact.items()}
    by_remainder = sorted(mix, key=lambda kind: (result[kind] - exact[kind], KINDS.index(kind)))
    for kind in by_remainder[: count - sum(result.values())]:
        result[kind] += 1
    return result


class QuestionWriter:
    """Samples questions of one split from one sub-graph of the graph: ``subgraph`` (default: the
    sub-graph named like the split). Question ids are ``{split}-{n}``."""

    def __init__(
        self,
        entities: Sequence[Entity],
        split: str,
        rng: random.Random,
        subgraph: str | None = None,
        bands: Mapping[str, str] | None = None,
    ):
        self.entities = entities
        self.bands = bands  # entity id -> popularity band, for ``write(..., band=...)``
        self.split = split
        self.rng = rng
        subgraph = subgraph or split
        self.by_type = {kind: [e for e in entities if e.split == subgraph and e.type == kind] for kind in ENTITY_TYPES}
        self.shapes = {hops: chain_shapes(hops) for hops in (1, 2, 3)}
        self.comparable = [(a, t) for a in sorted(ATTRIBUTES) for t in ATTRIBUTES[a].subject_types]

    def write(
        self,
        count: int,
        hop_mix: Mapping[str, float],
        exclude: AbstractSet[str] = frozenset(),
        band: str | None = None,
    ) -> list[Question]:
        """``count`` distinct questions, none of them in ``exclude``, as many of each kind as
        ``hop_mix`` says (largest remainder); with ``band``, only questions whose least popular
        entity is in that popularity band (``popularity.weakest_band``; needs ``bands``)."""
        if band is not None and self.bands is None:
            raise ValueError("band: the writer was made without the entities' bands")
        questions: dict[str, Question] = {}
        for kind, quota in quotas(count, hop_mix).items():
            made, attempts = 0, 0
            while made < quota and attempts < 50 * quota:
                attempts += 1
                question = self._comparison() if kind == "comparison" else self._chain(int(kind[0]))
                if question is not None and band is not None:
                    question = question if weakest_band(question.metadata["entities"], self.bands) == band else None
                if question is not None and question.question not in questions and question.question not in exclude:
                    questions[question.question] = question
                    made += 1
            if made < quota:
                of_band = f" of the {band} band" if band is not None else ""
                raise ValueError(
                    f"split {self.split!r}: only {made} distinct {kind} questions{of_band} for {quota} requested;"
                    " use a larger size"
                )
        ordered = list(questions.values())
        self.rng.shuffle(ordered)
        return [
            Question(f"{self.split}-{number}", q.question, q.golden_answers, q.metadata)
            for number, q in enumerate(ordered)
        ]

    def _chain(self, hops: int) -> Question | None:
        shape = self.rng.choice(self.shapes[hops])
        first_type = RELATIONS[shape[0]].subject_type if shape[0] in RELATIONS else None
        candidates = (
            self.by_type[first_type]
            if first_type
            else [e for kind in ATTRIBUTES[shape[0]].subject_types for e in self.by_type[kind]]
        )
        if not candidates:
            return None
        entity = self.rng.choice(candidates)
        topic = mention(entity, self.rng)
        path, waves, surface = [entity], [], topic
        for step in shape:
            current = path[-1]
            if step in ATTRIBUTES:
                value = current.attributes[step]
                waves.append([_step(step, surface, format_value(step, value), current)])
                answers = value_answers(step, value)
                break
            target = self.entities[current.relations[step]]
            if target in path:
                return None  # e.g. "the country of the capital of X" is X itself
            waves.append([_step(step, surface, current.mentions[step], current)])
            path.append(target)
            surface = current.mentions[step]
            answers = target.surfaces
        text = chain_question(Chain(topic, shape))
        kind = "lookup" if hops == 1 else "composition"
        return _question(text, answers, hops, kind, waves, [e.id for e in path])

    def _comparison(self) -> Question | None:
        attribute, kind = self.rng.choice(self.comparable)
        pool = self.by_type[kind]
        if len(pool) < 2:
            return None
        first, second = self.rng.sample(pool, 2)
        a, b = first.attributes[attribute], second.attributes[attribute]
        if a == b:
            return None
        names = (mention(first, self.rng), mention(second, self.rng))
        winner = first if (a < b) == ATTRIBUTES[attribute].smaller_wins else second
        wave = [
            _step(attribute, surface, format_value(attribute, entity.attributes[attribute]), entity)
            for surface, entity in zip(names, (first, second))
        ]
        text = comparison_question(Comparison(attribute, *names))
        return _question(text, winner.surfaces, 2, "comparison", [wave], [first.id, second.id])


def _step(predicate: str, subject: str, answer: str, entity: Entity) -> dict:
    return {
        "subquestion": subquestion(predicate, subject),
        "predicate": predicate,
        "answer": answer,
        "passage": entity.id,
    }


def _question(
    text: str, answers: Sequence[str], hops: int, kind: str, waves: list[list[dict]], entity_ids: list[str]
) -> Question:
    metadata = {
        "hops": hops,
        "type": kind,
        "decomposition": waves,
        "supporting_passages": [step["passage"] for wave in waves for step in wave],
        "entities": entity_ids,
    }
    return Question("", text, tuple(answers), metadata)
