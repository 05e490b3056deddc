"""Advantage estimators of the paper (Eq. 1, 5 and 7) as small pure functions over tensors.

Shapes (see docs/algorithms.md for the full layout):

* group rewards: [B, G] per trajectory-level role (B questions × G trajectories), and
  [B, G, n] for the Answerer (n candidates per answering request);
* sequences: N model calls padded to T tokens; ``role_ids`` [N] (0 Leader, 1 Searcher,
  2 Answerer, 3 the single agent's solver), ``traj_index`` [N] the flat trajectory index b·G + g of each call,
  ``candidate_index`` [N] the candidate j of each Answerer call (ignored for other roles);
* token tensors [N, T]: ``response_mask``, ``old_logprobs``, ``teacher_logprobs`` (the OPD
  Teacher's), ``reference_logprobs`` (the KL reference's, π_T).

``team_token_advantages`` composes the pieces for a PPO batch. The Searcher's learning signal is
the estimator registered under ``AdvantageConfig.searcher_signal`` in ``SEARCHER_ESTIMATORS``
(one signature: ``SearcherInputs -> [N, T]``), so every variant of the paper's Table 3 and Stage I
are the same code, and a new signal is one decorated function:

* ``"opd"``           Stage II, MultiAgent-OPD: Eq. 5 on every Searcher token;
* ``"grpo_final_em"`` "w/ outcome-based Searcher RL": Eq. 1 on the team outcome R_EM;
* ``"grpo_rs"``       Stage I (and Prompted Critic): Eq. 1 on the Searcher's own reward R_S;
* ``"none"``          "w/o direct Searcher supervision" (pair with ``role_loss_weights``
                      ``{"searcher": 0}`` in ``PPOLossConfig``).

``AdvantageConfig.zero_rl`` (a control, off by default) zeroes every token advantage afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from maopd.base.config import ConfigError, check_fields, checked
from maopd.envs.actions import ANSWERER, LEADER, SEARCHER, SOLVER
from maopd.training.losses import (
    check_finite,
    check_plugin_output,
    check_role_ids,
    kl_estimate,
    lookup,
    masked_where,
    registry_decorator,
)
from maopd.training.token_scoring import TokenBatch

GRPO_EPS = 1e-6
OPD_BETA = 0.01
KL_IN_REWARD_COEF = 1e-3
# The Searcher outcome that Eq. 1 normalises for each outcome-based signal (team_token_advantages).
SEARCHER_OUTCOMES = {"grpo_final_em": "final_em", "grpo_rs": "searcher_rewards"}


def grpo_advantages(
    rewards: torch.Tensor,
    valid_mask: torch.Tensor | None = None,
    *,
    eps: float = GRPO_EPS,
    unbiased_std: bool = False,
) -> torch.Tensor:
    """Eq. 1: Â_r,i = (R_r,i − μ_x,r) / (σ_x,r + ε), normalized over the **last** dimension.

    Call it once per role, so the normalization is role-separate: on [B, G] trajectory rewards
    the group is the G trajectories of question x; on the Answerer's [B, G, n] candidate rewards
    it is the n candidates of the parent workflow, giving Â_A,i,j.

    σ is the population standard deviation (divide by the group size) unless ``unbiased_std``.
    A group whose valid rewards are all equal (including a group with fewer than two valid
    entries) gets advantage exactly 0, not round-off divided by ε. Entries where ``valid_mask``
    is 0 are left out of μ and σ and get advantage 0.
    """
    rewards = rewards.float()
    valid = torch.ones_like(rewards, dtype=torch.bool) if valid_mask is None else valid_mask.bool()
    if valid.shape != rewards.shape:
        raise ValueError(f"valid_mask shape {list(valid.shape)} != rewards shape {list(rewards.shape)}")
    values = masked_where(valid, rewards)
    count = valid.sum(dim=-1, keepdim=True)
    mean = values.sum(dim=-1, keepdim=True) / count.clamp(min=1)
    deviation = masked_where(valid, values - mean)
    dof = count - 1 if unbiased_std else count
    std = (deviation.square().sum(dim=-1, keepdim=True) / dof.clamp(min=1)).sqrt()
    highest = torch.where(valid, values, -torch.inf).amax(dim=-1, keepdim=True)
    lowest = torch.where(valid, values, torch.inf).amin(dim=-1, keepdim=True)
    varies = highest > lowest
    return masked_where(valid & varies, deviation / (std + eps))


def opd_advantages(
    teacher_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    beta: float = OPD_BETA,
    log_ratio_clamp: float | None = None,
) -> torch.Tensor:
    """Eq. 5: Â^OPD_S,t = β · M_t · log(π_T(a_t|h_t) / π_old(a_t|h_t)), shape [N, T].

    ``mask`` is M_t: 1 only on Searcher-generated tokens (``searcher_token_mask``). The signal
    needs no group: it is non-zero even when all G trajectories of a question share an outcome.
    ``log_ratio_clamp`` (off by default, as in the paper) bounds |log ratio| before β is
    applied, for a Teacher that gives a sampled token a near-zero probability.
    """
    log_ratio = teacher_logprobs.float() - old_logprobs.float()
    if log_ratio_clamp is not None:
        log_ratio = log_ratio.clamp(-log_ratio_clamp, log_ratio_clamp)
    return masked_where(mask, beta * log_ratio)


def searcher_token_mask(role_ids: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """M_t of Eq. 4-5: generated tokens of Searcher sequences (passages and padding excluded)."""
    return response_mask.bool() & (role_ids == SEARCHER)[:, None]


def sequence_kl(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    estimator: str = "k1",
) -> torch.Tensor:
    """Σ_t KL estimate over each sequence's generated tokens: [N, T] → [N]."""
    mask = response_mask.bool()
    token_kl = kl_estimate(masked_where(mask, logprobs.float()), masked_where(mask, ref_logprobs.float()), estimator)
    return masked_where(mask, token_kl).sum(dim=-1)


