"""The lean option environments (envs/option/lean.py) play the text environment's option mode:
sampled episodes replayed through the text environment give the same observations, masks and
records (wall-clock duration excepted) at every decision."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from envs.option.lean import lean_option_env
from envs.option.menus import MENU_SIZE, expert_choice
from envs.option.scenarios import SCENARIOS, get_scenario
from envs.option.wrapper import OptionWrapper, play_options
from training.marl.policy import play_batch
from training.marl.trainer import MarlConfig, train, vector_env

Chooser = Callable[[OptionWrapper, str, dict[str, np.ndarray]], Any]
Step = tuple[str, np.ndarray, np.ndarray, Any]  # (agent, observation, mask, action)


def without_wall_clock(record: dict) -> dict:
    return {key: value for key, value in record.items() if key != "duration_s"}


def random_with_failures(rng: random.Random) -> Chooser:
    """Uniform over the menu, and about one choice in ten a masked slot, an out-of-range index or
    not an index at all: the text environment records each as a format failure."""
    invalid = [-1, MENU_SIZE, MENU_SIZE + 5, None, "1", 1.0, True]

    def choose(env: OptionWrapper, agent: str, observation: dict[str, np.ndarray]) -> Any:
        size = int(observation["action_mask"].sum())
        draw = rng.random()
        if draw < 0.05 and size < MENU_SIZE:
            return rng.randrange(size, MENU_SIZE)
        if draw < 0.1:
            return rng.choice(invalid)
        return rng.randrange(size)

    return choose


def expert_with_noise(rng: random.Random) -> Chooser:
    """The SynthWiki expert's option four times in five, else a uniform one: long, searching workflows."""

    def choose(env: OptionWrapper, agent: str, observation: dict[str, np.ndarray]) -> Any:
        if rng.random() < 0.8:
            return expert_choice(env.menu(agent))
        return rng.randrange(int(observation["action_mask"].sum()))

    return choose


def played(env: OptionWrapper, question: int, choose: Chooser) -> tuple[dict, list[Step]]:
    steps: list[Step] = []

    def act(agent: str, observation: dict[str, np.ndarray]) -> Any:
        action = choose(env, agent, observation)
        steps.append((agent, observation["observations"], observation["action_mask"], action))
        return action

    return play_options(env, act, {"question_index": question}), steps


def replayed(env: OptionWrapper, question: int, actions: list[Any]) -> tuple[dict, list[Step]]:
    remaining = iter(actions)
    record, steps = played(env, question, lambda env, agent, observation: next(remaining))
    assert next(remaining, None) is None, "the text environment ended the episode earlier"
    return record, steps


def assert_same(lean_steps: list[Step], text_steps: list[Step], lean_record: dict, text_record: dict) -> None:
    assert [step[0] for step in lean_steps] == [step[0] for step in text_steps]
    for (_, lean_obs, lean_mask, _), (_, text_obs, text_mask, _) in zip(lean_steps, text_steps):
        assert lean_obs.dtype == text_obs.dtype and np.array_equal(lean_obs, text_obs)
        assert lean_mask.dtype == text_mask.dtype and np.array_equal(lean_mask, text_mask)
    lean_fields, text_fields = without_wall_clock(lean_record), without_wall_clock(text_record)
    assert lean_fields.keys() == text_fields.keys()
    for field, value in lean_fields.items():
        assert value == text_fields[field], f"record field {field!r} differs"


def replay_all(text: OptionWrapper, lean: OptionWrapper, chooser: Chooser, questions: list[int]) -> list[dict]:
    records = []
    for question in questions:
        record, steps = played(lean, question, chooser)
        text_record, text_steps = replayed(text, question, [step[3] for step in steps])
        assert_same(steps, text_steps, record, text_record)
        records.append(record)
    return records


# (scenario, make_env overrides, episodes per chooser). The scenarios force an answer at budget
# exhaustion, so workflows that end without one are covered by the same scenarios without it.
SETTINGS = {
    **{name: (name, {}, 120) for name in sorted(SCENARIOS)},
    "lazy_searcher_v1, no forced finish": ("lazy_searcher_v1", {"force_finish": False}, 60),
    "synthwiki_v1's cascade (the OPD Teacher's)": ("synthwiki_v1", {"workflow": "cascade"}, 100),
    "lazy_searcher_v1's cascade, no forced finish": (
        "lazy_searcher_v1",
        {"workflow": "cascade", "force_finish": False},
        40,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_lean_episodes_replay_identically_through_the_text_environment(setting):
    name, overrides, episodes = SETTINGS[setting]
    text = get_scenario(name).make_env("train", **overrides)
    lean = lean_option_env(text)
    rng = random.Random(0)
    questions = [rng.randrange(len(text.unwrapped.questions)) for _ in range(episodes)]
    records = []
    for chooser in (random_with_failures(random.Random(1)), expert_with_noise(random.Random(2))):
        records += replay_all(text, lean, chooser, questions)
    counters = [record["counters"] for record in records]
    assert any(c["format_failures"] for c in counters)
    assert any(record["rewards"]["em"] == 1.0 for record in records)
    if text.unwrapped.config.force_finish:
        assert any(c["forced_reports"] for c in counters)  # the budget ran out on a Searcher
    else:
        assert any(c["no_answer"] for c in counters) and any(c["unreported_calls"] for c in counters)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_trained_policys_lean_episodes_replay_identically(name):
    """A briefly trained ``MenuPolicy`` sampling through the lean vector env (the trainer's path)."""
    config = MarlConfig(
        scenario=name, iterations=3, episodes_per_iteration=32, eval_questions=8, num_envs=32, transitions="lean"
    )
    policy, _ = train(config, progress=False)
    venv = vector_env(config, "train")
    questions = [random.Random(3).randrange(len(venv.questions)) for _ in range(100)]
    text = get_scenario(name).make_env("train")
    for episode in play_batch(venv, policy, questions):
        record, steps = replayed(text, episode.question_index, [d.action for d in episode.decisions])
        lean_steps = [(d.agent, d.observation, d.mask, d.action) for d in episode.decisions]
        assert_same(lean_steps, steps, episode.record, record)


def test_a_lean_episode_is_the_text_environments():
    text = get_scenario("lazy_searcher_v1").make_env("train")
    lean = lean_option_env(text)
    record, steps = played(lean, 7, random_with_failures(random.Random(0)))
    text_record, text_steps = replayed(text, 7, [step[3] for step in steps])
    assert_same(steps, text_steps, record, text_record)
    assert not lean.agents and lean.unwrapped.record is record


def test_the_trainer_refuses_an_unknown_transitions_implementation():
    with pytest.raises(ValueError, match="transitions='arrays' is invalid"):
        train(MarlConfig(transitions="arrays"), progress=False)
