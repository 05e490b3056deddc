"""The option mode's flat observations: a Box with the mask in ``infos``, so that SuperSuit's
observation wrappers (which need Box observations) apply, on both APIs."""

from __future__ import annotations

import numpy as np
import pytest
import supersuit
from gymnasium import spaces
from pettingzoo.test import api_test, parallel_api_test

from maopd.envs.option.menus import MENU_SIZE
from maopd.envs.option.wrapper import OBSERVATION_SIZE, option_env, option_parallel_env


@pytest.mark.parametrize("workflow", ["hierarchical", "cascade"])
def test_flat_observations_pass_pettingzoos_api_tests(workflow):
    env = option_env(workflow, split="test", flat_observation=True)
    assert env.observation_space(env.possible_agents[0]) == spaces.Box(0.0, 1.0, (OBSERVATION_SIZE,), np.float32)
    api_test(env, num_cycles=100)
    parallel_api_test(option_parallel_env(workflow, split="test", flat_observation=True), num_cycles=100)


def test_the_mask_in_infos_is_the_dict_observations_mask():
    flat = option_env("hierarchical", split="test", flat_observation=True)
    nested = option_env("hierarchical", split="test")
    for env in (flat, nested):
        env.reset(seed=3)
    while flat.agents:
        agent = flat.agent_selection
        assert agent == nested.agent_selection
        observation = nested.observe(agent)
        np.testing.assert_array_equal(flat.observe(agent), observation["observations"])
        np.testing.assert_array_equal(flat.infos[agent]["action_mask"], observation["action_mask"])
        assert "action_mask" not in nested.infos[agent]
        waiting = [other for other in flat.agents if other not in flat.unwrapped.acting_agents()]
        assert all(not flat.infos[other]["action_mask"].any() for other in waiting)
        done = flat.terminations[agent] or flat.truncations[agent]
        action = None if done else int(np.flatnonzero(observation["action_mask"])[0])
        for env in (flat, nested):
            env.step(action)
    assert flat.unwrapped.record.rewards == nested.unwrapped.record.rewards


WRAPPERS = {
    "dtype_v0": (lambda env: supersuit.dtype_v0(env, np.float64), (OBSERVATION_SIZE,), np.float64),
    "pad_observations_v0": (supersuit.pad_observations_v0, (OBSERVATION_SIZE,), np.float32),
    "frame_stack_v1": (lambda env: supersuit.frame_stack_v1(env, 4), (4 * OBSERVATION_SIZE,), np.float32),
    "normalize_obs_v0": (lambda env: supersuit.normalize_obs_v0(env, 0, 1), (OBSERVATION_SIZE,), np.float32),
}


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_supersuits_observation_wrappers_apply(name):
    wrap, shape, dtype = WRAPPERS[name]
    env = wrap(option_env("hierarchical", split="test", flat_observation=True))
    env.reset(seed=0)
    for agent in env.agent_iter():
        observation, _, terminated, truncated, info = env.last()
        assert observation.shape == shape and observation.dtype == dtype
        assert env.observation_space(agent).contains(observation)
        assert info["action_mask"].shape == (MENU_SIZE,)
        env.step(None if terminated or truncated else env.action_space(agent).sample(info["action_mask"]))
    assert env.unwrapped.record.counters.format_failures == 0  # the mask held only open options
    parallel = wrap(option_parallel_env("cascade", split="test", flat_observation=True))
    observations, infos = parallel.reset(seed=0)
    assert all(o.shape == shape for o in observations.values()) and "action_mask" in infos["searcher_0"]
