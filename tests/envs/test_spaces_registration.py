"""Text action spaces hold every legal action and sample well-formed ones; the single-role
environments are registered with Gymnasium."""

import subprocess
import sys

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from maopd.agents.registration import GYMNASIUM_IDS, register_envs
from maopd.envs import cascade_search_v1, hierarchical_search_v1, single_search_v1
from maopd.envs.actions import ROLE_ACTION_KINDS, parse_action

MODULES = [cascade_search_v1, hierarchical_search_v1, single_search_v1]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_legal_action_is_in_the_action_space(module):
    env = module.env()
    legal = {
        "searcher": ["<search>Zoroth River</search>", "<report>Ä is in Zürich, 1923.</report>"],
        "leader": ["<delegate>1. Who founded Zoroth?\n2. Where is it?</delegate>", "<select>1, 2</select>"],
        "answerer": ["<answer>Marie Curie-Skłodowska</answer>"],
        "solver": ["<search>Zoroth River</search>", "<answer>Marie Curie-Skłodowska</answer>"],
    }
    for agent in env.possible_agents:
        for action in legal[env.role_of(agent)]:
            assert env.action_space(agent).contains(action), (agent, action)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_sampled_actions_are_well_formed_and_seeded(module):
    env = module.env()
    for agent in env.possible_agents:
        role = env.role_of(agent)
        space = env.action_space(agent)
        space.seed(7)
        draws = [space.sample() for _ in range(30)]
        assert all(space.contains(a) for a in draws)
        kinds = {parse_action(a, role).kind for a in draws}
        assert kinds == set(ROLE_ACTION_KINDS[role]), (agent, draws[:3])
        space.seed(7)
        assert [space.sample() for _ in range(30)] == draws


def test_random_agents_play_whole_episodes():
    env = hierarchical_search_v1.env()
    searches = 0
    for seed in range(10):
        env.reset(seed=seed)
        for index, agent in enumerate(env.possible_agents):  # seeded: the test does not depend on luck
            env.action_space(agent).seed(100 * seed + index)
        for agent in env.agent_iter():
            _, _, terminated, truncated, _ = env.last()
            action = None if terminated or truncated else env.action_space(agent).sample()
            searches += bool(action and action.startswith("<search>"))
            env.step(action)
    assert searches > 0


@pytest.mark.parametrize("env_id", sorted(GYMNASIUM_IDS))
def test_single_role_environments_are_registered(env_id):
    register_envs()
    env = gymnasium.make(env_id, split="test")
    assert env.spec is not None and env.spec.id == env_id
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.slow
def test_registration_is_an_explicit_call_not_an_import_side_effect():
    """A fresh interpreter that imports every package of the library has registered nothing;
    ``register_envs()`` registers every id, and a second call changes nothing."""
    code = (
        "import gymnasium, maopd.agents, maopd.agents.expert_team, maopd.envs.option.single_role, maopd.training; "
        "print(sum(i.startswith('maopd/') for i in gymnasium.registry))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "0"
    assert register_envs() == list(GYMNASIUM_IDS) == register_envs()
    env = gymnasium.make("maopd/CascadeAnswerer-v1", split="test")
    assert env.unwrapped.role == "answerer"