def sum_into_groups(values: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """out[k] = Σ values[i] over the i with group_index[i] = k: [M] → [num_groups]."""
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, group_index, values)


@dataclass(frozen=True)
class SearcherInputs:
    """What a Searcher estimator reads: the batch's token tensors and the config.

    ``sequence_advantages`` [N] holds, on Searcher calls, the GRPO advantage of the Searcher
    outcome named by ``SEARCHER_OUTCOMES`` (0 for a signal without one).
    """

    role_ids: torch.Tensor
    response_mask: torch.Tensor
    old_logprobs: torch.Tensor
    teacher_logprobs: torch.Tensor | None
    sequence_advantages: torch.Tensor
    config: AdvantageConfig


SearcherEstimator = Callable[[SearcherInputs], torch.Tensor]
SEARCHER_ESTIMATORS: dict[str, SearcherEstimator] = {}
register_searcher_estimator = registry_decorator(SEARCHER_ESTIMATORS, "searcher estimator")


def get_searcher_estimator(name: str) -> SearcherEstimator:
    return lookup(SEARCHER_ESTIMATORS, "searcher estimator", name)


@register_searcher_estimator("opd")
def opd_searcher_advantages(inputs: SearcherInputs) -> torch.Tensor:
    """Eq. 5 on every Searcher token (MultiAgent-OPD, Stage II)."""
    mask = searcher_token_mask(inputs.role_ids, inputs.response_mask)
    if not bool(mask.any()):
        return torch.zeros(inputs.response_mask.shape, device=inputs.response_mask.device)
    if inputs.teacher_logprobs is None:
        raise ValueError("searcher_signal 'opd' needs teacher_logprobs")
    check_finite("teacher_logprobs", inputs.teacher_logprobs, role_ids=inputs.role_ids, mask=mask)
    check_finite("old_logprobs", inputs.old_logprobs, role_ids=inputs.role_ids, mask=mask)
    return opd_advantages(
        inputs.teacher_logprobs,
        inputs.old_logprobs,
        mask,
        beta=inputs.config.opd_beta,
        log_ratio_clamp=inputs.config.opd_log_ratio_clamp,
    )


@register_searcher_estimator("grpo_final_em")
@register_searcher_estimator("grpo_rs")
def outcome_searcher_advantages(inputs: SearcherInputs) -> torch.Tensor:
    """Eq. 1 on a Searcher outcome (R_EM or R_S), broadcast over the call's tokens (Eq. 7)."""
    return inputs.sequence_advantages.float()[:, None].expand_as(inputs.response_mask)


