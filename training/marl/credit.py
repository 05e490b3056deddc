"""Credit-assignment methods for the option mode: each turns a batch of episodes into one
advantage per decision, for the whole team. Select one by name (``MarlConfig.method``); add one
with ``@register(name, needs=Needs(...))`` (also from your own script: see docs/marl.md).

These are not the LLM trainer's advantage estimators (``maopd.training.advantages``), each of which
is the signal of one role, chosen per role in config; both registries declare what a signal needs
in one vocabulary (``maopd.training.signals.Needs``), and the trainer that runs one provides that:
a method declaring ``Needs(teacher=True)`` gets a Teacher trained first (``maopd.training.marl.trainer``).

* ``team``        every decision gets the team outcome R_EM (team-reward PPO);
* ``role``        each role its own reward, as in the paper: Leader R_L (Eq. 6), Answerer R_A,
                  each Searcher assignment R_S (Stage I reward);
* ``difference``  Searchers get a difference reward D = R_EM − R_EM(assignment replaced by an
                  immediate report), the rest of the episode replayed with the greedy policy
                  (Wolpert & Tumer's difference rewards with a "do nothing" default action); Leader
                  and Answerer as in ``role``;
* ``coma``        a learned counterfactual critic (Foerster et al.'s COMA on menus): Q(s, a) of
                  every option, regressed on R_EM; each decision gets Q(s, a) − Σ_a' π(a'|s) Q(s, a');
* ``opd``         Searchers get the teacher–student log-ratio log π_T(a|s) − log π(a|s) of their
                  own choice (Eq. 5 on options; the Teacher is a policy trained on the cascade),
                  Leader and Answerer as in ``role`` (Eq. 7): the LLM trainer's per-role map
                  {leader: grpo, searcher: opd, answerer: grpo} on options;
* ``mappo``       Yu et al.'s MAPPO: a centralised value V(global state, acting role) and GAE
                  (γ = 1, λ = 0.95) over each episode's decisions on the team outcome R_EM.

Outcome-based signals are normalized per role over the batch (Eq. 1 with the batch as the
group); the OPD log-ratio is used as it is, as in the paper. Every decision carries the global
state (``decision.state``, ``maopd.envs.option.wrapper.option_state``) for methods with a centralised
critic, ``mappo``'s or one defined outside the package.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from maopd.base.errors import failed_in
from maopd.envs.option.menus import FINISHES_FEATURE, ITEM_FEATURES
from maopd.envs.option.vector import OptionVectorEnv
from maopd.envs.option.wrapper import GLOBAL_FEATURES
from maopd.envs.records import RewardParts
from maopd.envs.roles import TEAM_ROLES
from maopd.training.losses import PluginOutputError, check_plugin_output, lookup
from maopd.training.marl.policy import Decision, Episode, MenuPolicy, MenuScorer, play_batch
from maopd.training.signals import Declared, Needs, needs_of, needs_registry_decorator

NORMALIZE_EPS = 1e-6


@dataclass
class CreditContext:
    venv: OptionVectorEnv  # for counterfactual replays
    policy: MenuPolicy
    teacher: MenuPolicy | None = None
    state: dict = field(default_factory=dict)  # what a learning method keeps between batches


CreditMethod = Callable[[list[Episode], CreditContext], list[np.ndarray]]
CREDIT_METHODS: dict[str, Declared] = {}
register = needs_registry_decorator(CREDIT_METHODS, "credit-assignment method")


def credit_method_needs(name: str) -> Needs:
    """What the method registered as ``name`` declared it needs."""
    return needs_of(CREDIT_METHODS, "credit-assignment method", name)


def get_credit_method(name: str) -> CreditMethod:
    """The method registered as ``name``, its output checked: one finite real array per episode,
    one entry per decision (``PluginOutputError`` naming the method otherwise). A method that
    declares it needs the Teacher refuses a context without one."""
    method = lookup(CREDIT_METHODS, "credit-assignment method", name)
    source = method.fn.__code__.co_filename  # the plug-in's file, named with its errors

    @functools.wraps(method.fn)
    def checked_method(episodes: list[Episode], ctx: CreditContext) -> list[np.ndarray]:
        if method.needs.teacher and ctx.teacher is None:
            raise ValueError(
                f"credit-assignment method {name!r} needs a Teacher policy (MarlConfig.teacher_iterations > 0)"
            )
        before = pickle.dumps(episodes)
        try:
            advantages = method(episodes, ctx)
        except Exception as exc:  # noqa: BLE001 -- whatever a plug-in raises is reported as one line naming it
            raise PluginOutputError(
                f"credit-assignment method {name!r} ({source}) raised{failed_in(exc, source)}"
            ) from None
        if pickle.dumps(episodes) != before:
            raise PluginOutputError(
                f"credit-assignment method {name!r} ({source}) changed the episodes it was given; a method "
                "reads them and returns advantages: copy what it changes"
            )
        if not isinstance(advantages, (list, tuple)) or len(advantages) != len(episodes):
            count = len(advantages) if isinstance(advantages, (list, tuple)) else type(advantages).__name__
            raise PluginOutputError(
                f"credit-assignment method {name!r} ({source}) returned {count} for {len(episodes)} episodes; "
                "expected a list with one array of advantages per episode"
            )
        for index, (episode, values) in enumerate(zip(episodes, advantages)):
            what = f"episode {index} ({len(episode.decisions)} decisions)"
            check_plugin_output(
                "credit-assignment method", name, what, values, (len(episode.decisions),), source=source
            )
        return list(advantages)

    return checked_method


def role_reward(decision: Decision, parts: RewardParts) -> float:
    """The paper's reward of the role that made ``decision``."""
    if decision.role == "leader":
        return float(parts.leader)
    if decision.role == "answerer":
        return float(np.mean(parts.answerer))
    return float(parts.searcher_calls[decision.call])


