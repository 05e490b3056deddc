"""Decidable judge labels and the balanced examples drawn from them."""

from __future__ import annotations

from collections import Counter

import pytest

from maopd.envs.prompts import NO_FACTS
from maopd.envs.synthwiki import load_default_world
from maopd.envs.synthwiki.grammar import parse_facts
from maopd.envs.synthwiki.judge_labels import IRRELEVANT_TEMPLATES, KINDS, JudgeLabel, judge_examples, judge_label
from maopd.envs.synthwiki.knowledge import Knowledge

ASKED = "Where was Orlen Vask born?"


@pytest.mark.parametrize(
    ("report", "useful", "reason"),
    [
        ("Orlen Vask was born in Tarvel.", True, "states_asked_fact"),
        ("Orlen Vask was born in Brisk.", True, "states_asked_fact"),  # the value is not the judge's to know
        ("Orlen Vask studied at Tarvel University. Orlen Vask was born in Tarvel.", True, "states_asked_fact"),
        ("Orlen Vask is also known as Orlen. Orlen was born in Tarvel.", True, "states_asked_fact"),
        ("Mirra Tolk was born in Tarvel.", False, "off_entity"),
        ("Orlen Vask studied at Tarvel University.", False, "wrong_relation"),
        ("Orlen Vask was born in 1950.", False, "wrong_relation"),  # the birth year, not the birthplace
        ("", False, "no_fact"),
        (NO_FACTS, False, "no_fact"),
        ("The weather is nice today.", False, "no_fact"),
        ("Orlen Vask is well known.", False, "no_fact"),
    ],
)
def test_a_report_is_useful_exactly_when_it_states_the_asked_entitys_asked_fact(report, useful, reason):
    assert judge_label(ASKED, report) == JudgeLabel(useful, reason)


def test_labels_of_chains_comparisons_and_unparsed_tasks():
    chain = "Which country is the birthplace of Orlen Vask in?"
    assert judge_label(chain, "Orlen Vask was born in Tarvel.").useful  # the first hop helps
    assert judge_label(chain, "Tarvel is a city in Brenmark.").reason == "off_entity"
    comparison = "Who was born earlier, Orlen Vask or Mirra Tolk?"
    assert judge_label(comparison, "Mirra Tolk was born in 1950.").useful
    assert judge_label(comparison, "Mirra Tolk was born in Tarvel.").reason == "wrong_relation"
    assert judge_label("tell me everything", "Orlen Vask was born in Tarvel.") == JudgeLabel(False, "not_a_subquestion")


def test_a_known_fact_must_carry_its_known_value():
    def knows(subject, predicate):
        return "Tarvel" if (subject, predicate) == ("Orlen Vask", "born_in") else None

    assert judge_label(ASKED, "Orlen Vask was born in Tarvel.", knows).useful
    assert judge_label(ASKED, "Orlen Vask was born in Brisk.", knows) == JudgeLabel(False, "wrong_known_value")
    assert judge_label("Where was Mirra Tolk born?", "Mirra Tolk was born in Brisk.", knows).useful


def test_irrelevant_templates_state_no_fact():
    assert not any(parse_facts(t.format(x="Orlen Vask")) for t in IRRELEVANT_TEMPLATES)


@pytest.fixture(scope="module")
def tiny_world():
    world = load_default_world(0, "tiny")
    return world, Knowledge(d.text for d in world.corpus.documents)


def test_examples_are_balanced_deterministic_and_cover_every_kind(tiny_world):
    world, facts = tiny_world
    examples = judge_examples(world.splits["dev"], facts, seed=3)
    assert examples == judge_examples(world.splits["dev"], facts, seed=3)
    assert examples != judge_examples(world.splits["dev"], facts, seed=4)
    labels = Counter(e.useful for e in examples)
    assert labels[True] == labels[False] > 20
    kinds = Counter(e.kind for e in examples)
    assert set(kinds) == set(KINDS)
    negatives = [kinds[k] for k in KINDS if k != "correct"]
    assert max(negatives) - min(negatives) <= max(negatives) // 2  # the negative kinds taken in turn
    for example in examples:
        assert example.useful == (example.kind == "correct") == judge_label(example.subquestion, example.report).useful
    questions = {q.id for q in world.splits["dev"]}
    assert {e.question_id for e in examples} <= questions


def test_a_limit_keeps_the_balance(tiny_world):
    world, facts = tiny_world
    examples = judge_examples(world.splits["dev"], facts, seed=0, limit=21)
    assert len(examples) == 20 and sum(e.useful for e in examples) == 10
