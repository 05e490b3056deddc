"""The role rewards of a rollout batch, read from its workflow records, and the step's reward and
workflow metrics."""

from __future__ import annotations

import numpy as np
import torch

from maopd.envs import team
from maopd.envs.roles import ROLES
from maopd.training.rollout import TeamBatch


def record_rewards(batch: TeamBatch) -> dict[str, torch.Tensor | None]:
    """Group reward tensors from the workflow records: [B, G], and [B, G, n] for the Answerer;
    ``roles`` holds those of the roles a workflow registers beyond the built-in four."""
    records = batch.records
    rewards = [[r.rewards for r in row] for row in records]
    # at least 1: a batch where no workflow reached the Answerer (env.force_finish off) keeps
    # a [B, G, 1] tensor whose entries are all masked out
    num_candidates = max(1, max(len(r.answerer) for row in rewards for r in row))
    answerer = torch.zeros(len(records), batch.group_size, num_candidates)
    candidate_mask = torch.zeros_like(answerer, dtype=torch.bool)
    for b, row in enumerate(rewards):
        for g, r in enumerate(row):
            answerer[b, g, : len(r.answerer)] = torch.tensor(r.answerer, dtype=torch.float32)
            candidate_mask[b, g, : len(r.answerer)] = True
    has_leader = all(r.leader is not None for row in rewards for r in row)
    has_solver = all("solver" in r.roles for row in rewards for r in row)  # the single workflow's records
    return {
        "em": torch.tensor([[r.em for r in row] for row in rewards]),
        "leader": torch.tensor([[r.leader for r in row] for row in rewards]) if has_leader else None,
        "answerer": answerer,
        "candidate_mask": candidate_mask,
        # R_S of a trajectory: the mean over its Searcher calls (0 when it made none)
        "searcher": torch.tensor(
            [[float(np.mean(r.searcher_calls)) if r.searcher_calls else 0.0 for r in row] for row in rewards]
        ),
        "solver": torch.tensor([[r.roles["solver"] for r in row] for row in rewards]) if has_solver else None,
        "roles": {
            role: torch.tensor([[r.roles[role] for r in row] for row in rewards])
            for role in rewards[0][0].roles
            if role not in ROLES and all(role in r.roles for row in rewards for r in row)
        },
    }


def rollout_metrics(batch: TeamBatch, rewards: dict[str, torch.Tensor | None]) -> dict[str, float]:
    """Rewards, EM and workflow counters averaged over the B·G trajectories of a step."""
    records = [r for row in batch.records for r in row]
    metrics = {
        "reward/em": float(rewards["em"].mean()),
        "reward/answerer": float(rewards["answerer"][rewards["candidate_mask"]].mean())
        if rewards["candidate_mask"].any()
        else 0.0,
        "reward/searcher": float(rewards["searcher"].mean()),
        "em/answerer_candidates": float(np.mean([s for r in records for s in r.candidate_scores] or [0.0])),
    }
    if rewards["leader"] is not None:
        metrics["reward/leader"] = float(rewards["leader"].mean())
    if rewards.get("solver") is not None:
        metrics["reward/solver"] = float(rewards["solver"].mean())
    for role, values in rewards.get("roles", {}).items():
        metrics[f"reward/{role}"] = float(values.mean())
    for counter in (
        "search_actions",
        "searches_with_passages",
        "reports",
        "format_failures",
        "delegation_rounds",
        "task_assignments",
        "tool_steps",
        "env_steps",
    ):
        metrics[f"workflow/{counter}"] = float(np.mean([getattr(r.counters, counter) for r in records]))
    # the share of workflows that never searched: where search collapse shows first
    metrics["workflow/no_search"] = float(np.mean([r.counters.search_actions == 0 for r in records]))
    for role in team.role_names():
        sequences = [s for s in batch.sequences if s.role == role]
        if sequences:
            metrics[f"{role}/sequences"] = float(len(sequences))
            metrics[f"{role}/generated_tokens"] = float(np.mean([s.num_generated for s in sequences]))
    return metrics
