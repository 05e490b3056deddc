"""SynthWiki passages: one Search-R1/FlashRAG document per entity, titled by the entity's name.

A passage states the entity's type, its alias (if any), every relation and attribute in a
randomly chosen paraphrase and random order, and one mention of a related same-type entity.
Each passage draws from its own ``random.Random(f"{seed}:{id}")``, so passages can be written
one at a time (streamed) and still be byte-identical for a seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from maopd.envs.retrieval.corpus import Document
from maopd.envs.synthwiki.generator import Entity
from maopd.envs.synthwiki.grammar import fact_sentence
from maopd.envs.synthwiki.schema import ATTRIBUTES, INTRO, RELATED, RELATIONS, format_value


def passage(entity: Entity, entities: Sequence[Entity], seed: int) -> Document:
    rng = random.Random(f"{seed}:{entity.id}")
    facts = [
        fact_sentence(relation, entity.name, entity.mentions[relation], rng.randrange(len(RELATIONS[relation].facts)))
        for relation in sorted(entity.relations)
    ]
    facts += [
        fact_sentence(
            attribute, entity.name, format_value(attribute, value), rng.randrange(len(ATTRIBUTES[attribute].facts))
        )
        for attribute, value in sorted(entity.attributes.items())
    ]
    rng.shuffle(facts)
    sentences = [INTRO[entity.type].format(s=entity.name, d=entity.descriptor)]
    if entity.alias:
        sentences.append(fact_sentence("alias", entity.name, entity.alias))
    sentences += facts
    if entity.related is not None:
        sentences.append(RELATED[entity.type].format(s=entity.name, o=entities[entity.related].name))
    return Document(entity.id, entity.name, " ".join(sentences))


def iter_documents(entities: Sequence[Entity], seed: int) -> Iterator[Document]:
    for entity in entities:
        yield passage(entity, entities, seed)
