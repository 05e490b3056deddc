"""Credit-assignment methods for the option mode: each turns a batch of episodes into one
advantage per decision. Select one by name (``MarlConfig.method``); add one with ``@register``.

* ``team``        every decision gets the team outcome R_EM (team-reward PPO);
* ``role``        each role its own reward, as in the paper: Leader R_L (Eq. 6), Answerer R_A,
                  each Searcher assignment R_S (Stage I reward);
* ``difference``  Searchers get a difference reward D = R_EM − R_EM(assignment replaced by an
                  immediate empty report), the rest of the episode replayed with the greedy policy
                  (Wolpert & Tumer's difference rewards with a "do nothing" default action); Leader
                  and Answerer as in ``role``;
* ``opd``         Searchers get the teacher–student log-ratio log π_T(a|s) − log π(a|s) of their
                  own choice (Eq. 5 on options; the Teacher is a policy trained on the cascade),
                  Leader and Answerer as in ``role`` (Eq. 7).

Outcome-based signals are normalized per role over the batch (Eq. 1 with the batch as the
group); the OPD log-ratio is used as it is, as in the paper.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from envs.actions import ROLES
from envs.option_mode import OptionWrapper
from training.losses import lookup, registry_decorator
from training.marl.policy import Decision, Episode, MenuPolicy, greedy, play

NORMALIZE_EPS = 1e-6


@dataclass
class CreditContext:
    env: OptionWrapper  # for counterfactual replays
    policy: MenuPolicy
    teacher: MenuPolicy | None = None


CreditMethod = Callable[[list[Episode], CreditContext], list[np.ndarray]]
CREDIT_METHODS: dict[str, CreditMethod] = {}
register = registry_decorator(CREDIT_METHODS, "credit-assignment method")


def get_credit_method(name: str) -> CreditMethod:
    return lookup(CREDIT_METHODS, "credit-assignment method", name)


def role_reward(decision: Decision, parts: dict) -> float:
    """The paper's reward of the role that made ``decision``."""
    if decision.role == "leader":
        return float(parts["leader"])
    if decision.role == "answerer":
        return float(np.mean(parts["answerer"]))
    return float(parts["searcher_calls"][decision.call])


def normalize_per_role(episodes: list[Episode], rewards: list[np.ndarray], roles: set[str]) -> list[np.ndarray]:
    """(r − mean) / (std + eps) over the batch's decisions of each role in ``roles``; others untouched."""
    out = [r.astype(np.float64).copy() for r in rewards]
    for role in roles:
        values = np.array([r[i] for ep, r in zip(episodes, rewards) for i, d in enumerate(ep.decisions) if d.role == role])
        if values.size == 0:
            continue
        mean, std = values.mean(), values.std()
        for ep, r in zip(episodes, out):
            for i, d in enumerate(ep.decisions):
                if d.role == role:
                    r[i] = (r[i] - mean) / (std + NORMALIZE_EPS)
    return out




@register("team")
def team_reward(episodes: list[Episode], ctx: CreditContext) -> list[np.ndarray]:
    rewards = [np.full(len(ep.decisions), float(ep.parts["em"])) for ep in episodes]
    return normalize_per_role(episodes, rewards, set(ROLES))


@register("role")
def role_rewards(episodes: list[Episode], ctx: CreditContext) -> list[np.ndarray]:
    rewards = [np.array([role_reward(d, ep.parts) for d in ep.decisions]) for ep in episodes]
    return normalize_per_role(episodes, rewards, set(ROLES))


def counterfactual_em(ep: Episode, call: int, ctx: CreditContext) -> float:
    """R_EM when Searcher assignment ``call`` reports at once instead; the recorded choices are
    kept before it, the greedy policy plays everything after."""
    recorded = iter(ep.decisions)
    deviated = False

    def choose(decision: Decision, dist: torch.distributions.Categorical) -> int:
        nonlocal deviated
        if decision.call == call:
            deviated = True
            menu = ctx.env.menu(decision.agent)
            return next(i for i, option in enumerate(menu) if option.kind == "report")
        if not deviated:
            return next(recorded).action
        return greedy(decision, dist)

    return float(play(ctx.env, ctx.policy, {"question": ep.question}, choose).parts["em"])


@register("difference")
def difference_rewards(episodes: list[Episode], ctx: CreditContext) -> list[np.ndarray]:
    rewards = []
    for ep in episodes:
        em = float(ep.parts["em"])
        counterfactual = {call: em - counterfactual_em(ep, call, ctx) for call in {d.call for d in ep.decisions} - {None}}
        rewards.append(np.array([counterfactual[d.call] if d.role == "searcher" else role_reward(d, ep.parts)
                                 for d in ep.decisions]))
    return normalize_per_role(episodes, rewards, set(ROLES))


@register("opd")
def teacher_distillation(episodes: list[Episode], ctx: CreditContext) -> list[np.ndarray]:
    if ctx.teacher is None:
        raise ValueError("method='opd' needs a Teacher policy (MarlConfig.teacher_iterations > 0)")
    rewards = [np.array([role_reward(d, ep.parts) for d in ep.decisions]) for ep in episodes]
    rewards = normalize_per_role(episodes, rewards, {"leader", "answerer"})
    for ep, r in zip(episodes, rewards):
        searcher = [i for i, d in enumerate(ep.decisions) if d.role == "searcher"]
        if searcher:
            decisions = [ep.decisions[i] for i in searcher]
            with torch.no_grad():
                dist = ctx.teacher.distribution(torch.as_tensor(np.stack([d.observation for d in decisions])),
                                                torch.as_tensor(np.stack([d.mask for d in decisions])))
                teacher = dist.log_prob(torch.tensor([d.action for d in decisions])).numpy()
            r[searcher] = teacher - np.array([d.logprob for d in decisions])
    return rewards
