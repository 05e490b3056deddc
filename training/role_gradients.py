"""The PPO surrogate's gradient norm per role group, on one batch: how hard each role pulls the shared model.

At the start of an update the policy is π_old, every PPO ratio is 1 and no clipping is active, so
the surrogate's gradient is Σ_t A_t ∇log π(a_t) / D: linear in the advantages. Keeping one role
group's advantages and zeroing the others gives that group's gradient, on the same rows and the
same denominator D. The OPD coefficient β scales the Searcher group's linearly, which is what
``maopd tune beta`` uses to choose β.
"""

from __future__ import annotations

import torch

from maopd.envs.actions import ANSWERER, LEADER, SEARCHER
from maopd.training.advantages import PPOBatch


def role_gradient_norms(trainer, batch: PPOBatch) -> dict[str, float]:
    """``{"searcher": ‖∇‖, "leader_answerer": ‖∇‖}`` of ``trainer``'s PPO loss on ``batch``
    (configure the entropy bonus and other extras off to see the surrogate alone)."""
    advantages = batch.advantages.token_advantages
    groups = {
        "searcher": batch.role_ids == SEARCHER,
        "leader_answerer": (batch.role_ids == LEADER) | (batch.role_ids == ANSWERER),
    }
    rows = torch.arange(batch.num_sequences)
    norms = {}
    trainer.model.train()
    try:
        for name, keep in groups.items():
            batch.advantages.token_advantages = advantages * keep[:, None]
            trainer.model.zero_grad(set_to_none=True)
            terms, _ = trainer._micro_loss(batch, rows)
            terms.loss.backward()
            grads = [p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]
            norms[name] = float(torch.cat(grads).norm()) if grads else 0.0
    finally:
        batch.advantages.token_advantages = advantages
        trainer.model.zero_grad(set_to_none=True)
        trainer.model.eval()
    return norms
