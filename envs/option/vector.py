"""Many option-mode episodes stepped together, with every transition computed once.

An option-mode episode is a deterministic function of its question and the indices chosen so far:
the environment parses the same outputs, retrieves the same passages and builds the same menus.
``OptionVectorEnv`` therefore memoises its environment: a transition — the observation, mask,
global state, acting agent and Searcher assignment after an action prefix, or the finished
workflow record — is computed the first time any slot reaches that prefix and looked up ever
after, across slots, episodes, iterations, seeds and credit methods that share the cache.
``tests/envs/test_option_vector.py`` replays sampled episodes through a fresh text environment and
gets identical records. This is the reference vectorized path; the trainer plays the same episodes
faster in ``maopd.envs.option.fast``, whose own rules need no text environment.

On a cache miss a slot's live environment is brought to the prefix: it continues from where it is
when that is a prefix of the wanted one (the common case, a slot exploring a new branch), else it
is reset and replays the prefix.

    venv = OptionVectorEnv(lambda: scenario.make_env("train"), num_envs=64)
    venv.reset([3, 17, ...])            # one question index per slot
    while pending := venv.pending():   # [(slot, Node)] of the slots whose agent must act
        venv.step({slot: choose(node) for slot, node in pending})
    records = venv.records()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from maopd.envs.option.wrapper import OptionWrapper
from maopd.envs.records import WorkflowRecord


@dataclass(frozen=True)
class Node:
    """The state after an action prefix: who acts, what it sees and the global state
    (``OptionWrapper.state()``, for centralised critics), or the finished record."""

    agent: str | None = None
    role: str | None = None
    call: int | None = None  # index of the acting Searcher's assignment in ``searcher_calls``
    observation: np.ndarray | None = None
    mask: np.ndarray | None = None
    record: WorkflowRecord | None = None  # set once the workflow is over; read-only
    state: np.ndarray | None = None

    @property
    def done(self) -> bool:
        return self.record is not None


Key = tuple[int, tuple[int, ...]]  # (question index, actions so far)


class TransitionCache:
    """Nodes by (question index, action prefix); share one between vector envs of one scenario."""

    def __init__(self) -> None:
        self.nodes: dict[Key, Node] = {}
        self.hits = 0
        self.misses = 0


# Both read the state from the unwrapped environment: through PettingZoo's wrappers every attribute
# read is two ``__getattr__`` calls, a measurable share of a transition. Steps go through the wrappers.
def _settle(env: OptionWrapper) -> None:
    """Step finished agents out (``step(None)``), as every AEC loop does, until one must act."""
    raw = env.unwrapped
    while raw.agents and (raw.terminations[raw.agent_selection] or raw.truncations[raw.agent_selection]):
        env.step(None)


def _node(env: OptionWrapper) -> Node:
    raw = env.unwrapped
    if not raw.agents:
        return Node(record=raw.record)
    agent = raw.agent_selection
    role = raw.role_of(agent)
    call = raw.searcher_calls.index(raw.active[agent]) if role == "searcher" else None
    observation = env.observe(agent)
    return Node(agent, role, call, observation["observations"], observation["action_mask"], state=env.state())


class OptionVectorEnv:
    def __init__(self, make_env: Callable[[], OptionWrapper], num_envs: int, cache: TransitionCache | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r} is invalid: must be at least 1")
        self.num_envs = num_envs
        self._make_env = make_env
        # A slot's text environment is built on its first cache miss (slot 0's now, for the question
        # set): once transitions are cached most slots never need one, and each costs time to build.
        self.envs: list[OptionWrapper | None] = [make_env()] + [None] * (num_envs - 1)
        self.questions: Sequence[Any] = self.envs[0].unwrapped.questions
        self.cache = cache if cache is not None else TransitionCache()
        self._live: list[Key | None] = [None] * num_envs  # the prefix each live text env is at
        self.keys: list[Key | None] = [None] * num_envs  # the prefix each slot's episode is at

    def reset(self, question_indices: Sequence[int]) -> None:
        """Start one episode per given question in slots 0..len-1; other slots stay idle."""
        if len(question_indices) > self.num_envs:
            raise ValueError(f"{len(question_indices)} questions for {self.num_envs} slots")
        self.keys = [(int(q), ()) for q in question_indices] + [None] * (self.num_envs - len(question_indices))

    def node(self, slot: int) -> Node:
        key = self.keys[slot]
        if key is None:
            raise ValueError(f"slot {slot} has no episode; reset it first")
        node = self.cache.nodes.get(key)
        if node is not None:
            self.cache.hits += 1
            return node
        self.cache.misses += 1
        node = _node(self._bring_to(slot, key))
        self.cache.nodes[key] = node
        return node

    def _bring_to(self, slot: int, key: Key) -> OptionWrapper:
        if self.envs[slot] is None:
            self.envs[slot] = self._make_env()
        env, live = self.envs[slot], self._live[slot]
        question, actions = key
        if live is None or live[0] != question or live[1] != actions[: len(live[1])]:
            env.reset(options={"question_index": question})
            _settle(env)
            live = (question, ())
        for action in actions[len(live[1]) :]:
            env.step(action)
            _settle(env)
        self._live[slot] = key
        return env

    def pending(self) -> list[tuple[int, Node]]:
        """(slot, node) of every slot whose episode waits for an action."""
        out = []
        for slot, key in enumerate(self.keys):
            if key is not None:
                node = self.node(slot)
                if not node.done:
                    out.append((slot, node))
        return out

    def step(self, actions: Mapping[int, int]) -> None:
        for slot, action in actions.items():
            question, prefix = self.keys[slot]
            self.keys[slot] = (question, (*prefix, int(action)))

    def records(self) -> list[WorkflowRecord]:
        """The finished records of slots 0..n-1 (in reset order)."""
        return [self.node(slot).record for slot, key in enumerate(self.keys) if key is not None]

    def actions(self, slot: int) -> tuple[int, ...]:
        return self.keys[slot][1]