def normalize_per_role(episodes: list[Episode], rewards: list[np.ndarray], roles: set[str]) -> list[np.ndarray]:
    """(r − mean) / (std + eps) over the batch's decisions of each role in ``roles``; others untouched."""
    out = [r.astype(np.float64).copy() for r in rewards]
    for role in roles:
        values = np.array(
            [r[i] for ep, r in zip(episodes, rewards) for i, d in enumerate(ep.decisions) if d.role == role]
        )
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
    rewards = [np.full(len(ep.decisions), float(ep.parts.em)) for ep in episodes]
    return normalize_per_role(episodes, rewards, set(TEAM_ROLES))


@register("role")
def role_rewards(episodes: list[Episode], ctx: CreditContext) -> list[np.ndarray]:
    rewards = [np.array([role_reward(d, ep.parts) for d in ep.decisions]) for ep in episodes]
    return normalize_per_role(episodes, rewards, set(TEAM_ROLES))


def first_report(decision: Decision) -> int:
    """The first menu slot that finishes a Searcher's call: a report (the ``finishes`` feature)."""
    items = decision.observation[GLOBAL_FEATURES:].reshape(len(decision.mask), ITEM_FEATURES)
    return int(np.flatnonzero(items[:, FINISHES_FEATURE] * decision.mask)[0])


def counterfactual_ems(episodes: list[Episode], calls: list[tuple[int, int]], ctx: CreditContext) -> list[float]:
    """R_EM of each (episode, Searcher assignment) when that assignment reports at once instead;
    the recorded choices are kept before it, the greedy policy plays everything after."""

    def choose(index: int, number: int, decision: Decision) -> int | None:
        episode, call = episodes[calls[index][0]], calls[index][1]
        deviation = next(i for i, d in enumerate(episode.decisions) if d.call == call)
        if number < deviation:
            return episode.decisions[number].action
        return first_report(decision) if number == deviation else None

    questions = [episodes[e].question_index for e, _ in calls]
    replays = play_batch(ctx.venv, ctx.policy, questions, greedy_play=True, override=choose)
    return [float(replay.parts.em) for replay in replays]


