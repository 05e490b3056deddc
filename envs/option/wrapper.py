"""Option-level action mode: each role chooses from a finite, masked menu instead of writing text.

Classic MARL libraries (RLlib, small-policy credit-assignment experiments) cannot emit free text.
``OptionWrapper`` turns a search environment whose every role declares a menu (``Role.menu``;
``option_workflows()``) into one with a ``Discrete(MENU_SIZE)`` action
and a fixed-size numeric observation::

    {"observations": Box(OBSERVATION_SIZE), "action_mask": Box(MENU_SIZE, int8)}

(the form RLlib's action-masking modules expect). The menus and their item features are
``maopd.envs.option.menus``'s; the observation adds global features of the acting agent's situation.

**Flat observations** (``flat_observation=True``): the observation is the ``Box(OBSERVATION_SIZE)``
vector alone and the mask moves to ``infos[agent]["action_mask"]`` (the other place PettingZoo's
action-masking convention puts it), so that wrappers written for Box observations, SuperSuit's
``dtype_v0``, ``pad_observations_v0``, ``frame_stack_v1`` and the like, apply::

    env = supersuit.frame_stack_v1(option_env("hierarchical", flat_observation=True), 4)
    obs, reward, termination, truncation, info = env.last()
    action = env.action_space(agent).sample(info["action_mask"])

**Global state** (``state()``, a float32 vector in ``state_space = Box(0, 1, (state_size,))``, on the
AEC and the parallel environment, for centralised critics): the whole team's situation, which no
single agent observes. It starts from the text environments' numeric state
(``SearchEnv.state_counters``) and names its entries in ``state_names(env)``:

============================  ====================================================================
``step``                      environment steps taken / ``max_steps``
``rounds``                    delegation rounds / ``max_rounds`` (0 in the cascade)
``reports``                   reports gathered / R, R = Searcher slots × ``max_rounds``
``reports_with_facts``        reports that state a fact (neither "nothing found" nor forced) / R
``searches``                  searches run / (``max_steps`` × Searcher slots)
``evidence``                  share of the question's supporting passages retrieved so far
                              (SynthWiki metadata; 0 for a question without it). Which passages,
                              not what they say: the answer itself is never in the state
``selected``                  reports handed to the Answerer / R
``answering``                 1 once the Answerer's turn is set up
``format_failures``           format failures / ``max_steps`` (capped at 1)
``1-hop`` … ``comparison``    the question's kind (``maopd.envs.synthwiki.questions.KINDS``), one-hot
                              (SynthWiki metadata; all 0 without it)
``acting:<agent>``            1 for each agent still to act in the current step, by ``possible_agents``
``<searcher>:active``         per Searcher slot: it has a running assignment;
``<searcher>:search_steps``   searches of its current (else last) assignment / ``max_steps``;
``<searcher>:assignments``    assignments so far / ``max_rounds``;
``<searcher>:reported``       its last assignment ended with its own report (not a forced one);
``<searcher>:format_failed``  its last assignment had a format failure
============================  ====================================================================

Its size is fixed per environment: 13 + agents + 5 × Searcher slots (hierarchical with 3 Searchers:
33; cascade: 20).

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

from maopd.envs.actions import ACTION_KINDS
from maopd.envs.option.menus import HINT_FEATURE, ITEM_FEATURES, MENU_SIZE, Option, build_menu
from maopd.envs.parallel import SearchParallelEnv
from maopd.envs.prompts import NO_FACTS
from maopd.envs.records import WorkflowRecord
from maopd.envs.roles import TEAM_ROLES
from maopd.envs.search_env import SearchEnv
from maopd.envs.synthwiki.closed_book import ClosedBook
from maopd.envs.synthwiki.questions import KINDS, question_kind
from maopd.envs.team import role
from maopd.envs.workflows import env_module, option_workflows

GLOBAL_FEATURES = len(TEAM_ROLES) + 5 + len(ACTION_KINDS)
OBSERVATION_SIZE = GLOBAL_FEATURES + MENU_SIZE * ITEM_FEATURES
TEAM_STATE_FEATURES = (
    "step",
    "rounds",
    "reports",
    "reports_with_facts",
    "searches",
    "evidence",
    "selected",
    "answering",
    "format_failures",
    *KINDS,
)
SLOT_STATE_FEATURES = ("active", "search_steps", "assignments", "reported", "format_failed")


class OptionWrapper(BaseWrapper):
    """An AEC search environment with ``Discrete`` option actions; see the module docstring."""

    def __init__(
        self,
        env: SearchEnv,
        menu_size: int = MENU_SIZE,
        hints: bool = True,
        closed_book: ClosedBook | None = None,
        flat_observation: bool = False,
    ):
        super().__init__(env)
        self.hints = hints
        self.closed_book = closed_book
        self.flat_observation = flat_observation
        if menu_size < 2:
            raise ValueError(f"menu_size={menu_size!r} is invalid: must be at least 2")
        self.menu_size = menu_size
        size = GLOBAL_FEATURES + menu_size * ITEM_FEATURES
        features = spaces.Box(0.0, 1.0, (size,), np.float32)
        # int8, so that ``action_space.sample(mask=...)`` takes it as it is.
        mask = spaces.Box(0, 1, (menu_size,), np.int8)
        self._option_observation_space = (
            features if flat_observation else spaces.Dict({"observations": features, "action_mask": mask})
        )
        self._option_action_space = spaces.Discrete(menu_size)
        # replaces the text environment's dict state (reached through BaseWrapper's __getattr__)
        self.state_space = spaces.Box(0.0, 1.0, (len(state_names(env.unwrapped)),), np.float32)
        self._menus: dict[tuple[str, int], list[Option]] = {}
        self._masks: dict[str, np.ndarray] = {}

    def observation_space(self, agent: str) -> spaces.Space:
        return self._option_observation_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._option_action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._menus = {}
        self._masks = {}
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

    def observe(self, agent: str) -> dict[str, np.ndarray] | np.ndarray:
        observation = option_observation(self.env.unwrapped, agent, self.menu(agent), self.menu_size, self.hints)
        return observation["observations"] if self.flat_observation else observation

    @property
    def infos(self) -> dict[str, dict[str, Any]]:
        """The environment's infos; with flat observations each live agent's holds its
        ``action_mask`` too (all zeros while it waits)."""
        infos = self.env.infos
        if not self.flat_observation:
            return infos
        return {agent: {**info, "action_mask": self.action_mask(agent)} for agent, info in infos.items()}

    def action_mask(self, agent: str) -> np.ndarray:
        """1 for each option open to ``agent`` now, over ``menu_size`` entries (int8, read-only).

        An unchanged mask is the same array as before, so that two reads of ``infos`` compare equal
        (``dict ==`` compares arrays by identity first; PettingZoo's api_test compares them)."""
        mask = np.zeros(self.menu_size, np.int8)
        mask[: len(self.menu(agent))] = 1
        previous = self._masks.get(agent)
        if previous is not None and np.array_equal(previous, mask):
            return previous
        mask.setflags(write=False)
        self._masks[agent] = mask
        return mask

    def state(self) -> np.ndarray:
        """The team's situation as a vector in ``state_space``; see the module docstring."""
        return option_state(self.env.unwrapped)

    def render_action(self, agent: str, action: Any) -> Any:
        """The text action that option ``action`` stands for ('' if it is not a valid choice)."""
        menu = self.menu(agent)
        valid = isinstance(action, (int, np.integer)) and not isinstance(action, bool) and 0 <= action < len(menu)
        text = menu[int(action)].text if valid else ""
        raw = self.env.unwrapped
        candidates = raw.config.num_candidates if role(raw.role_of(agent)).candidates else 1
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
) -> WorkflowRecord:
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


