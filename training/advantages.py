"""Advantage estimators of the paper (Eq. 1, 5 and 7) as small pure functions over tensors.

Shapes (see docs/algorithms.md for the full layout):

* group rewards: [B, G] per trajectory-level role (B questions × G trajectories), and
  [B, G, n] for the Answerer (n candidates per answering request);
* sequences: N model calls padded to T tokens; ``role_ids`` [N] (``maopd.envs.team.role_id``: 0 Leader,
  1 Searcher, 2 Answerer, 3 the single agent's solver, then the roles a workflow registers),
  ``traj_index`` [N] the flat trajectory index b·G + g of each call,
  ``candidate_index`` [N] the candidate j of each Answerer call (ignored for other roles);
* token tensors [N, T]: ``response_mask``, ``old_logprobs``, ``teacher_logprobs`` (the OPD
  Teacher's), ``reference_logprobs`` (the KL reference's, π_T).

``team_token_advantages`` composes the pieces for a PPO batch. Each role's learning signal is the
estimator named by its entry of the per-role map (``AdvantageConfig.roles``, the fields
``advantage.<role>_signal``) in ``ADVANTAGE_ESTIMATORS``: one signature, ``EstimatorInputs -> [N, T]``,
and a declaration of what it reads (``maopd.training.signals.Needs``: the Teacher's log-probs, the
outcome Eq. 1 normalises first). The trainer loads and passes exactly what the configured
estimators declare, so every variant of the paper's Table 3 and Stage I are presets over the map
(``maopd.training.config``), and a new signal is one decorated function:

* ``"grpo"``          Eq. 1 on the role's own reward (the Leader's R_L, the Answerer's c_ij, ...);
* ``"opd"``           Eq. 5 on every token of the role (the Searchers of MultiAgent-OPD, Stage II);
* ``"grpo_final_em"`` Eq. 1 on the team outcome R_EM ("w/ outcome-based Searcher RL");
* ``"grpo_rs"``       Eq. 1 on the Searchers' reward R_S (Stage I, the Prompted Critic);
* ``"none"``          no signal ("w/o direct Searcher supervision"; pair with ``role_loss_weights``
                      ``{"searcher": 0}`` in ``PPOLossConfig``);
* ``"grpo_agentwise"`` / ``"grpo_agentwise_final_em"`` Dr. MAS's agent-wise normalisation: Eq. 1
                      over every call of the role on the question, on its own reward or on R_EM.

A role a workflow registers beyond the built-in four learns by ``advantage.role_signals[role]``,
``grpo`` when it is not named; its own rewards come in ``role_rewards``.

``AdvantageConfig.zero_rl`` (a control, off by default) zeroes every token advantage afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from maopd.base.config import ConfigError, check_fields, checked
from maopd.envs import team
from maopd.envs.roles import ROLES
from maopd.training.losses import (
    check_finite,
    check_plugin_output,
    check_role_ids,
    kl_estimate,
    lookup,
    masked_where,
)
from maopd.training.signals import Declared, Needs, needs_registry_decorator
from maopd.training.token_scoring import TokenBatch

GRPO_EPS = 1e-6
OPD_BETA = 0.01
KL_IN_REWARD_COEF = 1e-3
# What an estimator may declare as its outcome (Needs.outcome): the role's own reward, the team
# outcome R_EM, or the Searchers' reward R_S; each names the rewards argument of team_token_advantages
# it reads ("own": "<role>_rewards").
OUTCOMES = ("own", "final_em", "searcher_rewards")
# The roles whose rewards carry the KL-in-reward penalty (paper, Stage II: the Leader and the Answerer).
KL_IN_REWARD_ROLES = ("leader", "answerer")


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


def role_token_mask(role_ids: torch.Tensor, response_mask: torch.Tensor, role: str) -> torch.Tensor:
    """Generated tokens of ``role``'s sequences (prompts, passages and padding excluded); for the
    Searcher, M_t of Eq. 4-5."""
    return response_mask.bool() & (role_ids == team.role_id(role))[:, None]


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
class EstimatorInputs:
    """What an advantage estimator reads for one role: the batch's token tensors and the config.

    ``role`` names the role whose tokens it gives advantages (``mask``); rows of other roles are
    ignored. ``teacher_logprobs`` [N, T] are the Teacher's when the estimator declared
    ``Needs(teacher=True)`` (finite on the role's tokens), else None. ``sequence_advantages`` [N]
    holds, on the role's calls, Eq. 1's advantage of the outcome it declared (0 elsewhere, and
    everywhere for an estimator without one); ``sequence_outcomes`` [N] that outcome itself, the
    reward of each call's trajectory (or candidate) before Eq. 1; ``question_index`` [N] the
    question b of each call.
    """

    role: str
    role_ids: torch.Tensor
    response_mask: torch.Tensor
    old_logprobs: torch.Tensor
    teacher_logprobs: torch.Tensor | None
    sequence_advantages: torch.Tensor
    config: AdvantageConfig
    sequence_outcomes: torch.Tensor
    question_index: torch.Tensor

    @property
    def mask(self) -> torch.Tensor:
        """[N, T] bool: the role's generated tokens."""
        return role_token_mask(self.role_ids, self.response_mask, self.role)


ADVANTAGE_ESTIMATORS: dict[str, Declared] = {}
_register = needs_registry_decorator(ADVANTAGE_ESTIMATORS, "advantage estimator")


def register_advantage_estimator(name: str, needs: Needs = Needs()):
    """``@register_advantage_estimator(name, Needs(...))``: a role's learning signal, a function
    ``EstimatorInputs -> [N, T]``, selectable as ``advantage.<role>_signal: name``."""
    decorate = _register(name, needs)
    if needs.outcome not in (None, *OUTCOMES):
        raise ValueError(
            f"advantage estimator {name!r}: outcome must be None or one of {OUTCOMES}, got {needs.outcome!r}"
        )
    return decorate


def get_advantage_estimator(name: str) -> Declared:
    """The estimator registered as ``name`` (call it; ``.needs`` is its declaration)."""
    return lookup(ADVANTAGE_ESTIMATORS, "advantage estimator", name)


def outcome_argument(role: str, needs: Needs) -> str | None:
    """The rewards argument of ``team_token_advantages`` that Eq. 1 normalises for an estimator of
    ``role`` declaring ``needs`` (None: no outcome)."""
    return f"{role}_rewards" if needs.outcome == "own" else needs.outcome


@register_advantage_estimator("opd", Needs(teacher=True))
def opd_role_advantages(inputs: EstimatorInputs) -> torch.Tensor:
    """Eq. 5 on every token of the role: β·log(π_T/π_old) (MultiAgent-OPD's Searchers, Stage II)."""
    check_finite("old_logprobs", inputs.old_logprobs, role_ids=inputs.role_ids, mask=inputs.mask)
    return opd_advantages(
        inputs.teacher_logprobs,
        inputs.old_logprobs,
        inputs.mask,
        beta=inputs.config.opd_beta,
        log_ratio_clamp=inputs.config.opd_log_ratio_clamp,
    )


@register_advantage_estimator("grpo", Needs(outcome="own"))
@register_advantage_estimator("grpo_final_em", Needs(outcome="final_em"))
@register_advantage_estimator("grpo_rs", Needs(outcome="searcher_rewards"))
def outcome_advantages(inputs: EstimatorInputs) -> torch.Tensor:
    """Eq. 1 on the declared outcome, broadcast over the call's tokens (Eq. 7): ``grpo`` on the
    role's own reward (trajectory-level Â_L,i for the Leader, candidate-level Â_A,i,j for the
    Answerer), ``grpo_final_em`` on R_EM, ``grpo_rs`` on R_S (on a Searcher, the same as ``grpo``)."""
    return inputs.sequence_advantages.float()[:, None].expand_as(inputs.response_mask)


@register_advantage_estimator("none")
def no_advantages(inputs: EstimatorInputs) -> torch.Tensor:
    """No signal ("w/o direct Searcher supervision")."""
    return torch.zeros(inputs.response_mask.shape, device=inputs.response_mask.device)


@register_advantage_estimator("grpo_agentwise", Needs(outcome="own"))
@register_advantage_estimator("grpo_agentwise_final_em", Needs(outcome="final_em"))
def agentwise_advantages(inputs: EstimatorInputs) -> torch.Tensor:
    """Dr. MAS's agent-wise normalisation (Feng et al., 2026): Eq. 1 with one group per question
    and role, whose members are the role's *calls* on the question across its G workflows, not
    its workflows (``langfengQ/DrMAS``, ``compute_grpo_outcome_advantage`` with
    ``group_by_agent_id``). Each call's score is its trajectory's declared outcome; the
    standard deviation is the sample one, as ``torch.std`` there, and a group of one call gets
    its raw score. Broadcast over the call's tokens."""
    calls = inputs.role_ids == team.role_id(inputs.role)
    advantages = torch.zeros(inputs.role_ids.shape, dtype=torch.float32, device=inputs.role_ids.device)
    for question in inputs.question_index[calls].unique():
        members = calls & (inputs.question_index == question)
        scores = inputs.sequence_outcomes[members].float()
        if len(scores) == 1:
            advantages[members] = scores
            continue
        advantages[members] = (scores - scores.mean()) / (scores.std() + inputs.config.grpo_eps)
    return advantages[:, None].expand_as(inputs.response_mask)


def assign_token_advantages(
    role_ids: torch.Tensor, response_mask: torch.Tensor, role_advantages: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Eq. 7: each token gets the advantage of the role that generated it. [N, T].

    ``role_advantages`` maps a role to its estimator's [N, T] output, of which the role's rows are
    read; a role missing from it, and every token outside ``response_mask``, gets 0.
    """
    check_role_ids(role_ids, response_mask.shape[0])
    assigned = torch.zeros(response_mask.shape, dtype=torch.float32, device=response_mask.device)
    for role, values in role_advantages.items():
        if values.shape != response_mask.shape:
            raise ValueError(
                f"the {role} advantages must have shape {list(response_mask.shape)}, got {list(values.shape)}"
            )
        assigned = torch.where((role_ids == team.role_id(role))[:, None], values.float(), assigned)
    return masked_where(response_mask, assigned)


# The per-role map's defaults: MultiAgent-OPD's Stage II (paper, Eq. 7), the Leader and the Answerer
# learning by GRPO on their own rewards (Eq. 1), the Searchers by on-policy distillation (Eq. 5). Stage I
# and the variants are presets over the map (maopd.training.config.STAGE_SETTINGS, VARIANT_SETTINGS).
DEFAULT_SIGNALS = {"leader": "grpo", "searcher": "opd", "answerer": "grpo", "solver": "grpo"}
_ESTIMATORS_HELP = (
    "a key of ADVANTAGE_ESTIMATORS: grpo (Eq. 1 on the role's own reward), opd (Eq. 5, distilled from the "
    "Teacher), grpo_final_em (Eq. 1 on the team outcome R_EM), grpo_rs (Eq. 1 on the Searchers' reward R_S) or "
    "none; plug-ins may register more."
)


def _signal_field(role: str, help: str, record_default: bool = False):
    """The ``<role>_signal`` field, by default ``DEFAULT_SIGNALS[role]`` (read when a config is
    built, so that the table is the one place the defaults are named)."""
    return checked(
        default_factory=lambda: DEFAULT_SIGNALS[role],
        help=f"{help}, {_ESTIMATORS_HELP}",
        record_default=record_default,
    )


@dataclass
class AdvantageConfig:
    """How token advantages are built; see docs/algorithms.md.

    The ``<role>_signal`` fields are the per-role map (``roles``): each names the estimator that
    gives the role's tokens their advantages. ``searcher_signal`` is written in every run record;
    the other roles', added later, only where they differ from their default, so that the record
    of a run that leaves them alone is the file it was before they existed.
    """

    leader_signal: str = _signal_field("leader", "The Leader's learning signal (default grpo: Eq. 1 on R_L, Eq. 6)")
    searcher_signal: str = _signal_field(
        "searcher", "The Searchers' learning signal (default opd: Eq. 5, distilled from the Teacher)", True
    )
    answerer_signal: str = _signal_field(
        "answerer", "The Answerer's learning signal (default grpo: Eq. 1 on c_ij over its workflow's candidates)"
    )
    solver_signal: str = _signal_field(
        "solver", "The single agent's learning signal, stage single (default grpo: Eq. 1 on its outcome, as Search-R1)"
    )
    role_signals: dict[str, str] = checked(
        default_factory=dict,
        record_default=False,
        help="The learning signals of roles a workflow registers beyond these four, e.g. {verifier: grpo_agentwise}; "
        f"a role not named learns by grpo; {_ESTIMATORS_HELP}",
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
        named = {**{role: getattr(self, f"{role}_signal") for role in ROLES}, **self.role_signals}
        for role, name in named.items():
            field = f"{role}_signal" if role in ROLES else f"role_signals.{role}"
            if name not in ADVANTAGE_ESTIMATORS:
                raise ConfigError(f"{field}: {name!r} is not one of {sorted(ADVANTAGE_ESTIMATORS)}")
        for role in self.role_signals:
            if role in ROLES:
                raise ConfigError(f"role_signals.{role}: set {role}_signal instead")
        check_fields(self)
        if not isinstance(self.zero_rl, bool):
            raise ConfigError(f"zero_rl: must be true or false, got {self.zero_rl!r}")

    @property
    def roles(self) -> dict[str, str]:
        """The per-role map: each registered role's estimator, by name (``role_signals`` for the
        roles beyond the built-in four, ``grpo`` where it names none)."""
        built_in = {role: getattr(self, f"{role}_signal") for role in ROLES}
        registered = {role: self.role_signals.get(role, "grpo") for role in team.role_names() if role not in ROLES}
        return {**built_in, **registered}

    def needs(self, role: str) -> Needs:
        """What ``role``'s estimator declared it needs."""
        return ADVANTAGE_ESTIMATORS[self.roles[role]].needs


@dataclass
class TeamAdvantages:
    """Output of ``team_token_advantages``; the extra tensors are for logging."""

    token_advantages: torch.Tensor  # [N, T], Eq. 7
    sequence_advantages: torch.Tensor  # [N], GRPO part (0 on the calls of a role whose estimator has no outcome)
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


def role_rows(role_ids: torch.Tensor, roles: Sequence[str]) -> torch.Tensor:
    """[N] bool: the sequences of any of ``roles``."""
    return torch.isin(role_ids, torch.tensor([team.role_id(role) for role in roles], dtype=role_ids.dtype))


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
    role_rewards: dict[str, torch.Tensor] | None = None,
    trajectory_mask: torch.Tensor | None = None,
    candidate_mask: torch.Tensor | None = None,
    config: AdvantageConfig | None = None,
    reference_logprobs: torch.Tensor | None = None,
) -> TeamAdvantages:
    """Token advantages of a team PPO batch: KL-in-reward, then for each role Eq. 1 on the outcome
    its estimator declares and the estimator itself (Eq. 1 or Eq. 5 in the paper), then Eq. 7.

    ``teacher_logprobs`` are the Teacher's, on the rows of the roles whose estimator declares
    ``Needs(teacher=True)`` (the Searchers' Eq. 5 in the paper); only those estimators receive them.
    ``reference_logprobs`` are the KL reference's (the KL-in-reward, Leader and Answerer rows), None
    when one model is both, as π_T is in the paper: then the KL reads ``teacher_logprobs``.

    The rewards an outcome names: ``leader_rewards`` [B, G] (R_L, Eq. 6), ``answerer_rewards``
    [B, G, n] (c_ij; Eq. 1 over the n candidates), ``searcher_rewards`` [B, G] (R_S),
    ``final_em`` [B, G] (R_EM), ``solver_rewards`` [B, G] (R_solver of the single-agent baseline,
    without KL-in-reward, since no Teacher exists for it), ``role_rewards`` {role: [B, G]} the own
    rewards of roles a workflow registers beyond the built-in four. Rewards may be None when the batch has
    no sequence of a role reading them (e.g. no Leader in Stage I). ``trajectory_mask`` [B, G] /
    ``candidate_mask`` [B, G, n] drop entries from the GRPO statistics. ``candidate_index`` is read
    for the Answerer's own rewards only. The KL penalty of trajectory i's Leader reward sums the KL
    of all its Leader calls; that of candidate (i, j) is the KL of the Answerer call that produced it.
    """
    config = config or AdvantageConfig()
    num_sequences = response_mask.shape[0]
    check_role_ids(role_ids, num_sequences)
    for name, tensor in (("traj_index", traj_index), ("candidate_index", candidate_index)):
        if tensor.shape != (num_sequences,):
            raise ValueError(f"{name} must have shape [{num_sequences}], got {list(tensor.shape)}")
    rewards_in = {
        "leader_rewards": leader_rewards,
        "searcher_rewards": searcher_rewards,
        "answerer_rewards": answerer_rewards,
        "solver_rewards": solver_rewards,
        "final_em": final_em,
        **{f"{role}_rewards": rewards for role, rewards in (role_rewards or {}).items()},
    }
    num_candidates = answerer_rewards.shape[-1] if answerer_rewards is not None else 1

    penalized_rows = role_rows(role_ids, KL_IN_REWARD_ROLES)
    use_kl = config.kl_in_reward_coef > 0 and bool(penalized_rows.any())
    reference, reference_name = (teacher_logprobs, "teacher_logprobs")
    if reference_logprobs is not None:
        reference, reference_name = (reference_logprobs, "reference_logprobs")
    if use_kl and reference is None:
        raise ValueError("kl_in_reward_coef > 0 needs the KL reference's log-probs; set it to 0 without a Teacher")
    seq_kl = None
    if use_kl:
        penalized = response_mask.bool() & penalized_rows[:, None]
        check_finite(reference_name, reference, role_ids=role_ids, mask=penalized)
        check_finite("old_logprobs", old_logprobs, role_ids=role_ids, mask=penalized)
        seq_kl = sequence_kl(old_logprobs, reference, response_mask, config.kl_in_reward_estimator)

    sequence_advantages = torch.zeros(num_sequences, dtype=torch.float32, device=response_mask.device)
    sequence_outcomes = torch.zeros(num_sequences, dtype=torch.float32, device=response_mask.device)
    question_index = torch.zeros_like(traj_index)
    shaped: dict[str, torch.Tensor] = {}
    groups: dict[str, torch.Tensor] = {}
    role_advantages: dict[str, torch.Tensor] = {}
    for role, name in config.roles.items():
        estimator = get_advantage_estimator(name)
        needs = estimator.needs
        selected = role_ids == team.role_id(role)
        argument = outcome_argument(role, needs)
        rewards = rewards_in.get(argument) if argument is not None else None
        if argument is not None and rewards is None and bool(selected.any()):
            raise ValueError(f"the batch has {role} sequences but {argument} is None")
        if rewards is not None:
            per_candidate = argument == "answerer_rewards"  # the only [B, G, n] rewards: c_ij
            flat_index = traj_index * num_candidates + candidate_index if per_candidate else traj_index
            num_trajectories = rewards.numel() // (num_candidates if per_candidate else 1)
            _check_index("traj_index", traj_index[selected], num_trajectories, role)
            if per_candidate:
                _check_index("candidate_index", candidate_index[selected], num_candidates, role)
            rewards = rewards.float()
            if seq_kl is not None and needs.outcome == "own" and role in KL_IN_REWARD_ROLES:
                rewards = _kl_shaped_rewards(rewards, seq_kl, selected, flat_index, config.kl_in_reward_coef)
            check_finite(f"{role} rewards", rewards, role=role)
            valid = candidate_mask if per_candidate else trajectory_mask
            advantages = grpo_advantages(rewards, valid, eps=config.grpo_eps, unbiased_std=config.grpo_unbiased_std)
            shaped[role], groups[role] = rewards, advantages
            sequence_advantages[selected] = advantages.reshape(-1)[flat_index[selected]]
            sequence_outcomes[selected] = rewards.reshape(-1)[flat_index[selected]]
            question_index[selected] = traj_index[selected] // rewards.shape[1]
        tokens = role_token_mask(role_ids, response_mask, role)
        if not bool(tokens.any()):
            continue
        teacher = None
        if needs.teacher:  # handed only to an estimator that declares it reads the Teacher
            if teacher_logprobs is None:
                raise ValueError(f"advantage estimator {name!r} of the {role} tokens needs teacher_logprobs")
            check_finite("teacher_logprobs", teacher_logprobs, role_ids=role_ids, mask=tokens)
            teacher = teacher_logprobs
        inputs = EstimatorInputs(
            role,
            role_ids,
            response_mask,
            old_logprobs,
            teacher,
            masked_where(selected, sequence_advantages),
            config,
            masked_where(selected, sequence_outcomes),
            question_index,
        )
        values = estimator(inputs)
        what = f"the {role} tokens"
        check_plugin_output("advantage estimator", name, what, values, tuple(response_mask.shape), tokens)
        role_advantages[role] = values
    token_advantages = assign_token_advantages(role_ids, response_mask, role_advantages)
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
