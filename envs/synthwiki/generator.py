"""The SynthWiki knowledge graph: invented entities, typed relations and numeric attributes.

The graph is made of sub-graphs (``SUBGRAPHS``: train, dev, test, heldout); relations never
cross sub-graphs, so questions drawn from different sub-graphs share no entity, not even an
answer. Each question split draws from one sub-graph (``maopd.envs.synthwiki.world``): train and dev
from their own, the current test split from ``heldout``. The ``test`` sub-graph is the one the
first two versions of the test split were drawn from; no question split draws from it any more,
but its entities stay in the world, so the rest of the graph is what it was. All randomness
comes from one ``random.Random(seed)`` consumed in a fixed order, sub-graph after sub-graph, so a
seed fixes the graph exactly and the sub-graphs generated before ``heldout`` do not depend on it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from maopd.envs.synthwiki.schema import (
    ATTRIBUTES,
    DESCRIPTORS,
    ENTITY_TYPES,
    RELATIONS,
    TYPE_ATTRIBUTES,
    TYPE_RELATIONS,
)

SPLITS = ("train", "dev", "test")  # the question splits
# Sub-graphs in generation order; one generated later never changes those before it.
SUBGRAPHS = ("train", "dev", "test", "heldout")
# Each sub-graph's share of ``GraphSize.counts``; "heldout" comes on top of the other three.
SPLIT_FRACTIONS = {"train": 0.7, "dev": 0.15, "test": 0.15, "heldout": 0.15}
ALIAS_RATES = {"company": 0.3, "university": 0.5, "river": 0.5}
ALIAS_MENTION_RATE = 0.5  # how often another passage (or a question) names an entity by its alias

_ONSETS = (
    "b",
    "br",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "st",
    "t",
    "tr",
    "v",
    "z",
    "sh",
    "th",
)
_MIDDLES = ("l", "r", "n", "m", "v", "d", "s", "k", "t")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "n", "r", "l", "s", "k", "m", "nd", "rn", "sk", "th")
_COUNTRY_ENDINGS = ("ria", "nia", "land", "mar", "vel")
_BAND_NOUNS = ("Tide", "Echo", "Static", "Bloom", "Sparks", "Choir", "Engine", "Lantern")
_COMPANY_NOUNS = ("Group", "Works", "Labs", "Holdings", "Trading", "Records", "Motors", "Foods")
_FIXED_WORDS = {"University", "of", "River", *_BAND_NOUNS, *_COMPANY_NOUNS}


@dataclass
class Entity:
    """One entity; its passage id is ``id``. ``mentions`` holds the surface form its passage uses
    for each relation's object (a name or an alias)."""

    id: str
    type: str
    name: str
    split: str  # the sub-graph it belongs to (one of ``SUBGRAPHS``)
    alias: str | None = None
    descriptor: str | None = None
    relations: dict[str, int] = field(default_factory=dict)
    mentions: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, int] = field(default_factory=dict)
    related: int | None = None

    @property
    def surfaces(self) -> tuple[str, ...]:
        return (self.name, self.alias) if self.alias else (self.name,)