@register("difference")
def difference_rewards(episodes: list[Episode], ctx: CreditContext) -> list[np.ndarray]:
    calls = [(e, call) for e, ep in enumerate(episodes) for call in sorted({d.call for d in ep.decisions} - {None})]
    counterfactual = dict(zip(calls, counterfactual_ems(episodes, calls, ctx)))
    rewards = []
    for e, ep in enumerate(episodes):
        em = float(ep.parts.em)
        rewards.append(
            np.array(
                [
                    em - counterfactual[(e, d.call)] if d.role == "searcher" else role_reward(d, ep.parts)
                    for d in ep.decisions
                ]
            )
        )
    return normalize_per_role(episodes, rewards, set(TEAM_ROLES))


COMA_EPOCHS = 4
COMA_LR = 3e-3


@register("coma")
def counterfactual_critic(episodes: list[Episode], ctx: CreditContext) -> list[np.ndarray]:
    """COMA's advantage from a critic Q(s, ·) over the menu, fitted to R_EM on this batch first."""
    if "critic" not in ctx.state:
        critic = MenuScorer(ctx.policy.menu_size, ctx.policy.score[0].out_features)
        ctx.state["critic"] = critic
        ctx.state["critic_optimizer"] = torch.optim.Adam(critic.parameters(), lr=COMA_LR)
    critic, optimizer = ctx.state["critic"], ctx.state["critic_optimizer"]
    decisions = [d for ep in episodes for d in ep.decisions]
    observations = torch.as_tensor(np.stack([d.observation for d in decisions]))
    masks = torch.as_tensor(np.stack([d.mask for d in decisions]))
    actions = torch.tensor([d.action for d in decisions])
    returns = torch.tensor([float(ep.parts.em) for ep in episodes for _ in ep.decisions])
    for _ in range(COMA_EPOCHS):
        taken = critic.slot_values(observations).gather(1, actions[:, None]).squeeze(1)
        loss = torch.nn.functional.mse_loss(taken, returns)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        values = critic.slot_values(observations)
        probs = ctx.policy.distribution(observations, masks).probs
        advantage = values.gather(1, actions[:, None]).squeeze(1) - (probs * values).sum(dim=1)
    flat = advantage.numpy().astype(np.float64)
    rewards, start = [], 0
    for ep in episodes:
        rewards.append(flat[start : start + len(ep.decisions)])
        start += len(ep.decisions)
    return normalize_per_role(episodes, rewards, set(TEAM_ROLES))


@register("opd", Needs(teacher=True))
def teacher_distillation(episodes: list[Episode], ctx: CreditContext) -> list[np.ndarray]:
    rewards = [np.array([role_reward(d, ep.parts) for d in ep.decisions]) for ep in episodes]
    rewards = normalize_per_role(episodes, rewards, {"leader", "answerer"})
    for ep, r in zip(episodes, rewards):
        searcher = [i for i, d in enumerate(ep.decisions) if d.role == "searcher"]
        if searcher:
            decisions = [ep.decisions[i] for i in searcher]
            with torch.no_grad():
                dist = ctx.teacher.distribution(
                    torch.as_tensor(np.stack([d.observation for d in decisions])),
                    torch.as_tensor(np.stack([d.mask for d in decisions])),
                )
                teacher = dist.log_prob(torch.tensor([d.action for d in decisions])).numpy()
            r[searcher] = teacher - np.array([d.logprob for d in decisions])
    return rewards


MAPPO_GAMMA = 1.0  # episodic tasks with one reward at the end: nothing to discount
MAPPO_LAMBDA = 0.95  # the common choice (Schulman et al. 2016; MAPPO's default)
VALUE_EPOCHS = 4
VALUE_LR = 3e-3


