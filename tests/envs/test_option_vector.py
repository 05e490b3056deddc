"""Vectorized option-mode episodes are the text environment's episodes, looked up instead of recomputed."""

from __future__ import annotations

import random

import pytest
import torch

from envs.option.menus import MENU_SIZE
from envs.option.scenarios import SCENARIOS, get_scenario
from envs.option.vector import OptionVectorEnv, TransitionCache
from envs.synthwiki import load_default_world
from envs.synthwiki.closed_book import ClosedBook, ClosedBookConfig
from maopd.base.config import ConfigError
from training.marl.policy import MenuPolicy, play, play_batch


def without_wall_clock(record):
    return {key: value for key, value in record.items() if key != "duration_s"}


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


def test_a_slot_that_moves_to_another_question_resets_its_text_environment():
    scenario = get_scenario("synthwiki_v1")
    venv = OptionVectorEnv(lambda: scenario.make_env("train"), num_envs=1)
    policy = MenuPolicy(MENU_SIZE, hidden=16)
    first, second = play_batch(venv, policy, [5, 9])
    assert first.record["question_id"] == venv.questions[5].id
    assert second.record["question_id"] == venv.questions[9].id


def test_closed_book_is_deterministic_and_recalls_at_the_configured_rates():
    corpus = load_default_world().corpus
    book = ClosedBook(corpus, ClosedBookConfig(known_fraction=0.7, recall_accuracy=0.9))
    again = ClosedBook(corpus, ClosedBookConfig(known_fraction=0.7, recall_accuracy=0.9))
    facts = sorted(book.knowledge.values.items())[:3000]
    recalled = [book.recall(subject, predicate) for (subject, predicate), _ in facts]
    assert recalled == [again.recall(subject, predicate) for (subject, predicate), _ in facts]
    right = sum(value == truth for value, (_, truth) in zip(recalled, facts)) / len(facts)
    assert abs(right - 0.63) < 0.04
    nothing_known = ClosedBook(corpus, ClosedBookConfig(known_fraction=0.0))
    assert all(nothing_known.recall(s, p) != v for (s, p), v in facts[:200])
    with pytest.raises(ConfigError, match="known_fraction"):
        ClosedBookConfig(known_fraction=1.5)


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
    assert episode.record["counters"]["search_actions"] == 0
    assert get_scenario("synthwiki_v1").card()["closed_book"] is None
