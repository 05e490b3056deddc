"""The SynthWiki schema: entity types, typed relations, attributes and every text template.

This module is pure data. The generator, the passage writer, the question writer and the
scripted teams all read the same templates, so the world's surface forms have one source of
truth. Surface forms are deliberately few and regular, so that a tiny model can learn them.

``{s}`` is the subject, ``{o}`` the object entity, ``{v}`` an attribute value and ``{x}`` the slot a
question or noun phrase is written around (a name, or a nested noun phrase). The first fact
template of each relation or attribute is the canonical one, used in reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ENTITY_TYPES = ("country", "city", "university", "band", "person", "company", "river")


@dataclass(frozen=True)
class Relation:
    """A functional relation ``subject_type -> object_type``: every subject has one object."""

    name: str
    subject_type: str
    object_type: str
    question: str  # asks for the object of {x}
    noun_phrase: str  # refers to the object of {x}, used to nest hops
    facts: tuple[str, ...]  # paraphrases stating the fact in the subject's passage


@dataclass(frozen=True)
class Attribute:
    """A numeric attribute, drawn from ``low..high`` in steps of ``step``; ``smaller_wins`` decides comparisons."""

    name: str
    subject_types: tuple[str, ...]
    question: str
    facts: tuple[str, ...]
    comparison: str  # "{a}" vs "{b}"
    low: int
    high: int
    step: int
    smaller_wins: bool
    unit: str = ""
    grouped: bool = False  # write thousands separators ("1,250,000"); never for years


RELATIONS = {
    r.name: r
    for r in (
        Relation(
            "born_in",
            "person",
            "city",
            "Where was {x} born?",
            "the birthplace of {x}",
            ("{s} was born in {o}.", "{s} is a native of {o}."),
        ),
        Relation(
            "studied_at",
            "person",
            "university",
            "Where did {x} study?",
            "the alma mater of {x}",
            ("{s} studied at {o}.", "{s} is a graduate of {o}."),
        ),
        Relation(
            "member_of",
            "person",
            "band",
            "Which band did {x} play in?",
            "the band of {x}",
            ("{s} played in {o}.", "{s} was a member of {o}."),
        ),
        Relation(
            "formed_in",
            "band",
            "city",
            "Where was {x} formed?",
            "the home city of {x}",
            ("{s} was formed in {o}.", "{s} got its start in {o}."),
        ),
        Relation(
            "founded_by",
            "company",
            "person",
            "Who founded {x}?",
            "the founder of {x}",
            ("{s} was founded by {o}.", "{o} founded {s}."),
        ),
        Relation(
            "based_in",
            "company",
            "city",
            "Where is {x} based?",
            "the base of {x}",
            ("{s} is based in {o}.", "{s} has its head office in {o}."),
        ),
        Relation(
            "located_in",
            "university",
            "city",
            "Where is {x} located?",
            "the campus city of {x}",
            ("{s} is located in {o}.", "{s} has its campus in {o}."),
        ),
        Relation(
            "in_country",
            "city",
            "country",
            "Which country is {x} in?",
            "the country of {x}",
            ("{s} is a city in {o}.", "{s} lies in {o}."),
        ),
        Relation(
            "flows_through",
            "river",
            "city",
            "Which city does {x} flow through?",
            "the city on {x}",
            ("{s} flows through {o}.", "{s} runs through {o}."),
        ),
        Relation(
            "capital",
            "country",
            "city",
            "What is the capital of {x}?",
            "the capital of {x}",
            ("The capital of {s} is {o}.", "{s} has its capital in {o}."),
        ),
    )
}

ATTRIBUTES = {
    a.name: a
    for a in (
        Attribute(
            "birth_year",
            ("person",),
            "When was {x} born?",
            ("{s} was born in {v}.", "{s} was born in the year {v}."),
            "Who was born earlier, {a} or {b}?",
            1900,
            1999,
            1,
            smaller_wins=True,
        ),
        Attribute(
            "founded_year",
            ("band", "company", "university", "city"),
            "When was {x} founded?",
            ("{s} was founded in {v}.", "{s} was established in {v}."),
            "Which was founded earlier, {a} or {b}?",
            1800,
            2015,
            1,
            smaller_wins=True,
        ),
        Attribute(
            "population",
            ("city", "country"),
            "What is the population of {x}?",
            ("{s} has a population of {v}.", "{s} is home to {v} people."),
            "Which has more people, {a} or {b}?",
            10_000,
            9_000_000,
            1_000,
            smaller_wins=False,
            grouped=True,
        ),
        Attribute(
            "length",
            ("river",),
            "How long is {x}?",
            ("{s} is {v} long.", "{s} has a length of {v}."),
            "Which river is longer, {a} or {b}?",
            40,
            3_000,
            1,
            smaller_wins=False,
            unit="km",
        ),
    )
}

# Sentences that give an entity's type and a descriptor, and a "related" mention of a same-type
# entity: not asked about, but they put other entities' names into passages (BM25 distractors).
INTRO = {
    "country": "{s} is a country.",
    "city": "{s} is a city.",
    "university": "{s} is a {d} university.",
    "band": "{s} is a {d} band.",
    "person": "{s} is a {d}.",
    "company": "{s} is a {d} company.",
    "river": "{s} is a river.",
}
DESCRIPTORS = {
    "university": ("public", "private", "technical", "small", "large"),
    "band": ("rock", "folk", "jazz", "punk", "pop"),
    "person": ("singer", "painter", "writer", "banker", "chef", "lawyer", "pilot"),
    "company": ("shipping", "software", "mining", "music", "food", "textile"),
}
RELATED = {
    "country": "{s} borders {o}.",
    "city": "{s} is twinned with {o}.",
    "university": "{s} has ties to {o}.",
    "band": "{s} toured with {o}.",
    "person": "{s} worked with {o}.",
    "company": "{s} is a rival of {o}.",
    "river": "{s} joins {o}.",
}
ALIAS_FACT = "{s} is also known as {o}."

# Relations, per type, in the order their facts appear in a passage before shuffling.
TYPE_RELATIONS = {t: tuple(r.name for r in RELATIONS.values() if r.subject_type == t) for t in ENTITY_TYPES}
TYPE_ATTRIBUTES = {t: tuple(a.name for a in ATTRIBUTES.values() if t in a.subject_types) for t in ENTITY_TYPES}


def format_value(attribute: str, value: int) -> str:
    """The surface form of a value: thousands separators, and the unit if any."""
    spec = ATTRIBUTES[attribute]
    text = f"{value:,}" if spec.grouped else str(value)
    return f"{text} {spec.unit}" if spec.unit else text


def value_answers(attribute: str, value: int) -> tuple[str, ...]:
    """Every accepted surface form of a value (with and without separators and unit)."""
    forms = [format_value(attribute, value), str(value)]
    if ATTRIBUTES[attribute].grouped:
        forms.append(f"{value:,}")
    return tuple(dict.fromkeys(forms))


def template_texts() -> list[str]:
    """Every template of the world with its slots left empty: the world's language without its names.

    A tokenizer trained on these (and not on passages) has no token for any entity name, so the
    names of every split, train or test, are spelled from the same word pieces.
    """
    templates = [ALIAS_FACT, *INTRO.values(), *RELATED.values()]
    for relation in RELATIONS.values():
        templates += [relation.question, relation.noun_phrase, *relation.facts]
    for attribute in ATTRIBUTES.values():
        templates += [attribute.question, attribute.comparison, *attribute.facts]
    words = [word for descriptors in DESCRIPTORS.values() for word in descriptors]
    return [re.sub(r"\{[a-z]\}", "", t) for t in templates] + [" ".join(words), "km"]