def _searcher_slots(env: SearchEnv) -> list[str]:
    return [agent for agent in env.possible_agents if env.role_of(agent) == "searcher"]


def state_names(env: SearchEnv) -> list[str]:
    """The name of each entry of ``option_state(env)``, in order (the module docstring's table)."""
    return [
        *TEAM_STATE_FEATURES,
        *(f"acting:{agent}" for agent in env.possible_agents),
        *(f"{agent}:{feature}" for agent in _searcher_slots(env) for feature in SLOT_STATE_FEATURES),
    ]


def option_state(env: SearchEnv) -> np.ndarray:
    """The fixed-size global state of ``env``'s current situation; see the module docstring."""
    counters = env.state_counters()
    config, slots = env.config, _searcher_slots(env)
    max_reports = len(slots) * config.max_rounds
    metadata = env.question.metadata
    # the kind and supporting passages of a SynthWiki question; a user's question has neither
    kind = question_kind(env.question) if "type" in metadata and "hops" in metadata else None
    support = set(metadata.get("supporting_passages", ()))
    retrieved = {passage["id"] for search in env.searches for passage in search["passages"]}
    with_facts = sum(not r["forced"] and r["text"].strip() != NO_FACTS for r in env.reports)
    features = [
        counters["env_step"] / env.max_steps,
        counters["delegation_rounds"] / config.max_rounds,
        len(env.reports) / max_reports,
        with_facts / max_reports,
        env.counters.search_actions / (env.max_steps * len(slots)),
        len(support & retrieved) / len(support) if support else 0.0,
        len(env.selected) / max_reports,
        float(env.answer_turn is not None),
        env.counters.format_failures / env.max_steps,
        *(float(kind == k) for k in KINDS),
        *counters["acting"].tolist(),
    ]
    for agent in slots:
        calls = [call for call in env.searcher_calls if call.agent == agent]
        last = calls[-1] if calls else None
        features += [
            float(agent in env.active),
            last.search_steps / env.max_steps if last else 0.0,
            len(calls) / config.max_rounds,
            float(last is not None and last.done and not last.forced),
            float(last is not None and last.format_failed),
        ]
    return np.clip(np.array(features, np.float32), 0.0, 1.0)


