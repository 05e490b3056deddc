"""Train the shared ``MenuPolicy`` on an option-mode scenario with PPO and a credit-assignment method.

``train(MarlConfig(method="role", scenario="lazy_searcher_v1", seed=0))`` returns the trained
policy and its metrics: greedy dev metrics and a learning curve (per iteration: training EM,
searches per workflow, workflows without a search). For a method that declares it needs a Teacher
(``method="opd"``, ``maopd.training.signals.Needs``) a Teacher is first trained on the scenario's
cascade workflow with role rewards (Stage I), then frozen; the student plays the hierarchy (Stage II).
Episodes are played ``num_envs`` at a time. ``transitions="fast"`` (the default) plays them in
the fast option mode (``maopd.envs.option.fast.FastVectorEnv``, a second implementation of the
workflows replay-tested against the text environments), whose world tables
every run of the process shares; ``"text"`` in the text environments behind a transition cache
(``maopd.envs.option.vector.OptionVectorEnv``, the reference). Both give the same episodes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from maopd.base.config import check_fields, checked, seed_field
from maopd.envs.option.fast import FastVectorEnv, World
from maopd.envs.option.menus import MENU_SIZE
from maopd.envs.option.scenarios import get_scenario
from maopd.envs.option.vector import OptionVectorEnv, TransitionCache
from maopd.training.marl.credit import CreditContext, credit_method_needs, get_credit_method
from maopd.training.marl.policy import Episode, MenuPolicy, play_batch

TRANSITIONS = ("fast", "text")  # which implementation plays the episodes (see the module docstring)


@dataclass
class MarlConfig:
    method: str = checked(
        "role",
        help="The credit-assignment method, a key of maopd.training.marl.credit.CREDIT_METHODS: team, role, "
        "difference, coma, opd or mappo (plug-ins register more).",
    )
    scenario: str = checked(
        "synthwiki_v1", help="The option-mode scenario, a key of maopd.envs.option.scenarios.SCENARIOS."
    )
    workflow: str | None = checked(
        None,
        choices=("hierarchical", "cascade"),
        null="the scenario's",
        help="The workflow the policy plays; null: the scenario's. The OPD Teacher plays the cascade.",
    )
    seed: int = seed_field(0, help="Seeds the policy's initial weights, its sampling and the training questions drawn.")
    iterations: int = checked(30, ge=1, help="Training iterations: each plays a batch of episodes and updates once.")
    episodes_per_iteration: int = checked(
        32, ge=1, help="Episodes (questions drawn from the train split) per iteration."
    )
    epochs: int = checked(4, ge=1, help="PPO passes over each iteration's decisions.")
    lr: float = checked(3e-3, gt=0, help="Adam's learning rate.")
    clip: float = checked(0.2, gt=0, help="PPO's clip range: the probability ratio is clipped to [1 − clip, 1 + clip].")
    entropy_coef: float = checked(0.01, ge=0, help="The coefficient of the entropy bonus.")
    hidden: int = checked(64, ge=1, help="The width of the hidden layers of the policy's slot-scoring MLP.")
    teacher_iterations: int = checked(
        30,
        ge=1,
        help="Training iterations of the Teacher (Stage I, role rewards on the cascade), for a method that "
        "needs one (opd).",
    )
    eval_questions: int = checked(100, ge=1, help="Dev questions played greedily for the evaluation after training.")
    num_envs: int = checked(64, ge=1, help="Episodes played at a time.")
    transitions: str = checked(
        "fast",
        choices=TRANSITIONS,
        help="Which implementation plays the episodes: fast (the fast option mode) or text (the text environments "
        "behind a transition cache, the reference); both give the same episodes.",
    )

    def __post_init__(self) -> None:
        check_fields(self)


# What the episodes of one (scenario, split, workflow, transitions) share across every run of the process
_SHARED: dict[tuple[str, str, str | None, str], World | TransitionCache] = {}


def vector_env(config: MarlConfig, split: str) -> FastVectorEnv | OptionVectorEnv:
    """Vectorized episodes of the config's scenario. ``"fast"``: the fast option mode, whose world
    tables are shared per (scenario, split, workflow); ``"text"``: text environments behind one
    transition cache per (scenario, split, workflow)."""
    scenario = get_scenario(config.scenario)
    key = (config.scenario, split, config.workflow, config.transitions)
    if config.transitions == "text":
        cache = _SHARED.setdefault(key, TransitionCache())
        return OptionVectorEnv(lambda: scenario.make_env(split, config.workflow), config.num_envs, cache)
    if key not in _SHARED:
        _SHARED[key] = World(scenario.make_env(split, config.workflow))
    return FastVectorEnv(_SHARED[key], config.num_envs)


def behaviour(episodes: list[Episode]) -> dict[str, float]:
    """Accuracy, searches per workflow and collapse indicators of finished episodes."""
    records = [ep.record for ep in episodes]
    calls = [c for r in records for c in r.searcher_calls()]
    return {
        "em": float(np.mean([r.rewards.em for r in records])),
        "searches_per_workflow": float(np.mean([r.counters.search_actions for r in records])),
        "no_search_workflows": float(np.mean([r.counters.search_actions == 0 for r in records])),
        "searcher_calls_without_search": float(np.mean([not any("<search>" in o for o in c.outputs) for c in calls]))
        if calls
        else 0.0,
        "unknown_answers": float(np.mean([(r.extracted_answers or [None])[0] == "unknown" for r in records])),
        "format_failures": float(np.mean([r.counters.format_failures for r in records])),
    }


def ppo_update(
    policy: MenuPolicy,
    optimizer: torch.optim.Optimizer,
    episodes: list[Episode],
    advantages: list[np.ndarray],
    config: MarlConfig,
) -> float:
    """Clipped PPO over every decision of the batch; returns the last loss."""
    decisions = [d for ep in episodes for d in ep.decisions]
    observations = torch.as_tensor(np.stack([d.observation for d in decisions]))
    masks = torch.as_tensor(np.stack([d.mask for d in decisions]))
    actions = torch.tensor([d.action for d in decisions])
    old = torch.tensor([d.logprob for d in decisions])
    adv = torch.as_tensor(np.concatenate(advantages), dtype=torch.float32)
    for _ in range(config.epochs):
        dist = policy.distribution(observations, masks)
        ratio = torch.exp(dist.log_prob(actions) - old)
        surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - config.clip, 1 + config.clip) * adv)
        loss = -(surrogate.mean() + config.entropy_coef * dist.entropy().mean())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def evaluate(policy: MenuPolicy, config: MarlConfig) -> dict[str, float]:
    """Greedy play on the first ``eval_questions`` dev questions: the test split stays sealed for
    the reported figures (docs/synthwiki.md)."""
    venv = vector_env(config, "dev")
    count = min(config.eval_questions, len(venv.questions))
    return behaviour(play_batch(venv, policy, list(range(count)), greedy_play=True))


def train(
    config: MarlConfig, teacher: MenuPolicy | None = None, progress: bool = True
) -> tuple[MenuPolicy, dict[str, Any]]:
    method = get_credit_method(config.method)  # fails early on an unknown name
    get_scenario(config.scenario)
    if credit_method_needs(config.method).teacher and teacher is None:
        stage_one = replace(config, method="role", workflow="cascade", iterations=config.teacher_iterations)
        teacher, _ = train(stage_one, progress=progress)
        teacher.requires_grad_(False)
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    venv = vector_env(config, "train")
    policy = MenuPolicy(MENU_SIZE, config.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    context = CreditContext(vector_env(config, "train"), policy, teacher)
    curve = []
    label = f"{config.method} {config.scenario} {config.workflow or ''} seed {config.seed}"
    for iteration in tqdm(range(config.iterations), desc=label, disable=not progress):
        questions = [rng.randrange(len(venv.questions)) for _ in range(config.episodes_per_iteration)]
        episodes = play_batch(venv, policy, questions)
        advantages = method(episodes, context)
        ppo_update(policy, optimizer, episodes, advantages, config)
        curve.append({"iteration": iteration + 1, **behaviour(episodes)})
    return policy, {**evaluate(policy, config), "curve": curve}
