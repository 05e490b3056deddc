"""A native ``ParallelEnv`` over a search AEC environment: one ``step`` is one environment step.

PettingZoo's generic ``aec_to_parallel`` expects every live agent to act in every cycle, but in
these workflows only the scheduled agents act (the Leader, or the Searchers of a wave, or the
Answerer). Here ``step(actions)`` feeds the scheduled agents their actions in order and ignores
the others; a scheduled agent missing from ``actions`` acts with an empty output (a recorded
format failure). All agents stay in ``agents`` until the episode ends.

Rewards follow PettingZoo's parallel convention: every live agent has an entry after every step,
the reward it received in that step. These workflows pay only at the end, so the entries are 0.0
until the last step, a waiting agent's included; ``infos[agent]["acting"]`` says whether an agent
acts in the coming step, so a waiting agent's 0.0 is never mistaken for an earned 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pettingzoo import ParallelEnv

from maopd.envs.policy import AgentTurn
from maopd.envs.search_env import SearchEnv


class SearchParallelEnv(ParallelEnv):
    def __init__(self, aec_env: SearchEnv):
        self.aec_env = aec_env
        self.metadata = aec_env.metadata
        self.render_mode = aec_env.render_mode
        self.possible_agents = list(aec_env.possible_agents)
        self.agents: list[str] = []
        self.state_space = aec_env.state_space

    def observation_space(self, agent: str):
        return self.aec_env.observation_space(agent)

    def action_space(self, agent: str):
        return self.aec_env.action_space(agent)

    @property
    def unwrapped(self) -> SearchEnv:
        return self.aec_env

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.aec_env.reset(seed=seed, options=options)
        self.agents = list(self.aec_env.agents)
        observations = {agent: self.aec_env.observe(agent) for agent in self.agents}
        return observations, {agent: dict(self.aec_env.infos[agent]) for agent in self.agents}

    def step(self, actions: dict[str, Any]):
        if not isinstance(actions, dict):
            raise TypeError(f"parallel_env.step() takes a dict of actions by agent, got {type(actions).__name__}")
        if not hasattr(self.aec_env, "record"):
            raise RuntimeError("parallel_env.step() before reset(): call reset() first")
        env = self.aec_env
        live = list(self.agents)
        for agent in env.acting_agents():
            env.step(actions.get(agent, ""))
        rewards = {agent: float(env.rewards.get(agent, 0.0)) for agent in live}
        terminations = {agent: bool(env.terminations.get(agent, False)) for agent in live}
        truncations = {agent: bool(env.truncations.get(agent, False)) for agent in live}
        infos = {agent: dict(env.infos.get(agent, {})) for agent in live}
        observations = {agent: env.observe(agent) for agent in live}
        if all(terminations.values()):
            while env.agents:
                env.step(None)
        self.agents = list(env.agents)
        return observations, rewards, terminations, truncations, infos

    def acting_agents(self) -> list[str]:
        """The agents whose actions the next ``step`` uses, in order (empty once done)."""
        return self.aec_env.acting_agents()

    def turn(self, agent: str) -> AgentTurn:
        """What a ``Policy`` needs to act for ``agent`` in the next step."""
        return self.aec_env.turn(agent)

    def state(self) -> dict[str, Any]:
        """The global state, a member of ``state_space`` (see ``SearchEnv.state``)."""
        return self.aec_env.state()

    def render(self):
        return self.aec_env.render()

    def close(self) -> None:
        self.aec_env.close()


def parallel_wrapper_fn(env_fn: Callable[..., SearchEnv]) -> Callable[..., SearchParallelEnv]:
    def parallel_env(**kwargs: Any) -> SearchParallelEnv:
        return SearchParallelEnv(env_fn(**kwargs))

    return parallel_env
