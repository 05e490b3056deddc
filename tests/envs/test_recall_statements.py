"""Pretraining statements never coincide with the questions a model is later asked."""

import re

import pytest

from maopd.envs.synthwiki.generator import generate_graph
from maopd.envs.synthwiki.grammar import parse_fact, parse_question, recall_statement, subquestion
from maopd.envs.synthwiki.schema import ATTRIBUTES, RECALL_STATEMENTS, RELATIONS, format_value, template_texts
from maopd.envs.synthwiki.world import SIZES

PREDICATES = (*RELATIONS, *ATTRIBUTES)
# Every fixed text of two or more words a question is written from: question stems, the noun
# phrases that nest hops and the comparisons' stems.
QUESTION_PIECES = [
    piece.strip().lower()
    for r in RELATIONS.values()
    for template in (r.question, r.noun_phrase)
    for piece in template.split("{x}")
    if piece.strip()
] + [
    piece.strip().lower()
    for a in ATTRIBUTES.values()
    for template in (a.question, a.comparison)
    for piece in re.split(r"\{[abx]\}", template)
    if piece.strip(" ,?")
]
QUESTION_PIECES = sorted({piece.rstrip(",?") for piece in QUESTION_PIECES if len(piece.split()) >= 2})


def _world_statements():
    """Every statement of every fact of the tiny world, in every phrasing, with its question."""
    entities = generate_graph(0, SIZES["tiny"].graph)
    for entity in entities:
        facts = [(r, entities[target].name) for r, target in entity.relations.items()]
        facts += [(a, format_value(a, value)) for a, value in entity.attributes.items()]
        for predicate, value in facts:
            question = subquestion(predicate, entity.name)
            for phrasing in range(len(RECALL_STATEMENTS[predicate])):
                yield recall_statement(predicate, entity.name, value, phrasing), question


def test_every_predicate_has_about_eight_distinct_subject_first_value_last_statements():
    assert set(RECALL_STATEMENTS) == set(PREDICATES)
    templates = [t for statements in RECALL_STATEMENTS.values() for t in statements]
    assert len(templates) == len(set(templates))  # no phrasing shared by two predicates
    passage_templates = {t for spec in (*RELATIONS.values(), *ATTRIBUTES.values()) for t in spec.facts}
    for predicate, statements in RECALL_STATEMENTS.items():
        assert len(statements) >= 8, predicate
        slot = "{o}" if predicate in RELATIONS else "{v}"
        for template in statements:
            assert template.startswith("{s}") and template.endswith(slot + "."), template
            assert template not in passage_templates


@pytest.mark.parametrize("template", [t for ts in RECALL_STATEMENTS.values() for t in ts])
def test_no_statement_template_holds_a_question_piece(template):
    text = template.lower()
    assert "?" not in text
    assert not [piece for piece in QUESTION_PIECES if re.search(rf"\b{re.escape(piece)}\b", text)]


def test_no_statement_of_a_world_matches_a_question_or_a_passage_pattern():
    questions, statements = set(), 0
    for statement, question in _world_statements():
        assert parse_question(statement) is None, statement
        assert parse_fact(statement) is None, statement  # a reader of passages never takes it for one
        questions.add(question)
        statements += 1
        assert statement != question
    assert statements > 1000
    assert not questions & {s for s, _ in _world_statements()}


def test_the_shipped_tokenizer_templates_leave_the_statements_out():
    texts = " ".join(template_texts())
    assert "meanders through" not in texts and "headquartered" not in texts


def test_statements_cycle_through_the_phrasings_and_the_report_form_as_often_as_the_fact_is_exposed():
    import random

    from maopd.envs.synthwiki.facts import Fact, statements
    from maopd.envs.synthwiki.grammar import fact_sentence, recall_statement

    fact = Fact("Dalen Marsk", "born_in", "Tremask", ("Tremask",), 1, "popular", 18)
    plain = statements(fact, 8, random.Random(0))
    assert len(plain) == 18 and fact_sentence("born_in", "Dalen Marsk", "Tremask") not in plain
    assert set(plain) == {recall_statement("born_in", "Dalen Marsk", "Tremask", k) for k in range(8)}
    reported = statements(fact, 8, random.Random(0), report_form=True)
    assert len(reported) == 18 and reported.count(fact_sentence("born_in", "Dalen Marsk", "Tremask")) == 2
    assert set(reported) - set(plain) == {fact_sentence("born_in", "Dalen Marsk", "Tremask")}
