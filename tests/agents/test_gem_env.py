"""GEM's ``MultiAgentEnv`` over the team environments: made through GEM's registry, an episode
played through GEM's ``step`` (which checks the actions against the active agents) gives the
PettingZoo environment's episode, record and rewards. GEM 0.1.0 ships no environment checker, so
its interface contract is checked here as its ``MultiAgentEnv`` defines it."""

from __future__ import annotations

import pytest

from tests.integration_support import require

gem = require("gem")

from maopd.agents.expert_team import expert_team  # noqa: E402
from maopd.agents.integrations.gem_env import GEM_IDS, SearchMultiAgentEnv, register_gem_envs  # noqa: E402
from maopd.envs.workflows import env_module  # noqa: E402

WORKFLOW_IDS = {workflow: env_id for env_id, workflow in GEM_IDS.items()}


def play(env: SearchMultiAgentEnv, options: dict) -> tuple[dict, int]:
    """One episode with the expert team through GEM's interface; the last step's rewards and the steps."""
    team = expert_team()
    observations, infos = env.reset(seed=7, options=options)
    assert set(observations) == set(infos) == set(env.possible_agents) == set(env.agents)
    assert all(isinstance(text, str) for text in observations.values())
    steps = 0
    while env.agents:
        active = env.agent_selector.get_active_agents()
        assert active and active == env.env.acting_agents()
        states = env.get_active_states()
        assert set(states) == set(active)
        for agent, (observation, reward, terminated, truncated, info) in states.items():
            assert info["acting"] and not terminated and not truncated and reward == 0.0
            assert info["messages"] == [dict(m) for m in env.turn(agent).messages]
            assert observation == env.observe(agent)
        outputs = team.act([env.turn(agent) for agent in active])
        observations, rewards, terminations, truncations, infos = env.step(
            {agent: output.text for agent, output in zip(active, outputs)}
        )
        steps += 1
        assert set(observations) == set(rewards) == set(terminations) == set(infos)
        assert not any(truncations.values())
    assert all(terminations.values()) and env.agents == []
    return rewards, steps


@pytest.mark.parametrize("workflow", ["hierarchical", "cascade"])
def test_an_episode_through_gem_is_the_pettingzoo_episode(workflow):
    register_gem_envs()
    register_gem_envs()  # idempotent
    env = gem.make(WORKFLOW_IDS[workflow], split="test")
    assert isinstance(env, gem.multiagent.MultiAgentEnv) and env.env_id == WORKFLOW_IDS[workflow]
    rewards, steps = play(env, {"question_index": 4})
    reference, team = env_module(workflow).raw_env(split="test"), expert_team()
    reference.reset(seed=7, options={"question_index": 4})
    while acting := reference.acting_agents():  # maopd.envs.episode.run_episode, short of PettingZoo's last steps
        for output in team.act([reference.turn(agent) for agent in acting]):
            reference.step(output)
    record = reference.record
    assert rewards == pytest.approx(reference.rewards) and set(rewards) == set(reference.possible_agents)
    assert steps == record.counters.env_steps == env.record.counters.env_steps
    assert env.record.candidates == record.candidates and env.record.rewards == record.rewards


def test_gems_step_refuses_missing_and_unscheduled_actions():
    env = SearchMultiAgentEnv("hierarchical", split="test")
    env.reset(options={"question_index": 0})
    assert env.agent_selector.get_active_agents() == ["leader"]
    with pytest.raises(ValueError, match="Missing action for active agent leader"):
        env.step({})
    with pytest.raises(ValueError, match="searcher_0 provided action but is not active"):
        env.step({"leader": "<select>all</select>", "searcher_0": "<search>x</search>"})
    observations, rewards, *_ = env.step({"leader": "<delegate>\nWhere was Koduth Bloom formed?\n</delegate>"})
    assert env.agent_selector.get_active_agents() == ["searcher_0"]
    assert observations["searcher_0"].startswith("You are a Searcher") and observations["leader"] == ""
    assert set(rewards.values()) == {0.0}


def test_observations_are_what_the_agent_reads_since_its_last_output():
    env = SearchMultiAgentEnv("cascade", split="test")
    observations, infos = env.reset(options={"question_index": 0})
    assert observations["searcher_0"] == "\n\n".join(m["content"] for m in infos["searcher_0"]["messages"])
    observations, *_ = env.step({"searcher_0": "<search>Koduth Bloom</search>"})
    assert observations["searcher_0"].startswith("<information>")
    assert env.state()["env_step"] == 1
