"""A small shared policy for the option mode, and episode collection with it.

``MenuPolicy`` scores every menu slot with one MLP over [global features, slot features]
(parameters shared across roles and slots, the role is a feature), so it is invariant to the
menu's order. ``play_batch`` plays many episodes at once in an ``OptionVectorEnv`` (one policy
forward per tick for every acting agent) and keeps every decision with the information
credit-assignment methods need (role, Searcher assignment, log-probability, global state);
``play`` runs one episode of a plain ``OptionWrapper``, one decision at a time (the reference path).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from maopd.envs.option.menus import ITEM_FEATURES
from maopd.envs.option.vector import OptionVectorEnv
from maopd.envs.option.wrapper import GLOBAL_FEATURES, OptionWrapper, play_options
from maopd.envs.records import RewardParts, WorkflowRecord


class MenuScorer(nn.Module):
    """One value per menu slot from an MLP over [global features, slot features]."""

    def __init__(self, menu_size: int, hidden: int = 64):
        super().__init__()
        self.menu_size = menu_size
        self.score = nn.Sequential(
            nn.Linear(GLOBAL_FEATURES + ITEM_FEATURES, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    def slot_values(self, observations: torch.Tensor) -> torch.Tensor:
        """[N, F] observations -> [N, K] one value per slot."""
        shared = observations[:, :GLOBAL_FEATURES]
        items = observations[:, GLOBAL_FEATURES:].reshape(-1, self.menu_size, ITEM_FEATURES)
        joined = torch.cat([shared[:, None].expand(-1, self.menu_size, -1), items], dim=-1)
        return self.score(joined).squeeze(-1)


class MenuPolicy(MenuScorer):
    def logits(self, observations: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        """[N, F] observations and [N, K] masks -> [N, K] masked logits."""
        return self.slot_values(observations).masked_fill(masks <= 0, -1e9)

    def distribution(self, observations: torch.Tensor, masks: torch.Tensor) -> torch.distributions.Categorical:
        # No argument validation: the masked logits are finite by construction, and checking them
        # costs more than the forward pass of a small batch.
        return torch.distributions.Categorical(logits=self.logits(observations, masks), validate_args=False)


@dataclass
class Decision:
    agent: str
    role: str
    call: int | None  # index into the record's Searcher assignments (searcher_calls), else None
    observation: np.ndarray
    mask: np.ndarray
    action: int
    logprob: float
    state: np.ndarray  # the global state when the decision was made (``OptionWrapper.state()``)


@dataclass
class Episode:
    question: Any
    question_index: int | None = None
    decisions: list[Decision] = field(default_factory=list)
    record: WorkflowRecord = field(default_factory=WorkflowRecord)  # set when the episode ends

    @property
    def parts(self) -> RewardParts:
        return self.record.rewards


Chooser = Callable[[Decision, torch.distributions.Categorical], int]


def sample(decision: Decision, dist: torch.distributions.Categorical) -> int:
    return int(dist.sample())


def greedy(decision: Decision, dist: torch.distributions.Categorical) -> int:
    return int(torch.argmax(dist.logits))


def play(env: OptionWrapper, policy: MenuPolicy, options: dict, choose: Chooser = sample) -> Episode:
    """One episode; ``choose`` picks each action (sampling, greedy, or a scripted deviation)."""
    raw = env.unwrapped
    decisions: list[Decision] = []

    def act(agent: str, obs: dict[str, np.ndarray]) -> int:
        role = raw.role_of(agent)
        call = raw.searcher_calls.index(raw.active[agent]) if role == "searcher" else None
        decision = Decision(agent, role, call, obs["observations"], obs["action_mask"], -1, 0.0, env.state())
        with torch.no_grad():
            dist = policy.distribution(
                torch.as_tensor(obs["observations"])[None], torch.as_tensor(obs["action_mask"])[None]
            )
        decision.action = choose(decision, dist)
        decision.logprob = float(dist.log_prob(torch.tensor([decision.action]))[0])
        decisions.append(decision)
        return decision.action

    record = play_options(env, act, options)
    return Episode(raw.question, decisions=decisions, record=record)


# Forces a decision's action (a scripted deviation) or returns None to let the policy choose.
Override = Callable[[int, int, Decision], "int | None"]  # (episode, decision number, decision)


def play_batch(
    venv: OptionVectorEnv,
    policy: MenuPolicy,
    question_indices: Sequence[int],
    greedy_play: bool = False,
    override: Override | None = None,
) -> list[Episode]:
    """Episodes of ``question_indices``, ``venv.num_envs`` at a time, sampled (or greedy)."""
    episodes: list[Episode] = []
    for start in range(0, len(question_indices), venv.num_envs):
        chunk = list(question_indices[start : start + venv.num_envs])
        venv.reset(chunk)
        batch = [Episode(venv.questions[q], q) for q in chunk]
        while pending := venv.pending():
            observations = torch.as_tensor(np.stack([node.observation for _, node in pending]))
            masks = torch.as_tensor(np.stack([node.mask for _, node in pending]))
            with torch.no_grad():
                logits = policy.logits(observations, masks)
            chosen = (
                logits.argmax(dim=-1)
                if greedy_play
                else torch.distributions.Categorical(logits=logits, validate_args=False).sample()
            )
            # as numpy and lists: indexing a tensor element by element costs more than the forward pass
            logprobs = torch.log_softmax(logits, dim=-1).numpy()
            actions = {}
            for row, ((slot, node), action) in enumerate(zip(pending, chosen.tolist())):
                episode = batch[slot]
                decision = Decision(
                    node.agent, node.role, node.call, node.observation, node.mask, action, 0.0, node.state
                )
                if override is not None:
                    forced = override(start + slot, len(episode.decisions), decision)
                    decision.action = decision.action if forced is None else int(forced)
                decision.logprob = float(logprobs[row, decision.action])
                episode.decisions.append(decision)
                actions[slot] = decision.action
            venv.step(actions)
        for episode, record in zip(batch, venv.records()):
            episode.record = record
        episodes += batch
    return episodes