@register_searcher_estimator("none")
def no_searcher_advantages(inputs: SearcherInputs) -> torch.Tensor:
    """No Searcher signal ("w/o direct Searcher supervision")."""
    return torch.zeros(inputs.response_mask.shape, device=inputs.response_mask.device)


def assign_token_advantages(
    role_ids: torch.Tensor,
    response_mask: torch.Tensor,
    sequence_advantages: torch.Tensor,
    searcher_advantages: torch.Tensor,
) -> torch.Tensor:
    """Eq. 7: each token gets the advantage of the role that generated it. [N, T].

    Leader and Answerer tokens take their sequence's GRPO advantage (trajectory-level for the
    Leader, candidate-level for the Answerer, already resolved in ``sequence_advantages`` [N]).
    Searcher tokens take ``searcher_advantages`` [N, T], the output of the Searcher estimator.
    Tokens outside ``response_mask`` get 0.
    """
    num_sequences, num_tokens = response_mask.shape
    check_role_ids(role_ids, num_sequences)
    if sequence_advantages.shape != (num_sequences,):
        raise ValueError(
            f"sequence_advantages must have shape [{num_sequences}], got {list(sequence_advantages.shape)}"
        )
    if searcher_advantages.shape != response_mask.shape:
        raise ValueError(
            f"searcher_advantages must have shape {list(response_mask.shape)}, got {list(searcher_advantages.shape)}"
        )
    broadcast = sequence_advantages.float()[:, None].expand(-1, num_tokens)
    is_searcher = (role_ids == SEARCHER)[:, None]
    return masked_where(response_mask, torch.where(is_searcher, searcher_advantages.float(), broadcast))


@dataclass
class AdvantageConfig:
    """How token advantages are built; see docs/algorithms.md."""

    searcher_signal: str = checked(
        "opd",
        help="The Searchers' learning signal, a key of SEARCHER_ESTIMATORS: opd (Eq. 5, distilled from the "
        "Teacher), grpo_final_em (Eq. 1 on the team outcome R_EM), grpo_rs (Eq. 1 on the Searcher's own reward "
        "R_S) or none (no Searcher signal); plug-ins may register more.",
    )
    opd_beta: float = checked(
        OPD_BETA, ge=0, help="β of Eq. 5: the OPD advantage of a Searcher token is β·log(π_T/π_old)."
    )
    opd_log_ratio_clamp: float | None = checked(
        None,
        gt=0,
        null="no clamp",
        help="Bounds |log(π_T/π_old)| before β is applied, for a Teacher that gives a sampled token a near-zero "
        "probability; null: no clamp, as in the paper.",
    )
    kl_in_reward_coef: float = checked(
        KL_IN_REWARD_COEF,
        ge=0,
        help="The coefficient of the KL(π_old‖π_T) penalty subtracted from the Leader and Answerer rewards "
        "before Eq. 1; 0 turns it off.",
    )
    kl_in_reward_estimator: Literal["k1", "k2", "k3"] = checked(
        "k1",
        help="The per-token KL estimate that penalty sums over each sequence: k1 = log(π/π_ref), "
        "k2 = ½·log(π/π_ref)², k3 = ρ − 1 − log ρ with ρ = π_ref/π.",
    )
    grpo_eps: float = checked(GRPO_EPS, ge=0, help="ε of Eq. 1, added to the group's standard deviation.")
    grpo_unbiased_std: bool = checked(
        False,
        help="Eq. 1 divides by the sample standard deviation of the group (n − 1) instead of the population one (n).",
    )
    zero_rl: bool = checked(
        False,
        help="A control: every token advantage is set to 0 (GRPO and OPD alike), so only the terms outside the "
        "advantages (the entropy bonus, PPO-ptx, the KL loss) move the model. Group advantages and shaped rewards "
        "are still computed, for the logs.",
    )

    def __post_init__(self) -> None:
        if self.searcher_signal not in SEARCHER_ESTIMATORS:
            raise ConfigError(f"searcher_signal: {self.searcher_signal!r} is not one of {sorted(SEARCHER_ESTIMATORS)}")
        check_fields(self)
        if not isinstance(self.zero_rl, bool):
            raise ConfigError(f"zero_rl: must be true or false, got {self.zero_rl!r}")