class OptionParallelEnv(SearchParallelEnv):
    """The parallel API over ``OptionWrapper``: one ``step`` is one environment step; ``state()``
    and ``state_space`` are the wrapper's."""

    def __init__(
        self, aec_env: SearchEnv, menu_size: int = MENU_SIZE, hints: bool = True, flat_observation: bool = False
    ):
        super().__init__(OptionWrapper(aec_env, menu_size, hints, flat_observation=flat_observation))

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
    flat_observation: bool = False,
    **kwargs: Any,
) -> OptionWrapper:
    """An option-mode AEC environment; ``workflow`` is one of ``option_workflows()``;
    ``flat_observation``: a Box observation, the mask in ``infos`` (see the module docstring)."""
    return OptionWrapper(_raw_env(workflow, **kwargs), menu_size, hints, closed_book, flat_observation)


def option_parallel_env(
    workflow: str = "hierarchical",
    menu_size: int = MENU_SIZE,
    hints: bool = True,
    flat_observation: bool = False,
    **kwargs: Any,
) -> OptionParallelEnv:
    """An option-mode parallel environment; ``workflow`` is one of ``option_workflows()``."""
    return OptionParallelEnv(_raw_env(workflow, **kwargs), menu_size, hints, flat_observation)


def _raw_env(workflow: str, **kwargs: Any) -> SearchEnv:
    # a workflow has an option mode when each of its roles declares a menu (Role.menu)
    if workflow not in option_workflows():
        raise ValueError(
            f"workflow={workflow!r} has no option mode; workflows whose every role declares a menu "
            f"(Role.menu): {sorted(option_workflows())}"
        )
    return env_module(workflow).env(**kwargs)
