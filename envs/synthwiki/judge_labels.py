"""Judge labels a judge can decide from its inputs, and balanced examples of them.

The Prompted Critic's judge sees the question, the sub-question and the report
(``maopd.envs.prompts.CRITIC_PROMPT``) and is asked whether the report gives specific, relevant facts
that help answer the sub-question. ``judge_label`` answers that from those inputs alone, with the
world's grammar: yes exactly when the report states a fact about the sub-question's entity and
asked relation (for a comparison, either entity and the compared attribute; for a chain, its first
hop). The value stated is not checked, since the judge cannot know it, except for facts the judge
is expected to know: a ``knows`` function (subject, predicate) -> value names them, and such a fact
stated with another value is a no.

``judge_examples`` draws balanced examples of these labels from a split's sub-questions, in the
kinds of reports a Searcher writes: the asked fact (yes), and, as negatives, a report that states
no fact, another entity's fact of the asked relation, another fact of the asked entity, an empty
report and ``NO_FACTS``. The base model's judge demonstrations (``critic_labels: decidable``) and
the judge gate's held-out set (``maopd tune judge``) are both drawn here.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from maopd.envs.datasets import Question
from maopd.envs.prompts import NO_FACTS
from maopd.envs.synthwiki.grammar import Chain, Comparison, fact_sentence, parse_facts, parse_question
from maopd.envs.synthwiki.knowledge import Knowledge
from maopd.envs.synthwiki.schema import ATTRIBUTES, RELATIONS

# (subject, predicate) -> the value a judge is expected to know, or None when it cannot know it
Knows = Callable[[str, str], str | None]

YES = "states_asked_fact"
NEGATIVE_KINDS = ("irrelevant", "off_entity", "wrong_relation", "empty", "no_information")
KINDS = ("correct", *NEGATIVE_KINDS)
# Reports that state no fact of the world's grammar, about the sub-question's subject {x}.
IRRELEVANT_TEMPLATES = ("{x} is well known.", "I searched for {x}.", "The results do not say.")


@dataclass(frozen=True)
class JudgeLabel:
    """The decidable verdict on a report and why: ``YES``, or the reason it is a no (``no_fact``,
    ``off_entity``, ``wrong_relation``, ``wrong_known_value``, ``not_a_subquestion``)."""

    useful: bool
    reason: str


def asked_facts(subquestion: str) -> list[tuple[str, str]] | None:
    """The (subject, predicate) pairs whose fact answers part of ``subquestion``: a chain's first
    hop, a comparison's two look-ups; None when it is not a question of the world's grammar."""
    plan = parse_question(subquestion)
    if isinstance(plan, Comparison):
        return [(plan.first, plan.attribute), (plan.second, plan.attribute)]
    if isinstance(plan, Chain):
        return [(plan.topic, plan.steps[0])]
    return None


def judge_label(subquestion: str, report: str, knows: Knows | None = None) -> JudgeLabel:
    """Whether ``report`` states a fact about an entity and predicate ``subquestion`` asks for (module
    doc). Aliases the report itself states count as the same entity; with ``knows``, a fact the judge
    is expected to know must carry its known value."""
    asked = asked_facts(subquestion)
    if asked is None:
        return JudgeLabel(False, "not_a_subquestion")
    facts = [f for f in parse_facts(report) if f.predicate != "alias"]
    if not facts:
        return JudgeLabel(False, "no_fact")
    same = Knowledge([report]).same
    wrong_value = False
    for subject, predicate in asked:
        names = same.get(subject, {subject})
        for fact in facts:
            if fact.subject in names and fact.predicate == predicate:
                known = knows(subject, predicate) if knows is not None else None
                if known is None or known == fact.value:
                    return JudgeLabel(True, YES)
                wrong_value = True
    if wrong_value:
        return JudgeLabel(False, "wrong_known_value")
    on_entity = any(f.subject in same.get(subject, {subject}) for subject, _ in asked for f in facts)
    return JudgeLabel(False, "wrong_relation" if on_entity else "off_entity")


@dataclass(frozen=True)
class JudgeExample:
    question_id: str
    question: str  # the original question
    subquestion: str
    report: str
    kind: str  # one of KINDS
    useful: bool  # judge_label(subquestion, report).useful: True for "correct" only


def _steps(questions: Sequence[Question]) -> list[tuple[Question, dict]]:
    """(question, step) for every one-hop step of ``questions``' decompositions, each sub-question once."""
    seen, steps = set(), []
    for question in questions:
        for wave in question.metadata.get("decomposition", []):
            for step in wave:
                if step["subquestion"] not in seen:
                    seen.add(step["subquestion"])
                    steps.append((question, step))
    return steps


def _subject(step: dict) -> str:
    plan = parse_question(step["subquestion"])
    assert isinstance(plan, Chain), step  # decomposition steps are one-hop questions
    return plan.topic


def _negative(kind: str, step: dict, steps: Sequence[tuple[Question, dict]], facts: Knowledge, rng: random.Random):
    """A report of negative ``kind`` for ``step``, or None when the world offers none (no other
    entity with the asked predicate, no other fact of the entity)."""
    subject = _subject(step)
    if kind == "empty":
        return ""
    if kind == "no_information":
        return NO_FACTS
    if kind == "irrelevant":
        return rng.choice(IRRELEVANT_TEMPLATES).format(x=subject)
    if kind == "off_entity":
        others = [s for _, s in steps if s["predicate"] == step["predicate"] and s["passage"] != step["passage"]]
        if not others:
            return None
        other = rng.choice(others)
        return fact_sentence(other["predicate"], _subject(other), other["answer"])
    predicates = [
        p for p in (*RELATIONS, *ATTRIBUTES) if p != step["predicate"] and facts.lookup(subject, p) is not None
    ]
    if not predicates:
        return None
    predicate = rng.choice(predicates)
    return fact_sentence(predicate, subject, facts.lookup(subject, predicate))


def judge_examples(
    questions: Sequence[Question], facts: Knowledge, seed: int, limit: int | None = None
) -> list[JudgeExample]:
    """Balanced judge examples from ``questions``' one-hop steps (``facts``: the world's facts):
    per step, the asked fact stated (half the time beside another fact of the same entity) and one
    negative, the negative kinds taken in turn; shuffled from ``seed``, then cut to ``limit``
    examples keeping the balance. Labels are ``judge_label``'s, which the kinds agree with."""
    rng = random.Random(seed)
    steps = _steps(questions)
    order = list(steps)
    rng.shuffle(order)
    pairs = []
    for index, (question, step) in enumerate(order):
        subject = _subject(step)
        kinds = NEGATIVE_KINDS[index % len(NEGATIVE_KINDS) :] + NEGATIVE_KINDS[: index % len(NEGATIVE_KINDS)]
        negative = next(
            (kind, report)
            for kind in kinds
            if (report := _negative(kind, step, steps, facts, rng)) is not None  # empty always exists
        )
        correct = fact_sentence(step["predicate"], subject, step["answer"])
        extra = _negative("wrong_relation", step, steps, facts, rng) if rng.random() < 0.5 else None
        if extra:
            correct = " ".join(rng.sample([correct, extra], 2))
        pairs.append(
            [
                JudgeExample(
                    question.id,
                    question.question,
                    step["subquestion"],
                    report,
                    kind,
                    judge_label(step["subquestion"], report).useful,
                )
                for kind, report in (("correct", correct), negative)
            ]
        )
    if limit is not None:
        pairs = pairs[: limit // 2]
    examples = [example for pair in pairs for example in pair]
    rng.shuffle(examples)
    return examples
