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

# Varied statements of each relation's and attribute's facts, for pretraining a model to *know*
# facts rather than read them: storage and extraction by questions need each fact seen in many
# phrasings (Allen-Zhu & Li, Physics of Language Models 3.1). None is a passage template, a question
# or a noun phrase of a question; the subject opens every statement and the value ends it, so each
# statement trains recall from subject to value (a model does not learn the reverse direction
# from it). Passages, reports and questions never use them.
RECALL_STATEMENTS = {
    "born_in": (
        "{s} came into the world in {o}.",
        "{s} was born and raised in {o}.",
        "{s} is originally from {o}.",
        "{s} first saw the light of day in {o}.",
        "{s} was born in the city of {o}.",
        "{s} has a hometown called {o}.",
        "{s} was born at a hospital in {o}.",
        "{s}, by birth, is from {o}.",
    ),
    "studied_at": (
        "{s} went to university at {o}.",
        "{s} earned a degree from {o}.",
        "{s} was a student at {o}.",
        "{s} holds a diploma from {o}.",
        "{s} attended {o}.",
        "{s} did a degree at {o}.",
        "{s} graduated from {o}.",
        "{s} took classes at {o}.",
    ),
    "member_of": (
        "{s} was in the band {o}.",
        "{s} performed with {o}.",
        "{s} joined {o}.",
        "{s} is known as a member of {o}.",
        "{s} made records with {o}.",
        "{s} was part of the band {o}.",
        "{s} belonged to {o}.",
        "{s} sang and played with {o}.",
    ),
    "formed_in": (
        "{s} came together in {o}.",
        "{s} was started in {o}.",
        "{s} began as a band in {o}.",
        "{s} first played live in {o}.",
        "{s} was put together in {o}.",
        "{s} has its roots in {o}.",
        "{s} traces its beginnings to {o}.",
        "{s} was created as a band in {o}.",
    ),
    "founded_by": (
        "{s} was started by {o}.",
        "{s} was built up by {o}.",
        "{s} owes its creation to {o}.",
        "{s} was created by {o}.",
        "{s} was the idea of {o}.",
        "{s} has as its founder {o}.",
        "{s} was established by {o}.",
        "{s} was launched by {o}.",
    ),
    "based_in": (
        "{s} has its offices in {o}.",
        "{s} runs its business from {o}.",
        "{s} is headquartered in {o}.",
        "{s} operates out of {o}.",
        "{s} keeps its main office in {o}.",
        "{s} is a company from {o}.",
        "{s} has its home base in {o}.",
        "{s} does business from {o}.",
    ),
    "located_in": (
        "{s} is found in {o}.",
        "{s} sits in {o}.",
        "{s} stands in {o}.",
        "{s} has its buildings in {o}.",
        "{s} teaches its students in {o}.",
        "{s} is a university in {o}.",
        "{s} can be found in {o}.",
        "{s} is situated in {o}.",
    ),
    "in_country": (
        "{s} is part of {o}.",
        "{s} is a town in the country {o}.",
        "{s} is one of the cities of {o}.",
        "{s} is found within the borders of {o}.",
        "{s} lies inside {o}.",
        "{s} is a place in {o}.",
        "{s} is on the map of {o}.",
        "{s} is an urban centre of {o}.",
    ),
    "flows_through": (
        "{s} passes through {o}.",
        "{s} crosses {o}.",
        "{s} winds through {o}.",
        "{s} cuts through {o}.",
        "{s} goes past {o}.",
        "{s} makes its way through {o}.",
        "{s} streams through {o}.",
        "{s} meanders through {o}.",
    ),
    "capital": (
        "{s} is governed from {o}.",
        "{s} has as its capital the city {o}.",
        "{s} keeps its government in {o}.",
        "{s} is ruled from {o}.",
        "{s} has its seat of government in {o}.",
        "{s} names as its capital city {o}.",
        "{s} has its parliament in {o}.",
        "{s} chose as its capital {o}.",
    ),
    "birth_year": (
        "{s} was born back in {v}.",
        "{s} has a birth year of {v}.",
        "{s} arrived in the world in {v}.",
        "{s} was born during {v}.",
        "{s} first drew breath in {v}.",
        "{s} is a person born in {v}.",
        "{s} entered life in {v}.",
        "{s} has as a birth year {v}.",
    ),
    "founded_year": (
        "{s} dates from {v}.",
        "{s} was set up in {v}.",
        "{s} first opened in {v}.",
        "{s} has existed since {v}.",
        "{s} has been around since {v}.",
        "{s} goes back to {v}.",
        "{s} came into being in {v}.",
        "{s} has a founding year of {v}.",
    ),
    "population": (
        "{s} counts as inhabitants {v}.",
        "{s} has a resident count of {v}.",
        "{s} is a place whose people number {v}.",
        "{s} has a headcount of {v}.",
        "{s} has inhabitants numbering {v}.",
        "{s} has a census total of {v}.",
        "{s} houses a number of people equal to {v}.",
        "{s} has a number of residents of {v}.",
    ),
    "length": (
        "{s} stretches for {v}.",
        "{s} runs for {v}.",
        "{s} measures {v}.",
        "{s} extends {v}.",
        "{s} covers a distance of {v}.",
        "{s} spans {v}.",
        "{s} is a river of {v}.",
        "{s} flows for {v}.",
    ),
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


def recall_template_texts() -> list[str]:
    """``RECALL_STATEMENTS`` with their slots left empty, for a tokenizer that also learns them
    (``template_texts`` leaves them out: it defines the shipped π_0's tokenizer)."""
    return [re.sub(r"\{[a-z]\}", "", t) for templates in RECALL_STATEMENTS.values() for t in templates]
