"""Which loss terms give Searcher tokens gradient in each Table 3 variant, in the default preset and in the paper.

For every variant of ``maopd.pipeline.config.VARIANT_METHODS`` the Stage II config of the default preset
is built with ``maopd.pipeline.config.stage_config`` and one tiny loss computation is run on a synthetic
batch (two trajectories, each with a Leader call, a Searcher call and two Answerer candidates; the
Teacher, when the config has one, disagrees with π_old), with exactly the config's
``AdvantageConfig`` and ``PPOLossConfig``. A term "gives Searcher tokens gradient" when its part
of the loss has a non-zero gradient on a Searcher token:

* ``opd``: the PPO surrogate with the OPD advantage (Eq. 5: the Searcher's estimator reads the Teacher,
  ``searcher_signal: opd``);
* ``grpo``: the PPO surrogate with an outcome (GRPO, Eq. 1) advantage on the Searcher (its estimator
  declares an outcome);
* ``entropy``: the entropy bonus (``ppo.entropy_coef``);
* ``kl_loss``: the direct KL loss toward π_T (``ppo.kl_loss_coef``);
* ``ptx``: PPO-ptx (``ptx.coef`` > 0): the NLL of π_0's demonstrations (``ptx_source:
  demonstrations``, whose calls include Searcher calls) on the shared policy; read from the config.

Plus ``leader_answerer_kl_in_reward``: whether the Leader and Answerer rewards carry the KL penalty
(the paper keeps it in every Table 3 variant; it gives Searcher tokens nothing), and
``kl_reference_pi_T``: whether the frozen model the trainer loads for the KL terms
(``maopd.training.model_loading.frozen_sources``) is π_T, the Stage I checkpoint ("The frozen reference
policy is the Stage-I Teacher π_T", whichever model the Searchers distil from).

``PAPER`` is the paper's definition (Stage II, "We update the student with the PPO clipped
objective with the advantages of Eq. (7) and an entropy bonus"; "No additional KL penalty is added
to their policy loss"; Table 3: "All variants retain the Leader and Answerer objectives"; "w/o
direct Searcher supervision" gives Searcher tokens no gradient from any term). ``DEPARTURES``
lists where the default preset's variants differ from it (empty: none does); their paper assertions
are ``xfail(strict=True)``. ``test_default_preset`` pins the default preset's behaviour (PAPER with
the departures flipped).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from maopd.envs.actions import LEADER, SEARCHER
from maopd.pipeline.config import VARIANT_METHODS, load_preset, stage_config
from maopd.training.advantages import team_token_advantages
from maopd.training.losses import ppo_loss
from maopd.training.model_loading import frozen_sources

STAGE1 = "<stage1>"  # the Stage I checkpoint the pipeline hands Stage II (π_T)

TERMS = ("opd", "grpo", "ptx", "entropy", "kl_loss", "leader_answerer_kl_in_reward", "kl_reference_pi_T")
_ALL_OFF = dict.fromkeys(TERMS, False)
# every Table 3 variant keeps the Leader/Answerer KL-in-reward, toward π_T
_KL_TO_PI_T = {"leader_answerer_kl_in_reward": True, "kl_reference_pi_T": True}
PAPER: dict[str, dict[str, bool | None]] = {
    "full": {**_ALL_OFF, "opd": True, "entropy": True, **_KL_TO_PI_T},
    "outcome_searcher_rl": {**_ALL_OFF, "grpo": True, "entropy": True, **_KL_TO_PI_T},
    # π_0 is the Teacher the Searchers distil from; π_T stays the KL reference
    "base_model_teacher": {**_ALL_OFF, "opd": True, "entropy": True, **_KL_TO_PI_T},
    # "w/o direct Searcher supervision": no term at all gives Searcher tokens gradient
    "no_searcher_supervision": {**_ALL_OFF, **_KL_TO_PI_T},
    # the Prompted Critic is a Table 1 baseline: GRPO on its critic reward; the paper does not say
    # whether its Leader/Answerer rewards carry the KL penalty, nor toward what (None: not asserted)
    "prompted_critic": {
        **_ALL_OFF,
        "grpo": True,
        "entropy": True,
        "leader_answerer_kl_in_reward": None,
        "kl_reference_pi_T": None,
    },
}

# Where the default preset's variants depart from the paper (none does); such an entry makes the
# paper assertion an xfail(strict=True), so a change that fixes it must remove the entry.
DEPARTURES: dict[tuple[str, str], str] = {}


def default_preset(variant: str, term: str) -> bool | None:
    paper = PAPER[variant][term]
    return (not paper) if (variant, term) in DEPARTURES else paper


_GRADIENTS: dict[tuple[str, tuple[str, ...]], dict[str, bool]] = {}


def searcher_gradients(variant: str, overrides: tuple[str, ...] = ()) -> dict[str, bool]:
    """The terms of ``TERMS`` that are active in the default preset's Stage II config of ``variant``
    (with pipeline ``overrides``, ``stage2.ppo.entropy_coef=0.01``)."""
    key = (variant, overrides)
    if key in _GRADIENTS:
        return _GRADIENTS[key]
    pipeline = load_preset("default", list(overrides))
    config = stage_config(pipeline, "stage2", variant, Path("<π_0>"), Path(STAGE1))
    torch.manual_seed(0)
    # two trajectories of one question: Leader, Searcher, Answerer candidates 0 and 1
    role_ids = torch.tensor([0, 1, 2, 2, 0, 1, 2, 2])
    traj_index = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    candidate_index = torch.tensor([0, 0, 0, 1, 0, 0, 0, 1])
    mask = torch.ones(8, 4, dtype=torch.bool)
    old = -torch.rand(8, 4) - 0.1
    has_teacher = config.teacher.source != "none"
    teacher = old - torch.rand(8, 4) if has_teacher else None
    advantages = team_token_advantages(
        role_ids=role_ids,
        traj_index=traj_index,
        candidate_index=candidate_index,
        response_mask=mask,
        old_logprobs=old,
        teacher_logprobs=teacher,
        leader_rewards=torch.tensor([[1.0, 0.1]]),
        answerer_rewards=torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]),
        searcher_rewards=torch.tensor([[0.9, 0.1]]),
        final_em=torch.tensor([[1.0, 0.0]]),
        candidate_mask=torch.ones(1, 2, 2, dtype=torch.bool),
        config=config.advantage,
    ).token_advantages
    searcher = role_ids == SEARCHER

    def searcher_grad(advantage: torch.Tensor, entropy_coef: float, kl_loss_coef: float) -> bool:
        logprobs = old.clone().requires_grad_(True)
        entropy = torch.rand(8, 4).requires_grad_(True)
        ppo = replace(config.ppo, entropy_coef=entropy_coef, kl_loss_coef=kl_loss_coef)
        terms = ppo_loss(
            logprobs,
            old,
            advantage,
            mask,
            role_ids,
            ppo,
            entropy=entropy,
            ref_logprobs=teacher if kl_loss_coef > 0 else None,
        )
        terms.loss.backward()
        grads = [g[searcher] for g in (logprobs.grad, entropy.grad) if g is not None]
        return any(bool(g.abs().sum() > 0) for g in grads)

    surrogate = searcher_grad(advantages, 0.0, 0.0)
    needs = config.advantage.needs("searcher")
    # the Leader's advantage moves with the Teacher's log-probs exactly when KL enters its reward
    # (two trajectories with equal rewards, so that the group normalisation cannot hide the penalty)
    kl_in_reward = False
    if has_teacher and config.advantage.kl_in_reward_coef > 0:

        def leader_advantages(teacher_logprobs):
            return team_token_advantages(
                role_ids=role_ids,
                traj_index=traj_index,
                candidate_index=candidate_index,
                response_mask=mask,
                old_logprobs=old,
                teacher_logprobs=teacher_logprobs,
                leader_rewards=torch.tensor([[0.5, 0.5]]),
                answerer_rewards=torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]),
                searcher_rewards=torch.tensor([[0.9, 0.1]]),
                final_em=torch.tensor([[1.0, 0.0]]),
                candidate_mask=torch.ones(1, 2, 2, dtype=torch.bool),
                config=config.advantage,
            ).token_advantages[role_ids == LEADER]

        kl_in_reward = not torch.equal(leader_advantages(teacher), leader_advantages(old - 3 * torch.rand(8, 4)))
    zero = torch.zeros_like(advantages)
    _GRADIENTS[key] = {
        "opd": surrogate and needs.teacher,
        "grpo": surrogate and needs.outcome is not None,
        "entropy": config.ppo.entropy_coef > 0 and searcher_grad(zero, config.ppo.entropy_coef, 0.0),
        "kl_loss": has_teacher and config.ppo.kl_loss_coef > 0 and searcher_grad(zero, 0.0, config.ppo.kl_loss_coef),
        # PPO-ptx leaves out the calls of a role whose loss weight is 0 (maopd.training.ptx.PtxData)
        "ptx": config.ptx.coef > 0 and config.ppo.role_loss_weights.get("searcher", 1.0) != 0,
        "leader_answerer_kl_in_reward": kl_in_reward,
        "kl_reference_pi_T": frozen_sources(config)[1] == "checkpoint" and config.teacher.path == STAGE1,
    }
    return _GRADIENTS[key]


def test_the_probe_sees_each_term_when_it_is_on():
    on = (
        "stage2.ppo.entropy_coef=0.01",
        "stage2.ppo.kl_loss_coef=0.01",
        "stage2.ptx.coef=0",
        "stage2.advantage.kl_in_reward_coef=0",
    )
    full = searcher_gradients("full", on)
    assert full == {
        "opd": True,
        "grpo": False,
        "ptx": False,
        "entropy": True,
        "kl_loss": True,
        "leader_answerer_kl_in_reward": False,
        "kl_reference_pi_T": True,  # the KL loss reads π_T
    }
    # a role weight of 0 removes every loss term of Searcher tokens
    assert not any(
        searcher_gradients("no_searcher_supervision", on)[term] for term in ("opd", "grpo", "entropy", "kl_loss")
    )


def test_the_tables_cover_every_variant_and_term():
    assert set(PAPER) == set(VARIANT_METHODS)
    assert all(set(row) == set(TERMS) for row in PAPER.values())
    assert all(variant in VARIANT_METHODS and term in TERMS for variant, term in DEPARTURES)


@pytest.mark.parametrize("variant", list(VARIANT_METHODS))
@pytest.mark.parametrize("term", TERMS)
def test_default_preset(variant, term):
    expected = default_preset(variant, term)
    if expected is None:
        pytest.skip("not stated")
    assert searcher_gradients(variant)[term] is expected


def _paper_cases():
    for variant in VARIANT_METHODS:
        for term in TERMS:
            if PAPER[variant][term] is None:
                continue
            reason = DEPARTURES.get((variant, term))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(variant, term, marks=marks, id=f"{variant}-{term}")


@pytest.mark.parametrize(("variant", "term"), list(_paper_cases()))
def test_paper_definition(variant, term):
    assert searcher_gradients(variant)[term] is PAPER[variant][term]