class NameMaker:
    """Pronounceable invented names, globally unique across every surface form of the world."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.taken: set[str] = set()

    def word(self, syllables: int) -> str:
        rng = self.rng
        parts = [rng.choice(_ONSETS), rng.choice(_VOWELS)]
        for _ in range(syllables - 1):
            parts += [rng.choice(_MIDDLES), rng.choice(_VOWELS)]
        parts.append(rng.choice(_CODAS))
        return "".join(parts).capitalize()

    def claim(self, name: str) -> bool:
        if name in self.taken:
            return False
        self.taken.add(name)
        return True

    def fresh(self, kind: str) -> tuple[str, str | None]:
        """A new (name, alias) for an entity of type ``kind``."""
        while True:
            name, alias = self._draw(kind)
            if self.claim(name):
                if alias is not None and not self.claim(alias):
                    alias = None
                return name, alias

    def twin(self, entity: Entity) -> str | None:
        """A near-duplicate of ``entity``'s name: a person keeps one of two words; other names
        get one vowel changed ("Kelvar" -> "Kelvor", "Vessa River" -> "Vossa River")."""
        words = entity.name.split(" ")
        for _ in range(20):
            changed = list(words)
            if entity.type == "person":
                changed[self.rng.randrange(2)] = self.word(2)
            else:
                index = next(i for i, w in enumerate(words) if w not in _FIXED_WORDS)
                vowels = [i for i, ch in enumerate(words[index]) if ch in _VOWELS]
                position = self.rng.choice(vowels)
                word = words[index]
                changed[index] = word[:position] + self.rng.choice(_VOWELS) + word[position + 1 :]
            name = " ".join(changed)
            if self.claim(name):
                return name
        return None

    def _draw(self, kind: str) -> tuple[str, str | None]:
        rng = self.rng
        alias_roll = rng.random() < ALIAS_RATES.get(kind, 0.0)
        if kind == "person":
            return f"{self.word(2)} {self.word(rng.choice((1, 2)))}", None
        if kind == "city":
            return self.word(rng.choice((2, 2, 3))), None
        if kind == "country":
            return self.word(1).rstrip("aeiou") + rng.choice(_COUNTRY_ENDINGS), None
        if kind == "band":
            return f"{self.word(2)} {rng.choice(_BAND_NOUNS)}", None
        stem = self.word(rng.choice((2, 3)))
        if kind == "company":
            return f"{stem} {rng.choice(_COMPANY_NOUNS)}", stem if alias_roll else None
        if kind == "university":
            return (f"University of {stem}", f"{stem} University") if alias_roll else (f"{stem} University", None)
        if kind == "river":
            return f"{stem} River", stem if alias_roll else None
        raise ValueError(f"unknown entity type {kind!r}")


@dataclass(frozen=True)
class GraphSize:
    """Entity counts of the train, dev and test sub-graphs together (shared out by ``SPLIT_FRACTIONS``,
    with the held-out sub-graph on top) and the near-duplicate rate."""

    counts: dict[str, int]
    twin_rate: float = 0.1


def _split_count(total: int, split: str, kind: str) -> int:
    minimum = 2 if kind == "country" else 4
    return max(minimum, round(total * SPLIT_FRACTIONS[split]))


def generate_graph(seed: int, size: GraphSize, subgraphs: tuple[str, ...] = SUBGRAPHS) -> list[Entity]:
    """All entities of the world, ids ``0..n-1`` in generation order. ``subgraphs`` (a prefix of
    ``SUBGRAPHS``) stops after fewer sub-graphs: the entities it gives are the first ones of the
    whole graph, unchanged."""
    if subgraphs != SUBGRAPHS[: len(subgraphs)]:
        raise ValueError(f"subgraphs: expected a prefix of {SUBGRAPHS}, got {subgraphs}")
    rng = random.Random(seed)
    names = NameMaker(rng)
    entities: list[Entity] = []
    for split in subgraphs:
        _generate_split(rng, names, size, split, entities)
    return entities


def _generate_split(rng: random.Random, names: NameMaker, size: GraphSize, split: str, entities: list[Entity]) -> None:
    by_type: dict[str, list[int]] = {kind: [] for kind in ENTITY_TYPES}
    for kind in ENTITY_TYPES:
        for _ in range(_split_count(size.counts[kind], split, kind)):
            name, alias = names.fresh(kind)
            descriptor = rng.choice(DESCRIPTORS[kind]) if kind in DESCRIPTORS else None
            entity = Entity(str(len(entities)), kind, name, split, alias, descriptor)
            entities.append(entity)
            by_type[kind].append(int(entity.id))
    twins = []
    for kind in ENTITY_TYPES:
        if kind == "country":
            continue
        for index in list(by_type[kind]):
            if rng.random() < size.twin_rate:
                name = names.twin(entities[index])
                if name is not None:
                    descriptor = entities[index].descriptor
                    twins.append((index, len(entities)))
                    entities.append(Entity(str(len(entities)), kind, name, split, None, descriptor))
                    by_type[kind].append(len(entities) - 1)

    countries, cities = by_type["country"], by_type["city"]
    for position, city in enumerate(cities):
        country = countries[position] if position < len(countries) else rng.choice(countries)
        entities[city].relations["in_country"] = country
        if position < len(countries):
            entities[country].relations["capital"] = city
    for index in (i for kind in ENTITY_TYPES for i in by_type[kind]):
        entity = entities[index]
        for relation in TYPE_RELATIONS[entity.type]:
            if relation not in entity.relations:
                entity.relations[relation] = rng.choice(by_type[RELATIONS[relation].object_type])
        for attribute in TYPE_ATTRIBUTES[entity.type]:
            spec = ATTRIBUTES[attribute]
            entity.attributes[attribute] = rng.randrange(spec.low, spec.high + 1, spec.step)
        others = [i for i in rng.sample(by_type[entity.type], min(2, len(by_type[entity.type]))) if i != index]
        entity.related = others[0] if others else None
    for original, twin in twins:
        # A near-duplicate shares one fact with its original: a hard distractor for retrieval.
        relation = rng.choice(TYPE_RELATIONS[entities[twin].type])
        if relation != "in_country":  # keeps every country's capital inside that country
            entities[twin].relations[relation] = entities[original].relations[relation]
    for index in (i for kind in ENTITY_TYPES for i in by_type[kind]):
        entity = entities[index]
        for relation, target in sorted(entity.relations.items()):
            entity.mentions[relation] = mention(entities[target], rng)


def mention(entity: Entity, rng: random.Random) -> str:
    """How a passage or question names ``entity``: its alias at ``ALIAS_MENTION_RATE``."""
    if entity.alias and rng.random() < ALIAS_MENTION_RATE:
        return entity.alias
    return entity.name
