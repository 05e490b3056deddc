"""The PPO loss of the shared policy as small pure functions over token tensors.

Layout (shared with ``training/advantages.py``; see docs/algorithms.md). One PPO batch holds
N sequences (one model call each) padded to T tokens:

* ``logprobs`` [N, T]       log π_θ(a_t | h_t) of the sampled tokens under the current parameters
* ``old_logprobs`` [N, T]   the same under π_old, the policy that sampled the batch
* ``ref_logprobs`` [N, T]   the same under the frozen Teacher π_T (KL terms and metrics)
* ``advantages`` [N, T]     token advantages (Eq. 7, from ``assign_token_advantages``)
* ``loss_mask`` [N, T]      1 on the tokens that count in the loss denominator: tokens the
                            policy generated; 0 on prompts, retrieved passages and padding
* ``weight`` [N, T]         optional per-token multiplier of the numerator only. Weight 0 removes a
                            token's gradient but keeps it in the denominator, which is how the
                            "w/o direct Searcher supervision" variant (paper, Table 3) is written
* ``role_ids`` [N]          the role of each sequence, its id in the team vocabulary (``maopd.envs.team.role_id``)

Entries outside ``loss_mask`` may hold anything (padding garbage, -inf); they are replaced by
zeros before any arithmetic, so they can never reach a loss or a gradient as NaN.

The registries (``KL_ESTIMATORS``, ``LOSS_AGGREGATIONS``) follow verl's core_algos: a name in a
config selects a pure function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

import numpy as np
import torch

from maopd.base.config import ConfigError, check_fields, checked
from maopd.base.errors import UserError
from maopd.envs import team

# exp() of a log-ratio beyond ±20 (a factor of ~5e8) only happens for a stale or broken batch;
# clamping keeps the ratio finite in float32/bf16 without touching any realistic value.
LOG_RATIO_LIMIT = 20.0


class NonFiniteError(FloatingPointError):
    """A loss, advantage or reward holds NaN or inf. Names the tensor and the roles affected."""

    def __init__(self, tensor_name: str, roles: tuple[str, ...], count: int) -> None:
        self.tensor_name = tensor_name
        self.roles = roles
        self.count = count
        super().__init__(f"{tensor_name} has {count} non-finite (NaN or inf) value(s) in role(s): {', '.join(roles)}")


def check_finite(
    name: str,
    tensor: torch.Tensor,
    *,
    role_ids: torch.Tensor | None = None,
    role: str | None = None,
    mask: torch.Tensor | None = None,
) -> None:
    """Raise ``NonFiniteError`` if ``tensor`` holds NaN/inf where ``mask`` is 1.

    The roles are read from ``role_ids`` ([N], one per row of ``tensor``) when given, else taken
    from ``role`` (for group tensors such as the Leader's [B, G] rewards).
    """
    bad = ~torch.isfinite(tensor.detach())
    if mask is not None:
        bad &= mask.bool()
    count = int(bad.sum())
    if count == 0:
        return
    if role_ids is not None:
        bad_rows = bad.reshape(bad.shape[0], -1).any(dim=1)
        roles = tuple(role_name(int(r)) for r in torch.unique(role_ids[bad_rows]))
    else:
        roles = (role or "unspecified",)
    raise NonFiniteError(name, roles, count)


def role_name(role_id: int) -> str:
    roles = team.role_names()
    if not 0 <= role_id < len(roles):
        return f"unknown role id {role_id}"
    return roles[role_id]


def check_role_ids(role_ids: torch.Tensor, num_sequences: int) -> None:
    if role_ids.shape != (num_sequences,):
        raise ValueError(f"role_ids must have shape [{num_sequences}], got {list(role_ids.shape)}")
    roles = team.role_names()
    if role_ids.numel() and not bool(((role_ids >= 0) & (role_ids < len(roles))).all()):
        raise ValueError(f"role_ids must be in 0..{len(roles) - 1} ({', '.join(roles)})")


def masked_where(mask: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``values`` where ``mask`` is 1, else 0 (unlike ``values * mask``, NaN*0 cannot leak)."""
    return torch.where(mask.bool(), values, torch.zeros_like(values))


# --------------------------------------------------------------------------- KL estimators


def registry_decorator(registry: dict[str, Callable], kind: str):
    """``@register(name)`` adds a function to ``registry``; a name can be used once."""

    def register(name: str):
        def decorate(fn):
            if name in registry:
                raise ValueError(f"{kind} {name!r} is already registered")
            registry[name] = fn
            return fn

        return decorate

    return register


def lookup(registry: dict[str, Callable], kind: str, name: str) -> Callable:
    """The function registered as ``name``; an unknown name lists the known ones."""
    if name not in registry:
        raise ValueError(f"unknown {kind} {name!r}; choose one of {sorted(registry)}")
    return registry[name]


class PluginOutputError(UserError, ValueError):
    """A registered function (a credit-assignment method, a Searcher estimator) returned values
    the update cannot use; the message names the function and what was wrong."""


def check_plugin_output(
    kind: str,
    name: str,
    what: str,
    values: Any,
    shape: tuple[int, ...],
    mask: torch.Tensor | None = None,
    source: str | None = None,
) -> None:
    """``PluginOutputError`` unless ``values`` is an array or tensor of ``shape`` holding real
    numbers, finite where ``mask`` is 1 (everywhere without one). ``source``: the file that defines
    the plug-in, named after it.

    Checked where a plug-in's output enters the update, so that a wrong length or a NaN is one
    line naming the plug-in rather than a size mismatch or a sampling error far downstream.
    """

    def fail(problem: str) -> NoReturn:
        where = f" ({source})" if source else ""
        raise PluginOutputError(
            f"{kind} {name!r}{where} returned {problem} for {what}; expected finite real numbers of shape {list(shape)}"
        )

    if not isinstance(values, (torch.Tensor, np.ndarray)):
        fail(f"a {type(values).__name__}")
    if tuple(values.shape) != tuple(shape):
        fail(f"shape {list(values.shape)}")
    if isinstance(values, torch.Tensor):
        if values.dtype.is_complex or values.dtype == torch.bool:
            fail(f"dtype {values.dtype}")
        bad = ~torch.isfinite(values.detach())
    else:
        if values.dtype.kind not in "fiu":
            fail(f"dtype {values.dtype}")
        bad = torch.from_numpy(~np.isfinite(values))
    if mask is not None:
        bad &= mask.bool().to(bad.device)
    if bool(bad.any()):
        fail(f"{int(bad.sum())} non-finite value(s) (NaN or inf)")


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {}
register_kl_estimator = registry_decorator(KL_ESTIMATORS, "KL estimator")


@register_kl_estimator("k1")
def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = log π(a)/π_ref(a) for a ~ π: unbiased for KL(π‖π_ref), high variance, can be < 0.

    The right estimator for a KL penalty inside a *reward*: its score-function gradient is the
    gradient of KL(π‖π_ref) (Schulman, "Approximating KL divergence", 2020).
    """
    return logprobs - ref_logprobs


@register_kl_estimator("k2")
def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = ½ (log π(a)/π_ref(a))²: biased, low variance, ≥ 0."""
    return 0.5 * (logprobs - ref_logprobs).square()


@register_kl_estimator("k3")
def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = ρ − 1 − log ρ with ρ = π_ref(a)/π(a): unbiased for KL(π‖π_ref), low variance, ≥ 0.

    The log-ratio is clamped to ±LOG_RATIO_LIMIT before exp so the value stays finite.
    """
    log_rho = (ref_logprobs - logprobs).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return torch.exp(log_rho) - 1.0 - log_rho


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(π‖π_ref) at the sampled tokens with the named estimator."""
    return lookup(KL_ESTIMATORS, "KL estimator", estimator)(logprobs, ref_logprobs)


# --------------------------------------------------------------------------- loss aggregation

LossAggregation = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
LOSS_AGGREGATIONS: dict[str, LossAggregation] = {}
register_loss_aggregation = registry_decorator(LOSS_AGGREGATIONS, "loss_agg_mode")


def _num_sequences(loss_mask: torch.Tensor) -> torch.Tensor:
    """Sequences with at least one counted token; fully padded rows do not dilute a mean."""
    return loss_mask.any(dim=-1).sum().clamp(min=1)


@register_loss_aggregation("token-mean")
def token_mean(weighted_loss: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Σ_{i,t} w·ℓ / Σ_{i,t} m: every counted token of the batch has the same weight (default)."""
    return weighted_loss.sum() / loss_mask.sum().clamp(min=1)


@register_loss_aggregation("seq-mean-token-sum")
def seq_mean_token_sum(weighted_loss: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """mean_i Σ_t w·ℓ: long sequences weigh more, in proportion to their length."""
    return weighted_loss.sum() / _num_sequences(loss_mask)


@register_loss_aggregation("seq-mean-token-mean")
def seq_mean_token_mean(weighted_loss: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """mean_i (Σ_t w·ℓ / Σ_t m): every sequence has the same weight, whatever its length."""
    per_sequence = weighted_loss.sum(dim=-1) / loss_mask.sum(dim=-1).clamp(min=1)
    return per_sequence.sum() / _num_sequences(loss_mask)


@register_loss_aggregation("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(weighted_loss: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """mean_i Σ_t w·ℓ / T with T the padded length (Dr. GRPO's constant normalizer).

    Pad every batch to the same T (the generation budget) for the normalizer to be constant.
    """
    return weighted_loss.sum() / (_num_sequences(loss_mask) * loss_mask.shape[-1])


def aggregate_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    weight: torch.Tensor | None = None,
    mode: str = "token-mean",
) -> torch.Tensor:
    """Reduce a [N, T] token loss to a scalar. ``loss_mask`` sets the denominator; ``weight``
    scales the numerator only, so a weight-0 token adds nothing but still counts in the mean."""
    aggregation = lookup(LOSS_AGGREGATIONS, "loss_agg_mode", mode)
    if loss_mat.shape != loss_mask.shape:
        raise ValueError(f"loss_mask shape {list(loss_mask.shape)} != loss shape {list(loss_mat.shape)}")
    weighted = masked_where(loss_mask, loss_mat)
    if weight is not None:
        weighted = weighted * weight
    return aggregation(weighted, loss_mask.bool())


# --------------------------------------------------------------------------- token losses


def ppo_clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO loss −min(ρ·A, clip(ρ, 1−ε_low, 1+ε_high)·A) with ρ = π_θ/π_old.

    The clipped surrogate of Schulman et al. (2017) that both stages maximize with the token
    advantages of Eq. 7. Returns the [N, T] loss and a bool [N, T] of tokens where the clipped
    branch was taken (its gradient is zero there).
    """
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high) * advantages
    return -torch.minimum(unclipped, clipped), clipped < unclipped


def role_loss_weight(role_ids: torch.Tensor, num_tokens: int, role_weights: Mapping[str, float]):
    """[N, T] weights: ``role_weights[name]`` on every token of that role's sequences, 1 otherwise.

    ``{"searcher": 0.0}`` is the "w/o direct Searcher supervision" variant.
    """
    roles = team.role_names()
    unknown = sorted(set(role_weights) - set(roles))
    if unknown:
        raise ValueError(f"role_loss_weights: unknown role {unknown[0]!r}; roles are {roles}")
    per_role = torch.tensor([float(role_weights.get(name, 1.0)) for name in roles])
    return per_role.to(role_ids.device)[role_ids][:, None].expand(-1, num_tokens)


# --------------------------------------------------------------------------- the PPO loss


@dataclass
class PPOLossConfig:
    """Settings of the PPO update; see docs/algorithms.md."""

    clip_ratio_low: float = checked(
        0.2, ge=0, help="ε_low of the clipped surrogate: the ratio π_θ/π_old is clipped from below at 1 − ε_low."
    )
    clip_ratio_high: float = checked(
        0.2, ge=0, help="ε_high of the clipped surrogate: the ratio π_θ/π_old is clipped from above at 1 + ε_high."
    )
    entropy_coef: float = checked(
        1e-3,
        ge=0,
        help="The coefficient of the entropy bonus subtracted from the loss; 0 turns it off. The paper adds an "
        "entropy bonus without stating its coefficient: the default is this project's choice.",
    )
    kl_loss_coef: float = checked(
        0.0,
        ge=0,
        help="The coefficient of a direct KL loss toward the KL reference π_T; 0 (the default) turns it off: in the "
        "paper the Leader and Answerer KL enters the rewards (advantage.kl_in_reward_coef) and Searchers get none.",
    )
    kl_loss_estimator: Literal["k1", "k2", "k3"] = checked(
        "k3",
        help="The per-token KL estimate of the KL loss: k1 = log(π/π_ref), k2 = ½·log(π/π_ref)², "
        "k3 = ρ − 1 − log ρ with ρ = π_ref/π.",
    )
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = (
        checked(
            "token-mean",
            help="How token losses become one loss: token-mean (every counted token weighs the same), "
            "seq-mean-token-sum (a sequence weighs by its length), seq-mean-token-mean (every sequence weighs the "
            "same) or seq-mean-token-sum-norm (Dr. GRPO's constant normaliser, the padded length).",
        )
    )
    role_loss_weights: dict[str, float] = checked(
        default_factory=dict,
        help="Per-role weights of the loss, e.g. {searcher: 0.0} for 'w/o direct Searcher supervision'; a role "
        "weighted 0 gets no gradient while its tokens still count in the denominator. A role not named weighs 1.",
    )

    def __post_init__(self) -> None:
        check_fields(self)
        unknown = sorted(set(self.role_loss_weights) - set(team.role_names()))
        if unknown:
            raise ConfigError(f"role_loss_weights.{unknown[0]}: unknown role; roles are {team.role_names()}")
        for role, weight in self.role_loss_weights.items():
            if weight < 0:  # a negative weight would train the role away from its advantages
                raise ConfigError(f"role_loss_weights.{role}: must be >= 0 (0 leaves the role out), got {weight}")


@dataclass
class PPOLossTerms:
    """The scalar loss to backpropagate and the token tensors the metrics are computed from."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    entropy: torch.Tensor | None
    kl_loss: torch.Tensor | None
    token_policy_loss: torch.Tensor
    token_clipped: torch.Tensor


def ppo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    role_ids: torch.Tensor,
    config: PPOLossConfig | None = None,
    *,
    weight: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
) -> PPOLossTerms:
    """loss = agg(PPO surrogate) − entropy_coef·agg(H) + kl_loss_coef·agg(KL(π_θ‖π_T)).

    All three terms share ``loss_mask`` (denominator) and the numerator weight
    ``weight × role_loss_weight``, so a role weighted 0 loses its policy, entropy and KL losses
    together while its tokens stay in the denominator. ``entropy`` ([N, T], from
    ``maopd.training.token_scoring.score_tokens(..., with_entropy=True)``) is needed when
    ``entropy_coef > 0``; ``ref_logprobs`` when
    ``kl_loss_coef > 0``. Raises ``NonFiniteError`` naming the tensor and role on NaN/inf.
    """
    config = config or PPOLossConfig()
    num_sequences, num_tokens = logprobs.shape
    for name, tensor in (
        ("old_logprobs", old_logprobs),
        ("advantages", advantages),
        ("loss_mask", loss_mask),
    ):
        if tensor.shape != logprobs.shape:
            raise ValueError(f"{name} shape {list(tensor.shape)} != logprobs shape {list(logprobs.shape)}")
    check_role_ids(role_ids, num_sequences)
    mask = loss_mask.bool()
    for name, tensor in (
        ("logprobs", logprobs),
        ("old_logprobs", old_logprobs),
        ("advantages", advantages),
    ):
        check_finite(name, tensor, role_ids=role_ids, mask=mask)

    total_weight = role_loss_weight(role_ids, num_tokens, config.role_loss_weights).to(logprobs.dtype)
    if weight is not None:
        total_weight = total_weight * weight

    def aggregate(token_values: torch.Tensor) -> torch.Tensor:
        return aggregate_loss(token_values, mask, total_weight, config.loss_agg_mode)

    token_policy_loss, token_clipped = ppo_clipped_surrogate(
        masked_where(mask, logprobs),
        masked_where(mask, old_logprobs),
        masked_where(mask, advantages),
        config.clip_ratio_low,
        config.clip_ratio_high,
    )
    check_finite("policy loss", token_policy_loss, role_ids=role_ids, mask=mask)
    policy_loss = aggregate(token_policy_loss)
    loss = policy_loss

    mean_entropy = None
    if config.entropy_coef > 0:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs the token entropy tensor `entropy`")
        check_finite("entropy", entropy, role_ids=role_ids, mask=mask)
        mean_entropy = aggregate(masked_where(mask, entropy))
        loss = loss - config.entropy_coef * mean_entropy

    kl_loss = None
    if config.kl_loss_coef > 0:
        if ref_logprobs is None:
            raise ValueError("kl_loss_coef > 0 needs the Teacher's `ref_logprobs`")
        token_kl = kl_estimate(masked_where(mask, logprobs), masked_where(mask, ref_logprobs), config.kl_loss_estimator)
        check_finite("KL loss", token_kl, role_ids=role_ids, mask=mask)
        kl_loss = aggregate(token_kl)
        loss = loss + config.kl_loss_coef * kl_loss

    check_finite("total loss", loss, role="all")
    return PPOLossTerms(loss, policy_loss, mean_entropy, kl_loss, token_policy_loss, token_clipped)


# --------------------------------------------------------------------------- per-role metrics


def role_token_means(
    role_ids: torch.Tensor, loss_mask: torch.Tensor, token_values: Mapping[str, torch.Tensor]
) -> dict[str, float]:
    """``{"<role>/<name>": mean over that role's counted tokens}`` for every role present."""
    mask = loss_mask.bool()
    metrics = {}
    for role_id, name in enumerate(team.role_names()):
        role_mask = mask & (role_ids == role_id)[:, None]
        count = int(role_mask.sum())
        if count == 0:
            continue
        for metric, values in token_values.items():
            metrics[f"{name}/{metric}"] = float(masked_where(role_mask, values.detach().float()).sum()) / count
    return metrics


def ppo_role_metrics(
    role_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    terms: PPOLossTerms,
    *,
    ref_logprobs: torch.Tensor | None = None,
    ref_rows: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> dict[str, float]:
    """Per-role loss, clip fraction, approx KL to π_old and to the KL reference π_T (k3), entropy,
    mean advantage.

    Metrics use ``loss_mask`` only, not the loss weights, so a role trained with weight 0 is still
    observed. ``approx_kl_teacher`` is averaged over the rows ``ref_rows`` [N] (bool) says the
    reference scored (all when None), and absent for a role none of whose rows it scored. Keys look
    like ``"searcher/clip_frac"``.
    """
    mask = loss_mask.bool()
    logprobs, old_logprobs = masked_where(mask, logprobs), masked_where(mask, old_logprobs)
    values = {
        "policy_loss": terms.token_policy_loss,
        "clip_frac": terms.token_clipped.float(),
        "approx_kl_old": kl_k3(logprobs, old_logprobs),
        "advantage": advantages,
    }
    if entropy is not None:
        values["entropy"] = entropy
    metrics = role_token_means(role_ids, loss_mask, values)
    if ref_logprobs is not None:
        scored = mask if ref_rows is None else mask & ref_rows.to(mask.device)[:, None]
        kl = {"approx_kl_teacher": kl_k3(logprobs, masked_where(mask, ref_logprobs))}
        metrics.update(role_token_means(role_ids, scored, kl))
    return metrics
