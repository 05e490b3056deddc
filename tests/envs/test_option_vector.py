"""Vectorized option-mode episodes are the text environment's episodes, looked up instead of recomputed."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
import torch

from maopd.base.config import ConfigError
from maopd.envs.option.menus import MENU_SIZE
from maopd.envs.option.scenarios import SCENARIOS, get_scenario
from maopd.envs.option.vector import OptionVectorEnv, TransitionCache
from maopd.envs.synthwiki import load_default_world
from maopd.envs.synthwiki.closed_book import ClosedBook, ClosedBookConfig
from maopd.training.marl.policy import MenuPolicy, play, play_batch


def without_wall_clock(record):
    return replace(record, duration_s=0.0)


def replay(env, policy, question_index, actions):
    """The text environment played one AEC step at a time (``play``), choosing ``actions``."""
    actions = iter(actions)
    record = play(env, policy, {"question_index": question_index}, lambda decision, dist: next(actions)).record
    assert next(actions, None) is None
    return record


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_vectorized_episodes_replay_identically_through_the_text_environment(name):
    scenario = get_scenario(name)
    torch.manual_seed(0)
    policy = MenuPolicy(MENU_SIZE, hidden=16)
    cache = TransitionCache()
    venv = OptionVectorEnv(lambda: scenario.make_env("train"), num_envs=6, cache=cache)
    questions = [random.Random(1).randrange(len(venv.questions)) for _ in range(12)]
    # Twice over the same questions: the second pass reads transitions the first one stored.
    episodes = play_batch(venv, policy, questions) + play_batch(venv, policy, questions)
    assert cache.hits > 0 and cache.misses > 0
    fresh = scenario.make_env("train")
    for episode in episodes:
        record = replay(fresh, policy, episode.question_index, [d.action for d in episode.decisions])
        assert without_wall_clock(record) == without_wall_clock(episode.record)


def test_vectorized_decisions_carry_the_global_state_of_the_text_environment():
    scenario = get_scenario("lazy_searcher_v1")
    torch.manual_seed(0)
    policy = MenuPolicy(MENU_SIZE, hidden=16)
    venv = OptionVectorEnv(lambda: scenario.make_env("train"), num_envs=3)
    fresh = scenario.make_env("train")
    for episode in play_batch(venv, policy, [0, 1, 2]):
        actions = iter([d.action for d in episode.decisions])
        reference = play(fresh, policy, {"question_index": episode.question_index}, lambda d, dist: next(actions))
        assert len(reference.decisions) == len(episode.decisions)
        for ours, theirs in zip(episode.decisions, reference.decisions):
            assert ours.state.shape == fresh.state_space.shape
            np.testing.assert_array_equal(ours.state, theirs.state)


def test_a_slot_that_moves_to_another_question_resets_its_text_environment():
    scenario = get_scenario("synthwiki_v1")
    venv = OptionVectorEnv(lambda: scenario.make_env("train"), num_envs=1)
    policy = MenuPolicy(MENU_SIZE, hidden=16)
    first, second = play_batch(venv, policy, [5, 9])
    assert first.record.question_id == venv.questions[5].id
    assert second.record.question_id == venv.questions[9].id


def test_closed_book_is_deterministic_and_recalls_each_band_at_its_rate():
    corpus = load_default_world().corpus
    book = ClosedBook(corpus, ClosedBookConfig(), world_seed=0)
    again = ClosedBook(corpus, ClosedBookConfig(), world_seed=0)
    facts = sorted(book.knowledge.values.items())
    recalled = [book.recall(subject, predicate) for (subject, predicate), _ in facts]
    assert recalled == [again.recall(subject, predicate) for (subject, predicate), _ in facts]
    by_band: dict[str, list[bool]] = {}
    for value, ((subject, _), truth) in zip(recalled, facts):
        by_band.setdefault(book.band(subject), []).append(value == truth)
    rates = {band: sum(right) / len(right) for band, right in by_band.items()}
    assert abs(rates["popular"] - 0.9) < 0.03 and abs(rates["middle"] - 0.6) < 0.04
    assert rates["long_tail"] < 0.01  # only where the wrong values run out
    nothing_known = ClosedBook(corpus, ClosedBookConfig(popular=0.0, middle=0.0), world_seed=0)
    assert all(nothing_known.recall(s, p) != v for (s, p), v in facts[:200])
    with pytest.raises(ConfigError, match="popular"):
        ClosedBookConfig(popular=1.5)


def test_closed_book_bands_are_the_popularity_definitions_bands_of_the_world_graph():
    from maopd.envs.synthwiki.popularity import band, entity_ranks
    from maopd.envs.synthwiki.world import world_graph

    entities = world_graph(0, "small")
    ranks = entity_ranks(0, entities)
    book = ClosedBook(load_default_world().corpus, ClosedBookConfig(), world_seed=0)
    assert all(book.band(e.name) == band(ranks[e.id], len(entities)) for e in entities)
    assert all(book.band(e.alias) == book.band(e.name) for e in entities if e.alias)
    # the lazy-Searcher scenario's "report from memory" reads this same book
    lazy = get_scenario("lazy_searcher_v1").make_env("train").closed_book
    assert lazy.ranks == book.ranks and lazy.config == ClosedBookConfig()


def test_the_lazy_scenario_offers_a_report_from_memory_that_skips_search():
    env = get_scenario("lazy_searcher_v1").make_env("train")

    def memory_or_hint(decision, dist):
        menu = env.menu(decision.agent)
        if decision.role == "searcher":
            memory = [i for i, option in enumerate(menu) if option.label.startswith("from memory")]
            assert memory and menu[memory[0]].kind == "report"
            return memory[0]
        return next(i for i, option in enumerate(menu) if option.hint)

    episode = play(env, MenuPolicy(MENU_SIZE, hidden=16), {"question_index": 0}, memory_or_hint)
    assert any(d.role == "searcher" for d in episode.decisions)
    assert episode.record.counters.search_actions == 0
    assert get_scenario("synthwiki_v1").card()["closed_book"] is None
