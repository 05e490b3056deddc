"""Answer extraction: EM normalization on tricky strings, the six flexible rules, the failure taxonomy."""

import pytest

from maopd.envs.rewards import exact_match
from maopd.evaluation.extraction import (
    EMPTY_CANDIDATE,
    NO_CANDIDATE,
    NO_VALID_TAG,
    Extraction,
    failure_kind,
    flexible_answer,
)


@pytest.mark.parametrize(
    "prediction, reference, expected",
    [
        ("The  Beatles!", "beatles", 1.0),  # article, punctuation, extra space
        ("“Wilhelm Conrad Röntgen”", "Wilhelm Conrad Röntgen", 1.0),  # curly quotes are punctuation
        ("an apple", "Apple.", 1.0),
        ("theatre", "atre", 0.0),  # "the" is removed only as a whole word
        ("A-B", "ab", 1.0),  # the hyphen is removed, not replaced by a space
        ("1,000", "1000", 1.0),
        ("Paris, France", "Paris", 0.0),  # exact, not containment
        (None, "anything", 0.0),  # a missing span scores zero
    ],
)
def test_exact_match_normalization(prediction, reference, expected):
    assert exact_match(prediction, [reference]) == expected


@pytest.mark.parametrize(
    "output, expected",
    [
        # 1: strict, last complete <answer> tag, unchanged even when a looser form follows
        ("<answer>Paris</answer> or <answer> Lyon </answer>", Extraction("Lyon", 1)),
        ("<answer></answer>", Extraction("", 1)),
        # 2: paired tag differing in case or inner whitespace, last pair
        ("<Answer>Rome</Answer> then < answer >Milan</ ANSWER >", Extraction("Milan", 2)),
        # 3: one unclosed opening tag followed by single-line plain text
        ("I think <answer> Tulsa ", Extraction("Tulsa", 3)),
        ("<ANSWER>Tulsa", Extraction("Tulsa", 3)),
        # 4: trailing "Final answer:" / "Answer:" line
        ("Reasoning here.\nFinal answer: Don Revie\n", Extraction("Don Revie", 4)),
        ("Some text\nanswer:   42", Extraction("42", 4)),
        # 5: the whole output as single-line plain text
        ("  River Thames  ", Extraction("River Thames", 5)),
        # 6: unparsed
        ("", Extraction(None, 6)),
        (None, Extraction(None, 6)),
        ("line one\nline two", Extraction(None, 6)),  # multi-line, no rule applies
        ("x" * 129, Extraction(None, 6)),  # too long for rule 5
        ("```Paris```", Extraction(None, 6)),  # code fence
        ("<b>Paris</b>", Extraction(None, 6)),  # angle brackets
    ],
)
def test_flexible_rules(output, expected):
    assert flexible_answer(output) == expected


def test_rule_three_needs_a_single_opening_and_plain_single_line_text():
    assert flexible_answer("<answer>a <answer>b").rule == 6  # two openings, no rule fits
    assert flexible_answer("<answer>first line\nsecond line").rule == 6
    assert flexible_answer("<answer>" + "y" * 128) == Extraction("y" * 128, 3)
    assert flexible_answer("<answer>" + "y" * 129).rule == 6


def test_rule_four_takes_only_the_last_line_and_plain_text():
    assert flexible_answer("Answer: Paris\nbut wait, more text follows here").rule == 6
    assert flexible_answer("Intro\nFinal answer: <i>Paris</i>").rule == 6
    assert flexible_answer("Intro\nFinal Answer : Paris").answer == "Paris"


def test_failure_taxonomy():
    assert failure_kind(None) == NO_CANDIDATE
    assert failure_kind("   \n") == EMPTY_CANDIDATE
    assert failure_kind("Paris") == NO_VALID_TAG
    assert failure_kind("<Answer>Paris</Answer>") == NO_VALID_TAG  # case differs: strict fails
    assert failure_kind("<answer>Paris</answer>") is None
    assert failure_kind("<answer></answer>") is None  # an empty span is scored, not a format failure
