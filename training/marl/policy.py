"""A small shared policy for the option mode, and episode collection with it.

``MenuPolicy`` scores every menu slot with one MLP over [global features, slot features]
(parameters shared across roles and slots, the role is a feature), so it is invariant to the
menu's order. ``play`` runs one episode of an ``OptionWrapper`` and keeps every decision with
the information credit-assignment methods need (role, Searcher assignment, log-probability).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from envs.option_mode import GLOBAL_FEATURES, ITEM_FEATURES, OptionWrapper


class MenuPolicy(nn.Module):
    def __init__(self, menu_size: int, hidden: int = 64):
        super().__init__()
        self.menu_size = menu_size
        self.score = nn.Sequential(nn.Linear(GLOBAL_FEATURES + ITEM_FEATURES, hidden), nn.Tanh(),
                                   nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def logits(self, observations: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        """[N, F] observations and [N, K] masks -> [N, K] masked logits."""
        shared = observations[:, :GLOBAL_FEATURES]
        items = observations[:, GLOBAL_FEATURES:].reshape(-1, self.menu_size, ITEM_FEATURES)
        joined = torch.cat([shared[:, None].expand(-1, self.menu_size, -1), items], dim=-1)
        scores = self.score(joined).squeeze(-1)
        return scores.masked_fill(masks <= 0, -1e9)

    def distribution(self, observations: torch.Tensor, masks: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self.logits(observations, masks))


@dataclass
class Decision:
    agent: str
    role: str
    call: int | None  # index into the record's Searcher assignments (searcher_calls), else None
    observation: np.ndarray
    mask: np.ndarray
    action: int
    logprob: float


@dataclass
class Episode:
    question: Any
    decisions: list[Decision] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def parts(self) -> dict[str, Any]:
        return self.record["rewards"]


Chooser = Callable[[Decision, torch.distributions.Categorical], int]


def sample(decision: Decision, dist: torch.distributions.Categorical) -> int:
    return int(dist.sample())


def greedy(decision: Decision, dist: torch.distributions.Categorical) -> int:
    return int(torch.argmax(dist.logits))


def play(env: OptionWrapper, policy: MenuPolicy, options: dict, choose: Chooser = sample) -> Episode:
    """One episode; ``choose`` picks each action (sampling, greedy, or a scripted deviation)."""
    env.reset(options=options)
    raw = env.unwrapped
    episode = Episode(raw.question)
    while env.agents:
        agent = env.agent_selection
        if env.terminations[agent]:
            env.step(None)
            continue
        obs = env.observe(agent)
        role = raw.role_of(agent)
        call = raw.searcher_calls.index(raw.active[agent]) if role == "searcher" else None
        decision = Decision(agent, role, call, obs["observations"], obs["action_mask"], -1, 0.0)
        with torch.no_grad():
            dist = policy.distribution(torch.as_tensor(obs["observations"])[None],
                                       torch.as_tensor(obs["action_mask"])[None])
        decision.action = choose(decision, dist)
        decision.logprob = float(dist.log_prob(torch.tensor([decision.action]))[0])
        episode.decisions.append(decision)
        env.step(decision.action)
    episode.record = raw.record
    return episode
