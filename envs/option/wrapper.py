"""Option-level action mode: each role chooses from a finite, masked menu instead of writing text.

Classic MARL libraries (RLlib, small-policy credit-assignment experiments) cannot emit free text.
``OptionWrapper`` turns either search environment into one with a ``Discrete(MENU_SIZE)`` action
and a fixed-size numeric observation::

    {"observations": Box(OBSERVATION_SIZE), "action_mask": Box(MENU_SIZE, int8)}

(the form RLlib's action-masking modules expect). The menus and their item features are
``envs.option.menus``'s; the observation adds global features of the acting agent's situation.

**One code path, two action interfaces**: a chosen index is rendered to the exact text action and
passed to the *same* ``env.step``; budgets, rewards and the workflow record are therefore those of
text mode by construction. A masked or out-of-range index, or anything not an integer, is
rendered as the empty output, which the environment records as a format failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo.utils import BaseWrapper

from envs.actions import ACTION_KINDS, TEAM_ROLES
from envs.option.menus import HINT_FEATURE, ITEM_FEATURES, MENU_SIZE, Option, build_menu
from envs.parallel import SearchParallelEnv
from envs.search_env import SearchEnv
from envs.synthwiki.closed_book import ClosedBook
from envs.workflows import TEAM_WORKFLOWS, env_module

GLOBAL_FEATURES = len(TEAM_ROLES) + 5 + len(ACTION_KINDS)
OBSERVATION_SIZE = GLOBAL_FEATURES + MENU_SIZE * ITEM_FEATURES


class OptionWrapper(BaseWrapper):
    """An AEC search environment with ``Discrete`` option actions; see the module docstring."""

    def __init__(
        self, env: SearchEnv, menu_size: int = MENU_SIZE, hints: bool = True, closed_book: ClosedBook | None = None
    ):
        super().__init__(env)
        self.hints = hints
        self.closed_book = closed_book
        if menu_size < 2:
            raise ValueError(f"menu_size={menu_size!r} is invalid: must be at least 2")
        self.menu_size = menu_size
        size = GLOBAL_FEATURES + menu_size * ITEM_FEATURES
        self._option_observation_space = spaces.Dict(
            {
                "observations": spaces.Box(0.0, 1.0, (size,), np.float32),
                # int8, so that ``action_space.sample(mask=...)`` takes it as it is.
                "action_mask": spaces.Box(0, 1, (menu_size,), np.int8),
            }
        )
        self._option_action_space = spaces.Discrete(menu_size)
        self._menus: dict[tuple[str, int], list[Option]] = {}

    def observation_space(self, agent: str) -> spaces.Space:
        return self._option_observation_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._option_action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._menus = {}
        super().reset(seed=seed, options=options)

    def menu(self, agent: str) -> list[Option]:
        """The options open to ``agent`` now; empty when it is not acting."""
        raw = self.env.unwrapped
        if agent not in raw.acting_agents():
            return []
        # A menu is observed, then rendered: build it once per (agent, environment step).
        key = (agent, raw.env_step)
        if key not in self._menus:
            self._menus[key] = build_menu(
                raw.turn(agent), raw.config.num_searchers, self.menu_size, raw.question.id, self.closed_book
            )
        return self._menus[key]

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        return option_observation(self.env.unwrapped, agent, self.menu(agent), self.menu_size, self.hints)

    def render_action(self, agent: str, action: Any) -> Any:
        """The text action that option ``action`` stands for ('' if it is not a valid choice)."""
        menu = self.menu(agent)
        valid = isinstance(action, (int, np.integer)) and not isinstance(action, bool) and 0 <= action < len(menu)
        text = menu[int(action)].text if valid else ""
        candidates = self.env.unwrapped.config.num_candidates if agent == "answerer" else 1
        return text if candidates == 1 else [text] * candidates

    def step(self, action: Any) -> None:
        raw = self.env.unwrapped  # read directly: each read through the wrappers costs two __getattr__ calls
        agent = raw.agent_selection
        if raw.terminations[agent] or raw.truncations[agent]:
            self.env.step(None)
            return
        self.env.step(self.render_action(agent, action))


def play_options(
    env: OptionWrapper, act: Callable[[str, dict[str, np.ndarray]], int], options: dict | None = None
) -> dict[str, Any]:
    """One episode of ``env`` reset with ``options``, ``act(agent, observation)`` choosing every action
    of an agent still in play; the episode's workflow record."""
    env.reset(options=options)
    while env.agents:
        agent = env.agent_selection
        if env.terminations[agent]:
            env.step(None)
            continue
        env.step(act(agent, env.observe(agent)))
    return env.unwrapped.record


