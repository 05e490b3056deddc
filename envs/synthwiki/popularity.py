"""Entity popularity: how often a language model's pretraining states each entity's facts.

Language models answer questions about popular entities from memory and fail on the long tail:
on PopQA (Mallen et al. 2023, "When Not to Trust Language Models"), closed-book accuracy rises
steeply with the subject's Wikipedia page views, while retrieval helps most on the rare subjects.
That is exactly when skipping search is tempting and when it is wrong, so the testbed needs the
same shape. This module defines it once per world, for every consumer:

* **rank**: every entity gets a popularity rank 1..n (1 is the most popular), the order of a hash
  of the world seed and the entity's canonical name (``canonical_name``, the smallest of its
  surface forms, as ``ClosedBook.canonical`` reads it from text). The rank depends on the set of
  names alone, never on generation order, so it is the same whether read from the knowledge graph
  or from parsed passages.
* **exposures**: the number of times a fact of the entity of rank r (of n) is stated in
  pretraining, a Zipf law ``top · (r / r_0)^-s`` capped at ``top``. The curve is fixed by three
  anchors: ``top`` for the head, ``at_quarter`` at the boundary of the most popular quarter and
  ``at_median`` at the median; the exponent is ``s = log2(at_quarter / at_median)`` and ``r_0``
  places ``at_quarter`` at ``n / 4``. Storage needs on the order of a hundred exposures in varied
  phrasings (Allen-Zhu & Li, Physics of Language Models 3.1 and 3.3), so the default puts the
  popular quarter at 100 to 300 exposures and the least popular half at 10 or fewer.
* **bands**: ``popular`` (the most popular quarter, ``4 r <= n``), ``middle`` and ``long_tail``
  (the least popular half, ``2 r > n``): the groups the gates measure recall on.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from maopd.base.config import ConfigError, check_fields, checked
from maopd.envs.synthwiki.generator import Entity

BANDS = ("popular", "middle", "long_tail")


def canonical_name(surfaces: Iterable[str]) -> str:
    """The name popularity is keyed by: the smallest of an entity's surface forms (name, alias)."""
    return min(surfaces)


def _order_key(world_seed: int, name: str) -> tuple[int, str]:
    digest = hashlib.sha256(f"{world_seed}\x1fpopularity\x1f{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big"), name


def popularity_ranks(world_seed: int, names: Iterable[str]) -> dict[str, int]:
    """Rank 1..n of each canonical name (1: most popular), from the seed and the names alone."""
    order = sorted(set(names), key=lambda name: _order_key(world_seed, name))
    return {name: rank for rank, name in enumerate(order, start=1)}


def entity_ranks(world_seed: int, entities: Sequence[Entity]) -> dict[str, int]:
    """Rank of each entity of a world's knowledge graph, by entity id."""
    ranks = popularity_ranks(world_seed, (canonical_name(e.surfaces) for e in entities))
    return {e.id: ranks[canonical_name(e.surfaces)] for e in entities}


def entity_bands(world_seed: int, entities: Sequence[Entity]) -> dict[str, str]:
    """The band of each entity of a world's knowledge graph, by entity id."""
    ranks = entity_ranks(world_seed, entities)
    return {entity_id: band(rank, len(entities)) for entity_id, rank in ranks.items()}


def weakest_band(entity_ids: Iterable[str], bands: dict[str, str]) -> str:
    """The band of the least popular of ``entity_ids``: a question about them is answerable from
    memory only when every fact of its chain is known."""
    return max((bands[entity_id] for entity_id in entity_ids), key=BANDS.index)


def band(rank: int, count: int) -> str:
    """The band of rank ``rank`` among ``count`` entities (see ``BANDS``)."""
    if not 1 <= rank <= count:
        raise ValueError(f"rank must be in 1..{count}, got {rank}")
    if 4 * rank <= count:
        return "popular"
    return "long_tail" if 2 * rank > count else "middle"


@dataclass(frozen=True)
class ExposureCurve:
    """The capped Zipf law of exposures per fact (see the module docstring)."""

    top: float = checked(300.0, gt=0)
    at_quarter: float = checked(100.0, gt=0)
    at_median: float = checked(10.0, gt=0)

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.top >= self.at_quarter > self.at_median:
            raise ConfigError(
                f"exposures: need top >= at_quarter > at_median, got {self.top}, {self.at_quarter}, {self.at_median}"
            )

    @property
    def exponent(self) -> float:
        """The Zipf exponent s: the quarter-to-median drop is a factor of 2 in rank."""
        return math.log2(self.at_quarter / self.at_median)

    def scaled(self, factor: float) -> ExposureCurve:
        """Every anchor times ``factor``: the same shape, more (or fewer) statements."""
        return ExposureCurve(self.top * factor, self.at_quarter * factor, self.at_median * factor)

    def exposures(self, rank: int, count: int) -> int:
        """How often a fact of the entity of rank ``rank`` among ``count`` is stated (at least once)."""
        if not 1 <= rank <= count:
            raise ValueError(f"rank must be in 1..{count}, got {rank}")
        law = self.at_quarter * (4 * rank / count) ** -self.exponent
        return max(1, round(min(self.top, law)))