@dataclass
class TeamAdvantages:
    """Output of ``team_token_advantages``; the extra tensors are for logging."""

    token_advantages: torch.Tensor  # [N, T], Eq. 7
    sequence_advantages: torch.Tensor  # [N], GRPO part (0 for Searchers without an outcome signal)
    group_advantages: dict[str, torch.Tensor]  # role → [B, G] or [B, G, n]
    shaped_rewards: dict[str, torch.Tensor]  # role → rewards after the KL-in-reward penalty


def _kl_shaped_rewards(
    rewards: torch.Tensor,
    seq_kl: torch.Tensor,
    selected: torch.Tensor,
    flat_index: torch.Tensor,
    coef: float,
) -> torch.Tensor:
    """rewards − coef · (Σ of the selected sequences' KL in each reward slot)."""
    kl = sum_into_groups(seq_kl[selected], flat_index[selected], rewards.numel())
    return rewards - coef * kl.reshape(rewards.shape)


def _check_index(name: str, index: torch.Tensor, size: int, role: str) -> None:
    if index.numel() and not bool(((index >= 0) & (index < size)).all()):
        raise ValueError(f"{name} of the {role} sequences must lie in 0..{size - 1}")


def team_token_advantages(
    *,
    role_ids: torch.Tensor,
    traj_index: torch.Tensor,
    candidate_index: torch.Tensor,
    response_mask: torch.Tensor,
    old_logprobs: torch.Tensor,
    teacher_logprobs: torch.Tensor | None,
    leader_rewards: torch.Tensor | None,
    answerer_rewards: torch.Tensor | None,
    searcher_rewards: torch.Tensor | None = None,
    final_em: torch.Tensor | None = None,
    solver_rewards: torch.Tensor | None = None,
    trajectory_mask: torch.Tensor | None = None,
    candidate_mask: torch.Tensor | None = None,
    config: AdvantageConfig | None = None,
    reference_logprobs: torch.Tensor | None = None,
) -> TeamAdvantages:
    """Token advantages of a team PPO batch: KL-in-reward, Eq. 1 per role, Eq. 5, Eq. 7.

    ``teacher_logprobs`` are the OPD Teacher's (Eq. 5, Searcher rows); ``reference_logprobs`` the
    KL reference's (the KL-in-reward, Leader and Answerer rows), None when one model is both, as π_T
    is in the paper: then the KL reads ``teacher_logprobs``.

    ``leader_rewards`` [B, G] (R_L, Eq. 6), ``answerer_rewards`` [B, G, n] (c_ij),
    ``searcher_rewards`` [B, G] (R_S; for ``"grpo_rs"``), ``final_em`` [B, G] (R_EM; for
    ``"grpo_final_em"``), ``solver_rewards`` [B, G] (R_solver of the single-agent baseline: its
    tokens get Eq. 1 on it, as Search-R1 trains its agent with GRPO on the outcome, and no
    KL-in-reward, since no Teacher exists for it). A role's rewards may be None when the batch has no sequence of it
    (e.g. no Leader in Stage I). ``trajectory_mask`` [B, G] / ``candidate_mask`` [B, G, n] drop
    entries from the GRPO statistics. ``candidate_index`` is read for Answerer sequences only.
    The KL penalty of trajectory i's Leader reward sums the KL of all its Leader calls; that of
    candidate (i, j) is the KL of the Answerer call that produced it.
    """
    config = config or AdvantageConfig()
    num_sequences = response_mask.shape[0]
    check_role_ids(role_ids, num_sequences)
    for name, tensor in (("traj_index", traj_index), ("candidate_index", candidate_index)):
        if tensor.shape != (num_sequences,):
            raise ValueError(f"{name} must have shape [{num_sequences}], got {list(tensor.shape)}")
    signal = config.searcher_signal
    outcomes = {"final_em": final_em, "searcher_rewards": searcher_rewards}
    # role → (rewards, flat index of each sequence's reward slot, GRPO valid mask)
    groups_in: dict[str, tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]] = {
        "leader": (leader_rewards, traj_index, trajectory_mask),
        "answerer": (
            answerer_rewards,
            traj_index * (answerer_rewards.shape[-1] if answerer_rewards is not None else 1) + candidate_index,
            candidate_mask,
        ),
        "solver": (solver_rewards, traj_index, trajectory_mask),
    }
    if signal in SEARCHER_OUTCOMES:
        groups_in["searcher"] = (outcomes[SEARCHER_OUTCOMES[signal]], traj_index, trajectory_mask)
    role_of = {"leader": LEADER, "searcher": SEARCHER, "answerer": ANSWERER, "solver": SOLVER}

    use_kl = config.kl_in_reward_coef > 0 and bool(((role_ids == LEADER) | (role_ids == ANSWERER)).any())
    reference, reference_name = (teacher_logprobs, "teacher_logprobs")
    if reference_logprobs is not None:
        reference, reference_name = (reference_logprobs, "reference_logprobs")
    if use_kl and reference is None:
        raise ValueError("kl_in_reward_coef > 0 needs the KL reference's log-probs; set it to 0 without a Teacher")
    seq_kl = None
    if use_kl:
        penalized = response_mask.bool() & ((role_ids == LEADER) | (role_ids == ANSWERER))[:, None]
        check_finite(reference_name, reference, role_ids=role_ids, mask=penalized)
        check_finite("old_logprobs", old_logprobs, role_ids=role_ids, mask=penalized)
        seq_kl = sequence_kl(old_logprobs, reference, response_mask, config.kl_in_reward_estimator)

    sequence_advantages = torch.zeros(num_sequences, dtype=torch.float32, device=response_mask.device)
    shaped: dict[str, torch.Tensor] = {}
    groups: dict[str, torch.Tensor] = {}
    for name, (rewards, flat_index, valid) in groups_in.items():
        selected = role_ids == role_of[name]
        if rewards is None:
            if bool(selected.any()):
                needed = SEARCHER_OUTCOMES[signal] if name == "searcher" else f"{name}_rewards"
                raise ValueError(f"the batch has {name} sequences but {needed} is None")
            continue
        num_trajectories = rewards.numel() // (rewards.shape[-1] if name == "answerer" else 1)
        _check_index("traj_index", traj_index[selected], num_trajectories, name)
        if name == "answerer":
            _check_index("candidate_index", candidate_index[selected], rewards.shape[-1], name)
        rewards = rewards.float()
        if seq_kl is not None and name in ("leader", "answerer"):  # the KL-in-reward is theirs only
            rewards = _kl_shaped_rewards(rewards, seq_kl, selected, flat_index, config.kl_in_reward_coef)
        check_finite(f"{name} rewards", rewards, role=name)
        advantages = grpo_advantages(rewards, valid, eps=config.grpo_eps, unbiased_std=config.grpo_unbiased_std)
        shaped[name], groups[name] = rewards, advantages
        sequence_advantages[selected] = advantages.reshape(-1)[flat_index[selected]]

    searcher = get_searcher_estimator(signal)(
        SearcherInputs(role_ids, response_mask, old_logprobs, teacher_logprobs, sequence_advantages, config)
    )
    searcher_tokens = searcher_token_mask(role_ids, response_mask)
    shape = tuple(response_mask.shape)
    check_plugin_output("searcher estimator", signal, "the Searcher tokens", searcher, shape, searcher_tokens)
    token_advantages = assign_token_advantages(role_ids, response_mask, sequence_advantages, searcher)
    check_finite("token advantages", token_advantages, role_ids=role_ids, mask=response_mask)
    if config.zero_rl:
        token_advantages = torch.zeros_like(token_advantages)
        sequence_advantages = torch.zeros_like(sequence_advantages)
    return TeamAdvantages(token_advantages, sequence_advantages, groups, shaped)


@dataclass
class PPOBatch:
    """Everything the update needs, one row per model call (CPU tensors)."""

    tokens: TokenBatch
    role_ids: torch.Tensor  # [N]
    old_logprobs: torch.Tensor  # [N, T]
    teacher_logprobs: torch.Tensor | None  # [N, T], the OPD Teacher's on the rows it scored
    advantages: TeamAdvantages
    reference_logprobs: torch.Tensor | None = None  # [N, T], the KL reference's on reference_rows
    reference_rows: torch.Tensor | None = None  # [N] bool

    @property
    def num_sequences(self) -> int:
        return int(self.role_ids.shape[0])
