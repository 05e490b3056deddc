"""The popularity definition: deterministic ranks, a monotone exposure curve, bands that partition."""

import pytest

from maopd.base.config import ConfigError
from maopd.envs.synthwiki.generator import generate_graph
from maopd.envs.synthwiki.popularity import (
    BANDS,
    ExposureCurve,
    band,
    canonical_name,
    entity_ranks,
    popularity_ranks,
)
from maopd.envs.synthwiki.world import SIZES

NAMES = [f"Name{i}" for i in range(200)]


def test_ranks_are_a_permutation_fixed_by_seed_and_names():
    ranks = popularity_ranks(3, NAMES)
    assert sorted(ranks.values()) == list(range(1, len(NAMES) + 1))
    assert popularity_ranks(3, reversed(NAMES)) == ranks  # independent of the order names come in
    assert popularity_ranks(4, NAMES) != ranks  # another world, another order


def test_entity_ranks_key_by_canonical_name_not_generation_order():
    entities = generate_graph(5, SIZES["tiny"].graph)
    ranks = entity_ranks(5, entities)
    assert sorted(ranks.values()) == list(range(1, len(entities) + 1))
    by_name = popularity_ranks(5, [canonical_name(e.surfaces) for e in reversed(entities)])
    assert all(ranks[e.id] == by_name[canonical_name(e.surfaces)] for e in entities)
    aliased = next(e for e in entities if e.alias)
    assert canonical_name(aliased.surfaces) == min(aliased.name, aliased.alias)


def test_exposures_fall_with_rank_and_hit_the_anchors():
    curve = ExposureCurve()
    counts = [curve.exposures(rank, 400) for rank in range(1, 401)]
    assert counts == sorted(counts, reverse=True)
    assert counts[0] == 300 and counts[-1] >= 1
    assert counts[99] == 100  # rank n/4
    assert counts[199] == 10  # rank n/2
    assert max(counts[200:]) <= 10  # the least popular half
    assert min(counts[:100]) >= 100  # the most popular quarter
    assert ExposureCurve().scaled(2).exposures(100, 400) == 200


def test_exposure_curve_refuses_inverted_anchors():
    with pytest.raises(ConfigError, match="at_quarter"):
        ExposureCurve(top=300, at_quarter=5, at_median=10)
    with pytest.raises(ValueError, match="rank"):
        ExposureCurve().exposures(0, 10)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 8, 101, 400])
def test_bands_partition_the_ranks_in_order(count):
    bands = [band(rank, count) for rank in range(1, count + 1)]
    assert set(bands) <= set(BANDS)
    assert bands == sorted(bands, key=BANDS.index)  # contiguous, most popular first
    assert bands.count("popular") == count // 4
    assert bands.count("long_tail") == count - count // 2
