"""Run one episode of a search environment with a ``Policy``, batching each environment step."""

from __future__ import annotations

from maopd.envs.policy import Policy, checked_outputs
from maopd.envs.records import WorkflowRecord
from maopd.envs.search_env import SearchEnv


def run_episode(env: SearchEnv, policy: Policy, seed: int | None = None, options: dict | None = None) -> WorkflowRecord:
    """Play until the episode ends and return its workflow record.

    All agents scheduled in an environment step (e.g. the Searchers of a wave) are sent to the
    policy as one batch.
    """
    env.reset(seed=seed, options=options)
    while acting := env.acting_agents():
        turns = [env.turn(agent) for agent in acting]
        outputs = checked_outputs(type(policy).__name__, turns, policy.act(turns))
        for agent, output in zip(acting, outputs):
            assert env.agent_selection == agent, f"expected {agent} to act, env selected {env.agent_selection}"
            env.step(output)
    while env.agents:
        env.step(None)
    return env.record
