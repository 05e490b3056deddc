"""The fast option mode (envs/option/fast.py) is a second implementation of the workflows: sampled
episodes replayed through the text environment give the same agents, observations, masks, global
states and records (wall-clock duration excepted) at every decision."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from maopd.envs.option.fast import FastEpisode, FastVectorEnv, World
from maopd.envs.option.menus import MENU_SIZE, Option, expert_choice
from maopd.envs.option.scenarios import SCENARIOS, get_scenario
from maopd.envs.option.wrapper import OptionWrapper
from maopd.envs.records import WorkflowRecord
from maopd.training.marl.policy import play_batch
from maopd.training.marl.trainer import MarlConfig, train, vector_env

Chooser = Callable[[list[Option], np.ndarray], Any]  # (menu, action mask) -> action
Step = tuple[str, np.ndarray, np.ndarray, np.ndarray, Any]  # (agent, observation, mask, state, action)


def random_with_failures(rng: random.Random) -> Chooser:
    """Uniform over the menu, and about one choice in ten a masked slot, an out-of-range index or
    not an index at all: the text environment records each as a format failure."""
    invalid = [-1, MENU_SIZE, MENU_SIZE + 5, None, "1", 1.0, True, np.int64(MENU_SIZE)]

    def choose(menu: list[Option], mask: np.ndarray) -> Any:
        draw = rng.random()
        if draw < 0.05 and len(menu) < MENU_SIZE:
            return rng.randrange(len(menu), MENU_SIZE)
        if draw < 0.1:
            return rng.choice(invalid)
        return rng.randrange(len(menu))

    return choose


def expert_with_noise(rng: random.Random) -> Chooser:
    """The SynthWiki expert's option four times in five, else a uniform one: long, searching workflows."""

    def choose(menu: list[Option], mask: np.ndarray) -> Any:
        return expert_choice(menu) if rng.random() < 0.8 else rng.randrange(len(menu))

    return choose


def played_fast(world: World, question: int, choose: Chooser) -> tuple[dict, list[Step]]:
    episode, steps = FastEpisode(world), []
    episode.reset(question)
    while not (node := episode.node()).done:
        action = choose(episode.menu(), node.mask)
        steps.append((node.agent, node.observation, node.mask, node.state, action))
        episode.step(action)
    return node.record, steps


def replayed(env: OptionWrapper, question: int, actions: list[Any]) -> tuple[dict, list[Step]]:
    """The text environment's record and decisions for ``actions`` played in order."""
    env.reset(options={"question_index": question})
    remaining, steps = iter(actions), []
    while env.agents:
        agent = env.agent_selection
        if env.terminations[agent]:
            env.step(None)
            continue
        observation, state, action = env.observe(agent), env.state(), next(remaining)
        steps.append((agent, observation["observations"], observation["action_mask"], state, action))
        env.step(action)
    assert next(remaining, None) is None, "the text environment ended the episode earlier"
    return env.unwrapped.record, steps


def assert_same(
    fast_steps: list[Step], text_steps: list[Step], fast_record: WorkflowRecord, text_record: WorkflowRecord
) -> None:
    assert [step[0] for step in fast_steps] == [step[0] for step in text_steps]
    for fast, text in zip(fast_steps, text_steps):
        for fast_array, text_array in zip(fast[1:4], text[1:4]):
            assert fast_array.dtype == text_array.dtype and np.array_equal(fast_array, text_array)
    fast_json, text_json = fast_record.to_json(), text_record.to_json()
    assert fast_json.keys() == text_json.keys()
    for field, value in fast_json.items():
        if field != "duration_s":
            assert value == text_json[field], f"record field {field!r} differs"


# (scenario, make_env overrides, episodes per chooser). The scenarios force an answer at budget
# exhaustion, so workflows that end without one are covered by the same scenarios without it.
SETTINGS = {
    **{name: (name, {}, 200) for name in sorted(SCENARIOS)},
    "lazy_searcher_v1, no forced finish": ("lazy_searcher_v1", {"force_finish": False}, 100),
    "synthwiki_v1's cascade (the OPD Teacher's)": ("synthwiki_v1", {"workflow": "cascade"}, 100),
    "lazy_searcher_v1's cascade, no forced finish": (
        "lazy_searcher_v1",
        {"workflow": "cascade", "force_finish": False},
        60,
    ),
}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_fast_episodes_replay_identically_through_the_text_environment(setting):
    name, overrides, episodes = SETTINGS[setting]
    text = get_scenario(name).make_env("train", **overrides)
    world = World(text)
    rng = random.Random(0)
    questions = [rng.randrange(len(world.questions)) for _ in range(episodes)]
    records = []
    for chooser in (random_with_failures(random.Random(1)), expert_with_noise(random.Random(2))):
        for question in questions:
            record, steps = played_fast(world, question, chooser)
            text_record, text_steps = replayed(text, question, [step[4] for step in steps])
            assert_same(steps, text_steps, record, text_record)
            records.append(record)
    counters = [record.counters for record in records]
    assert any(c.format_failures for c in counters)
    assert any(record.rewards.em == 1.0 for record in records)
    if world.config.force_finish:
        assert any(c.forced_reports for c in counters)  # the budget ran out on a Searcher
    else:
        assert any(c.no_answer for c in counters) and any(c.unreported_calls for c in counters)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_trained_policys_fast_episodes_replay_identically(name):
    """A briefly trained ``MenuPolicy`` sampling through the fast vector env (the trainer's path)."""
    config = MarlConfig(scenario=name, iterations=3, episodes_per_iteration=32, eval_questions=8, num_envs=32)
    policy, _ = train(config, progress=False)
    venv = vector_env(config, "train")
    assert isinstance(venv, FastVectorEnv)
    questions = [random.Random(3).randrange(len(venv.questions)) for _ in range(100)]
    text = get_scenario(name).make_env("train")
    for episode in play_batch(venv, policy, questions):
        record, steps = replayed(text, episode.question_index, [d.action for d in episode.decisions])
        fast_steps = [(d.agent, d.observation, d.mask, d.state, d.action) for d in episode.decisions]
        assert_same(fast_steps, steps, episode.record, record)


def test_the_trainer_refuses_an_unknown_transitions_implementation():
    with pytest.raises(ValueError, match=r"transitions: must be one of \['fast', 'text'\], got 'arrays'"):
        train(MarlConfig(transitions="arrays"), progress=False)


def test_the_world_tables_stay_bounded_and_episodes_stay_exact_after_they_are_dropped(monkeypatch):
    monkeypatch.setattr("maopd.envs.option.fast.MAX_HISTORY_NODES", 50)
    text = get_scenario("synthwiki_v1").make_env("train")
    world, chooser = World(text), random_with_failures(random.Random(4))
    for question in range(30):
        record, steps = played_fast(world, question, chooser)
        text_record, text_steps = replayed(text, question, [step[4] for step in steps])
        assert_same(steps, text_steps, record, text_record)
        assert world.nodes <= 50 + 40  # dropped at the next root past the bound; an episode adds fewer
