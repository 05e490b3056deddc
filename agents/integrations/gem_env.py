"""A GEM ``MultiAgentEnv`` of the team search environments (and the single agent's).

GEM (``gem-llm`` 0.1.0, Python < 3.12) is the environment library ROLL trains on. Its
``MultiAgentEnv`` follows PettingZoo's interface with text observations: ``reset(seed)`` returns
``({agent: observation}, {agent: info})``, ``step({agent: action})`` takes one text action from
each *active* agent (those of ``agent_selector.get_active_agents()``; an action from any other
agent is an error) and returns ``(observations, rewards, terminations, truncations, infos)``;
agents that terminate leave ``agents``. ``get_active_states()`` gives each active agent's
``(observation, cumulative reward, terminated, truncated, info)``.

``SearchMultiAgentEnv(workflow, **options)`` (or ``gem.make`` of one of ``GEM_IDS`` after
``register_gem_envs()``) wraps the PettingZoo environment of ``workflow``
(``maopd.envs.workflows``): one GEM step is one environment step, so the active agents are the
environment's ``acting_agents()`` (the Leader alone, a whole wave of Searchers, or the Answerer).
An agent's observation is the text its model reads next: its call's messages since its last
output (at the start of a call, the role prompt and the question or task), '' while nothing new
arrived; ``infos[agent]`` holds ``messages`` (exactly the chat its model reads), ``role``,
``call_id`` (a new Searcher assignment is a new call), ``allowed_actions`` and ``acting``.
Rewards are 0.0 until the last step, which gives every agent its role's reward (PettingZoo's) and
terminates them all; ``record`` is then the workflow record.

GEM 0.1.0's own ``MultiAgentEnv.reset`` fails for a seed (it calls a method it lacks), so the seed
goes to the wrapped environment. Importing ``gem`` configures the root logger
(``logging.basicConfig``); this module undoes that.
"""

from __future__ import annotations

import logging
from typing import Any

from maopd.agents.integrations.role_session import since_last_output
from maopd.envs.policy import AgentTurn
from maopd.envs.records import WorkflowRecord
from maopd.envs.search_env import SearchEnv
from maopd.envs.workflows import check_workflow, env_module


def _import_gem():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        from gem.multiagent import AgentSelector, MultiAgentEnv
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    return AgentSelector, MultiAgentEnv


try:
    AgentSelector, MultiAgentEnv = _import_gem()
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"maopd.agents.integrations.gem_env needs GEM ({exc}); install it with: pip install -e '.[gem]'   "
        "(Python < 3.12; or `bash scripts/setup.sh --dev`)",
        name="gem",
    ) from None


GEM_IDS = {
    "maopd/HierarchicalSearch-v1": "hierarchical",
    "maopd/CascadeSearch-v1": "cascade",
    "maopd/SingleSearch-v1": "single",
}


def register_gem_envs() -> None:
    """Register ``GEM_IDS`` in GEM's registry (idempotent): ``gem.make("maopd/CascadeSearch-v1", split="test")``."""
    from gem.envs.registration import ENV_REGISTRY, register

    for env_id, workflow in GEM_IDS.items():
        if env_id not in ENV_REGISTRY:
            register(env_id, "maopd.agents.integrations.gem_env:SearchMultiAgentEnv", workflow=workflow)


class ActingAgents(AgentSelector):
    """GEM's agent selector over the environment's own schedule: the active agents are the ones
    that act in the current environment step."""

    def __init__(self, env: SearchEnv):
        super().__init__([])
        self.env = env

    def get_active_agents(self) -> list[str]:
        return list(self.env.acting_agents())

    def next(self) -> None:
        """The environment schedules the next step itself."""


class SearchMultiAgentEnv(MultiAgentEnv):
    """A search workflow as a GEM multi-agent environment; keyword options are the environment's
    (``SearchEnvConfig``)."""

    def __init__(self, workflow: str = "hierarchical", **env_options: Any):
        super().__init__()
        self.workflow = check_workflow(workflow)
        self.env: SearchEnv = env_module(workflow).raw_env(**env_options)
        self.possible_agents = list(self.env.possible_agents)
        self.agent_selector = ActingAgents(self.env)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, str], dict[str, dict]]:
        """Start an episode; ``options`` as the environment's (``question``, ``question_index``)."""
        self.env.reset(seed=seed, options=options)
        super().reset()  # GEM's bookkeeping (agents, terminations, rewards); its seed handling fails
        self.infos = {agent: self._info(agent) for agent in self.agents}
        return {agent: self.observe(agent) for agent in self.agents}, {a: dict(i) for a, i in self.infos.items()}

    def turn(self, agent: str) -> AgentTurn:
        """What a ``Policy`` needs to act for ``agent`` now (``SearchEnv.turn``)."""
        return self.env.turn(agent)

    def observe(self, agent: str) -> str:
        messages = since_last_output(self.env.turn(agent).messages)
        return "\n\n".join(message["content"] for message in messages)

    def _info(self, agent: str) -> dict[str, Any]:
        turn = self.env.turn(agent)
        return {
            "role": turn.role,
            "call_id": turn.call_id,
            "acting": agent in self.env.acting_agents(),
            "allowed_actions": turn.allowed,
            "messages": [dict(message) for message in turn.messages],
        }

    def _process_actions(self, actions: dict[str, Any]):
        for agent in self.env.acting_agents():
            self.env.step(actions[agent])
        done = self.record is not None
        agents = list(self.agents)
        for agent in agents:
            self.rewards[agent] = float(self.env.rewards[agent]) if done else 0.0
            self.terminations[agent] = done
            self.infos[agent] = self._info(agent)
            if done:
                self.infos[agent]["reward_parts"] = self.record.rewards
        return (
            {agent: self.observe(agent) for agent in agents},
            {agent: self.rewards[agent] for agent in agents},
            {agent: self.terminations[agent] for agent in agents},
            {agent: self.truncations[agent] for agent in agents},
            {agent: dict(self.infos[agent]) for agent in agents},
        )

    @property
    def record(self) -> WorkflowRecord | None:
        """The workflow record (``maopd.envs.records``) once the episode has ended, else None."""
        return getattr(self.env, "record", None)

    def state(self) -> dict[str, Any]:
        """The environment's global state (``SearchEnv.state``), for centralised critics."""
        return self.env.state()
