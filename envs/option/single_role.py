"""One role of an option-mode search environment as a ``gymnasium.Env``.

The learner plays every agent of one role (``"leader"``, ``"searcher"`` — all Searcher slots, one
decision per step — or ``"answerer"``) through the option menu of ``maopd.envs.option.menus``; the other
roles are played by a text ``Policy`` (``others``: an ``HFPolicy``, a vLLM policy or a ``RoleRouter``;
``maopd.agents.expert_team.single_role_env`` and the registered Gymnasium ids give them the SynthWiki
expert team). For single-agent RL libraries, and for
debugging one role in isolation.

Reward: 0 until the workflow ends, then the role's reward from the environment (Leader R_L,
Answerer mean R_A, Searchers the mean over their assignments of R_S). ``info`` at the end holds
``reward_parts`` and ``em``. An episode in which the role never acts (a Leader that answers
without delegating leaves the Searchers nothing to do) is skipped: ``reset`` draws the next
question from its generator, so it stays seed-deterministic.

``render_mode="ansi"``: ``render()`` returns the episode's transcript so far, every role's actions
as the text they stand for (the text environment's ``ansi`` rendering).
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np

from maopd.envs.option.menus import MENU_SIZE
from maopd.envs.option.wrapper import OptionWrapper, option_env
from maopd.envs.policy import Policy, checked_outputs
from maopd.envs.records import RewardParts
from maopd.envs.roles import TEAM_ROLES

MAX_SKIPPED_EPISODES = 100


class SingleRoleEnv(gymnasium.Env):
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    def __init__(
        self,
        role: str = "searcher",
        workflow: str = "hierarchical",
        *,
        others: Policy,
        menu_size: int = MENU_SIZE,
        render_mode: str | None = None,
        **env_options: Any,
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r} is invalid; expected one of {self.metadata['render_modes']}")
        if role not in TEAM_ROLES:
            raise ValueError(f"role={role!r} is invalid; expected 'leader', 'searcher' or 'answerer'")
        if role == "leader" and workflow != "hierarchical":
            raise ValueError(f"role='leader' needs workflow='hierarchical', not {workflow!r}")
        self.role = role
        self.others = others
        self.render_mode = render_mode
        self.options: OptionWrapper = option_env(workflow, menu_size, render_mode=render_mode, **env_options)
        self.observation_space = self.options.observation_space(self.role)
        self.action_space = self.options.action_space(self.role)

    @property
    def raw(self):
        return self.options.unwrapped

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        for _ in range(MAX_SKIPPED_EPISODES):
            self.options.reset(seed=int(self.np_random.integers(2**31)), options=options)
            if self._advance():
                return self.options.observe(self.options.agent_selection), {"agent": self.options.agent_selection}
            if options:  # a given question where the role never acts: nothing else to draw
                break
        raise RuntimeError(f"the {self.role} role did not act in {MAX_SKIPPED_EPISODES} episodes")

    def step(self, action: Any):
        self.options.step(action)
        if self._advance():
            agent = self.options.agent_selection
            return self.options.observe(agent), 0.0, False, False, {"agent": agent}
        parts = self.raw.record.rewards
        info = {"reward_parts": parts, "em": parts.em}
        return self._final_observation(), self._role_reward(parts), True, False, info

    def render(self) -> str | None:
        """The transcript so far (``render_mode="ansi"``); without a render mode, a warning and None."""
        return self.raw.render()

    def _advance(self) -> bool:
        """Let the other roles act until the learner's role is selected (True) or the episode ends."""
        raw = self.raw
        while acting := raw.acting_agents():
            if raw.role_of(acting[0]) == self.role:
                return True
            turns = [raw.turn(agent) for agent in acting]
            for output in checked_outputs(type(self.others).__name__, turns, self.others.act(turns)):
                raw.step(output)
        return False

    def _final_observation(self) -> dict[str, np.ndarray]:
        space = self.observation_space
        return {key: np.zeros(sub.shape, sub.dtype) for key, sub in space.spaces.items()}

    def _role_reward(self, parts: RewardParts) -> float:
        if self.role == "leader":
            return float(parts.leader)
        values = parts.answerer if self.role == "answerer" else parts.searcher_calls
        return float(np.mean(values)) if values else 0.0