def gae(rewards: np.ndarray, values: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """Generalized advantage estimates of one episode (Schulman et al. 2016, Eq. 16):
    A_t = Σ_l (γλ)^l δ_{t+l}, δ_t = r_t + γ V(s_{t+1}) − V(s_t), with ``values[t]`` = V(s_t) and
    the state after the last step terminal (value 0). The value targets are A_t + V(s_t)."""
    advantages = np.zeros(len(rewards))
    running = 0.0
    for t in reversed(range(len(rewards))):
        following = values[t + 1] if t + 1 < len(values) else 0.0
        running = rewards[t] + gamma * following - values[t] + gamma * lam * running
        advantages[t] = running
    return advantages


class StateValue(nn.Module):
    """V(global state, one-hot of the acting role): an MLP of the policy's width."""

    def __init__(self, state_size: int, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_size + len(TEAM_ROLES), hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    @staticmethod
    def inputs(decisions: list[Decision]) -> torch.Tensor:
        """[N, state + roles]: each decision's global state and its role's one-hot."""
        roles = np.array([[d.role == role for role in TEAM_ROLES] for d in decisions], np.float32)
        return torch.as_tensor(np.concatenate([np.stack([d.state for d in decisions]), roles], axis=1))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.net(inputs).squeeze(-1)


def fit_value(
    value: StateValue, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor, epochs: int
) -> list[float]:
    """``epochs`` full-batch steps on the mean squared error to ``targets``; the loss before each."""
    losses = []
    for _ in range(epochs):
        loss = torch.nn.functional.mse_loss(value(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@register("mappo")
def mappo(episodes: list[Episode], ctx: CreditContext) -> list[np.ndarray]:
    """MAPPO (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent
    Games"): per-agent policies sharing parameters (the one ``MenuPolicy``, the role a feature) and a
    centralised value V(s, role) on the global state ``decision.state`` with the acting role's
    one-hot (MAPPO gives its value the agent's identity with the global state; the role is the
    identity the shared policy knows). The reward is the shared team reward:
    R_EM at each episode's last decision, 0 before. Advantages are GAE (``gae``, γ = 1, λ = 0.95)
    over the episode's decisions in the order the team took them, with V as it was before this
    batch (PPO's rollout-time values); V, kept in ``ctx.state`` across batches, is then fitted to
    the GAE returns A_t + V(s_t) (``VALUE_EPOCHS`` full-batch Adam steps).

    Differences from the paper: the value loss is a plain MSE, without its PPO-style value
    clipping, Huber loss and PopArt normalisation (returns lie in [0, 1]); advantages are
    normalized per role over the batch, as every method here is, not over the whole batch."""
    decisions = [d for ep in episodes for d in ep.decisions]
    inputs = StateValue.inputs(decisions)
    if "mappo_value" not in ctx.state:
        value = StateValue(inputs.shape[1] - len(TEAM_ROLES), ctx.policy.score[0].out_features)
        ctx.state["mappo_value"] = value
        ctx.state["mappo_value_optimizer"] = torch.optim.Adam(value.parameters(), lr=VALUE_LR)
    value = ctx.state["mappo_value"]
    with torch.no_grad():
        values = value(inputs).numpy().astype(np.float64)
    advantages, start = [], 0
    for ep in episodes:
        count = len(ep.decisions)
        rewards = np.zeros(count)
        rewards[-1] = float(ep.parts.em)
        advantages.append(gae(rewards, values[start : start + count], MAPPO_GAMMA, MAPPO_LAMBDA))
        start += count
    returns = torch.as_tensor(np.concatenate(advantages) + values, dtype=torch.float32)
    fit_value(value, ctx.state["mappo_value_optimizer"], inputs, returns, VALUE_EPOCHS)
    return normalize_per_role(episodes, advantages, set(TEAM_ROLES))
