"""Train the shared ``MenuPolicy`` on the option mode with PPO and a chosen credit-assignment method.

``train(MarlConfig(method="role", seed=0))`` returns the trained policy and its greedy test
metrics. With ``method="opd"`` a Teacher is first trained on the cascade workflow with role
rewards (Stage I), then frozen; the student plays the hierarchy (Stage II).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from envs.option_mode import MENU_SIZE, option_env
from training.marl.credit import CreditContext, get_credit_method
from training.marl.policy import Episode, MenuPolicy, greedy, play


@dataclass
class MarlConfig:
    method: str = "role"
    workflow: str = "hierarchical"
    seed: int = 0
    iterations: int = 30
    episodes_per_iteration: int = 32
    epochs: int = 4
    lr: float = 3e-3
    clip: float = 0.2
    entropy_coef: float = 0.01
    hidden: int = 64
    hints: bool = False  # the expert-hint feature makes every method reach EM 1.0 within minutes
    max_steps: int | None = None
    teacher_iterations: int = 30
    eval_questions: int = 100


def ppo_update(policy: MenuPolicy, optimizer: torch.optim.Optimizer, episodes: list[Episode],
               advantages: list[np.ndarray], config: MarlConfig) -> float:
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
    """Greedy play on the test split: accuracy, searches per workflow and collapse indicators."""
    env = option_env(config.workflow, hints=config.hints, split="test", max_steps=config.max_steps)
    records = [play(env, policy, {"question_index": i % len(env.unwrapped.questions)}, greedy).record
               for i in range(config.eval_questions)]
    calls = [c for r in records for c in r["calls"] if c["role"] == "searcher"]
    return {
        "em": float(np.mean([r["rewards"]["em"] for r in records])),
        "searches_per_workflow": float(np.mean([r["counters"]["search_actions"] for r in records])),
        "no_search_workflows": float(np.mean([r["counters"]["search_actions"] == 0 for r in records])),
        "searcher_calls_without_search": float(np.mean(
            [not any("<search>" in o for o in c["outputs"]) for c in calls])) if calls else 0.0,
        "unknown_answers": float(np.mean([(r["extracted_answers"] or [None])[0] == "unknown" for r in records])),
        "format_failures": float(np.mean([r["counters"]["format_failures"] for r in records])),
    }


def train(config: MarlConfig, teacher: MenuPolicy | None = None, progress: bool = True) -> tuple[MenuPolicy, dict[str, Any]]:
    get_credit_method(config.method)  # fail early on an unknown name
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    if config.method == "opd" and teacher is None:
        stage_one = replace(config, method="role", workflow="cascade", iterations=config.teacher_iterations,
                            max_steps=None)
        teacher, _ = train(stage_one, progress=progress)
        teacher.requires_grad_(False)
    env = option_env(config.workflow, hints=config.hints, split="train", max_steps=config.max_steps)
    policy = MenuPolicy(MENU_SIZE, config.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    context = CreditContext(env, policy, teacher)
    method = get_credit_method(config.method)
    curve = []
    bar = tqdm(range(config.iterations), desc=f"{config.method} {config.workflow} seed {config.seed}", disable=not progress)
    for _ in bar:
        episodes = [play(env, policy, {"question_index": rng.randrange(len(env.unwrapped.questions))})
                    for _ in range(config.episodes_per_iteration)]
        advantages = method(episodes, context)
        ppo_update(policy, optimizer, episodes, advantages, config)
        train_em = float(np.mean([ep.parts["em"] for ep in episodes]))
        curve.append(train_em)
        bar.set_postfix(train_em=f"{train_em:.2f}")
    metrics = evaluate(policy, config)
    return policy, {**metrics, "train_em_curve": curve}