def option_observation(
    env: SearchEnv, agent: str, menu: Sequence[Option], menu_size: int, hints: bool = True
) -> dict[str, np.ndarray]:
    """Fixed-size features of ``agent``'s situation and menu, plus the action mask; ``hints=False``
    zeroes the expert-hint feature (the harder setting for learning)."""
    role = env.role_of(agent)
    call = env.active.get(agent)
    allowed = env.allowed_actions(agent)
    rounds = getattr(env, "rounds", 0)
    max_reports = env.config.num_searchers * env.config.max_rounds
    global_features = [
        *(float(role == r) for r in TEAM_ROLES),
        env.env_step / env.max_steps,
        rounds / env.config.max_rounds,
        min(len(env.reports), max_reports) / max_reports,
        min(call.search_steps if call else 0, env.max_steps) / env.max_steps,
        len(menu) / menu_size,
        *(float(kind in allowed) for kind in ACTION_KINDS),
    ]
    # One flat list turned into an array at once: filling a numpy array slot by slot cost more.
    items = [value for option in menu for value in option.features()]
    items += [0.0] * (menu_size * ITEM_FEATURES - len(items))
    if not hints:
        items[HINT_FEATURE::ITEM_FEATURES] = [0.0] * menu_size
    mask = np.zeros(menu_size, np.int8)
    mask[: len(menu)] = 1.0
    features = np.array(global_features + items, np.float32)
    # np.clip's Python wrapper costs more than these two ufuncs, which give the same values
    np.maximum(features, 0.0, out=features)
    np.minimum(features, 1.0, out=features)
    return {"observations": features, "action_mask": mask}


class OptionParallelEnv(SearchParallelEnv):
    """The parallel API over ``OptionWrapper``: one ``step`` is one environment step."""

    def __init__(self, aec_env: SearchEnv, menu_size: int = MENU_SIZE, hints: bool = True):
        super().__init__(OptionWrapper(aec_env, menu_size, hints))

    @property
    def unwrapped(self) -> SearchEnv:
        return self.aec_env.unwrapped

    def acting_agents(self) -> list[str]:
        return self.aec_env.unwrapped.acting_agents()


def option_env(
    workflow: str = "hierarchical",
    menu_size: int = MENU_SIZE,
    hints: bool = True,
    closed_book: ClosedBook | None = None,
    **kwargs: Any,
) -> OptionWrapper:
    """An option-mode AEC environment; ``workflow`` is ``"cascade"`` or ``"hierarchical"``."""
    return OptionWrapper(_raw_env(workflow, **kwargs), menu_size, hints, closed_book)


def option_parallel_env(
    workflow: str = "hierarchical", menu_size: int = MENU_SIZE, hints: bool = True, **kwargs: Any
) -> OptionParallelEnv:
    """An option-mode parallel environment; ``workflow`` is ``"cascade"`` or ``"hierarchical"``."""
    return OptionParallelEnv(_raw_env(workflow, **kwargs), menu_size, hints)


def _raw_env(workflow: str, **kwargs: Any) -> SearchEnv:
    # the option mode's menus and features are the team roles'; the single agent has none
    if workflow not in TEAM_WORKFLOWS:
        raise ValueError(f"workflow={workflow!r} is invalid; expected one of {sorted(TEAM_WORKFLOWS)}")
    return env_module(workflow).env(**kwargs)
