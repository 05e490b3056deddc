"""Turn SynthWiki structures into text and text back into structures.

Questions, sub-questions, passage sentences and reports are all written from the templates in
``schema``; this module renders them and parses them back. The scripted teams use the parsers to
play every role from text alone (they never read the world's knowledge graph), so a parse
failure here is a real failure of the team, exactly as it would be for a model.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from maopd.envs.synthwiki.schema import ALIAS_FACT, ATTRIBUTES, RECALL_STATEMENTS, RELATIONS

# Names are capitalized words, optionally joined by "of" ("University of Brask").
NAME = r"[A-Z][a-z]+(?:(?: of)? [A-Z][a-z]+)*"
VALUE = r"\d[\d,]*(?: km)?"  # values carry their unit, if any
_SENTENCE_END = re.compile(r"(?<=\.)\s+")


@dataclass(frozen=True)
class Fact:
    """``subject`` --``predicate``--> ``value``; predicate is a relation, attribute or ``alias``."""

    subject: str
    predicate: str
    value: str


@dataclass(frozen=True)
class Chain:
    """A compositional question: start at ``topic``, follow ``steps`` (the last may be an attribute)."""

    topic: str
    steps: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    attribute: str
    first: str
    second: str


def _template_regex(template: str, slots: dict[str, str]) -> re.Pattern[str]:
    pattern = re.escape(template)
    for slot, group in slots.items():
        pattern = pattern.replace(re.escape("{" + slot + "}"), group, 1)
    return re.compile(pattern)


def _fact_patterns() -> list[tuple[re.Pattern[str], str]]:
    entity = {"s": f"(?P<s>{NAME})", "o": f"(?P<o>{NAME})"}
    value = {"s": f"(?P<s>{NAME})", "v": f"(?P<o>{VALUE})"}
    patterns = [(_template_regex(ALIAS_FACT, entity), "alias")]
    for relation in RELATIONS.values():
        patterns += [(_template_regex(t, entity), relation.name) for t in relation.facts]
    for attribute in ATTRIBUTES.values():
        patterns += [(_template_regex(t, value), attribute.name) for t in attribute.facts]
    return patterns


_FACTS = _fact_patterns()
_COMPARISONS = [
    (_template_regex(a.comparison, {"a": "(?P<a>.+?)", "b": "(?P<b>.+)"}), a.name) for a in ATTRIBUTES.values()
]
_QUESTIONS = [(_template_regex(r.question, {"x": "(?P<x>.+)"}), r.name) for r in RELATIONS.values()] + [
    (_template_regex(a.question, {"x": "(?P<x>.+)"}), a.name) for a in ATTRIBUTES.values()
]
_NOUN_PREFIXES = [(r.noun_phrase.replace("{x}", ""), r.name) for r in RELATIONS.values()]


# ----- rendering -----------------------------------------------------------------------------
def fact_sentence(predicate: str, subject: str, value: str, paraphrase: int = 0) -> str:
    """A fact in paraphrase number ``paraphrase`` (0 is the canonical form used in reports)."""
    if predicate == "alias":
        return ALIAS_FACT.format(s=subject, o=value)
    if predicate in RELATIONS:
        return RELATIONS[predicate].facts[paraphrase].format(s=subject, o=value)
    return ATTRIBUTES[predicate].facts[paraphrase].format(s=subject, v=value)


def recall_statement(predicate: str, subject: str, value: str, phrasing: int) -> str:
    """A fact in ``RECALL_STATEMENTS[predicate][phrasing]``: a pretraining statement, never a passage's."""
    return RECALL_STATEMENTS[predicate][phrasing].format(s=subject, o=value, v=value)


def subquestion(predicate: str, subject: str) -> str:
    """The one-hop question asking for ``predicate`` of ``subject``."""
    template = RELATIONS[predicate].question if predicate in RELATIONS else ATTRIBUTES[predicate].question
    return template.format(x=subject)


def chain_question(chain: Chain) -> str:
    """Nest all steps but the last as noun phrases, then ask the last step's question."""
    phrase = chain.topic
    for step in chain.steps[:-1]:
        phrase = RELATIONS[step].noun_phrase.format(x=phrase)
    return subquestion(chain.steps[-1], phrase)


def comparison_question(comparison: Comparison) -> str:
    return ATTRIBUTES[comparison.attribute].comparison.format(a=comparison.first, b=comparison.second)


# ----- parsing -------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1 << 18)  # menus re-read the same passages at every step
def parse_fact(sentence: str) -> Fact | None:
    sentence = sentence.strip()
    for pattern, predicate in _FACTS:
        match = pattern.fullmatch(sentence)
        if match:
            return Fact(match["s"], predicate, match["o"])
    return None


def parse_facts(text: str) -> list[Fact]:
    """Every fact stated in ``text`` (a passage or a report); other sentences are skipped."""
    return list(_parse_facts(text))


@functools.lru_cache(maxsize=1 << 16)
def _parse_facts(text: str) -> tuple[Fact, ...]:
    facts = (parse_fact(sentence) for sentence in _SENTENCE_END.split(text.strip()))
    return tuple(fact for fact in facts if fact is not None)


def _parse_phrase(phrase: str) -> Chain | None:
    steps: list[str] = []
    while not re.fullmatch(NAME, phrase):
        for prefix, relation in _NOUN_PREFIXES:
            if phrase.startswith(prefix):
                steps.insert(0, relation)
                phrase = phrase[len(prefix) :]
                break
        else:
            return None
    return Chain(phrase, tuple(steps))


@functools.lru_cache(maxsize=1 << 16)  # option menus parse the same tasks at every step; plans are frozen
def parse_question(text: str) -> Chain | Comparison | None:
    """The plan of a SynthWiki question or sub-question; None if it is not one."""
    text = text.strip()
    for pattern, attribute in _COMPARISONS:
        match = pattern.fullmatch(text)
        if match and re.fullmatch(NAME, match["a"]) and re.fullmatch(NAME, match["b"]):
            return Comparison(attribute, match["a"], match["b"])
    for pattern, predicate in _QUESTIONS:
        match = pattern.fullmatch(text)
        if match:
            inner = _parse_phrase(match["x"])
            if inner is not None:
                return Chain(inner.topic, inner.steps + (predicate,))
    return None
