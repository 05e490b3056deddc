"""The Gymnasium single-role wrapper: one role learns, the others are played by a text policy."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from maopd.agents.expert_team import single_role_env
from maopd.envs.option.menus import expert_choice


@pytest.mark.parametrize(
    ("role", "workflow"), [("leader", "hierarchical"), ("searcher", "hierarchical"), ("answerer", "cascade")]
)
def test_passes_gymnasium_env_checker(role, workflow):
    check_env(single_role_env(role, workflow, split="test"), skip_render_check=True)


@pytest.mark.parametrize("role", ["leader", "searcher", "answerer"])
def test_expert_choices_for_the_role_with_expert_others_score_full_reward(role):
    env = single_role_env(role, "hierarchical", split="test")
    for seed in range(5):
        _, info = env.reset(seed=seed)
        done = False
        while not done:
            assert env.raw.role_of(info["agent"]) == role
            _, reward, done, _, info = env.step(expert_choice(env.options.menu(info["agent"])))
        assert info["em"] == 1.0 and reward > 0.9


def test_a_wrong_answer_scores_zero_and_the_others_still_play():
    env = single_role_env("answerer", "hierarchical", split="test")
    obs, info = env.reset(seed=1)
    menu = env.options.menu("answerer")
    wrong = next(i for i, option in enumerate(menu) if not option.hint)
    _, reward, done, _, info = env.step(wrong)
    assert done and reward == 0.0 and info["em"] == 0.0
    assert np.all(obs["action_mask"][: len(menu)] == 1)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="role="):
        single_role_env("critic")
    with pytest.raises(ValueError, match="workflow="):
        single_role_env("leader", "cascade")


def test_the_ansi_render_mode_returns_the_transcript():
    import gymnasium

    from maopd.agents.registration import register_envs

    env = single_role_env("searcher", "hierarchical", split="test", render_mode="ansi")
    check_env(env)  # its render check included
    register_envs()
    made = gymnasium.make("maopd/HierarchicalSearcher-v1", split="test", render_mode="ansi")
    _, info = made.reset(seed=0)
    before = made.render()
    assert before.startswith("Question: ") and "leader: <delegate>" in before
    menu = made.unwrapped.options.menu(info["agent"])
    made.step(0)
    after = made.render()
    assert after.startswith(before) and menu[0].text.split(">")[0] in after  # the learner's choice, as text
    assert made.metadata["render_modes"] == ["ansi"]
    with pytest.raises(ValueError, match="render_mode='human' is invalid"):
        single_role_env("searcher", render_mode="human")
