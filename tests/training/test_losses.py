"""PPO loss, aggregation, KL estimators, per-role metrics and the NaN guard."""

import math

import pytest
import torch

from maopd.base.config import ConfigError, from_dict
from maopd.envs.actions import ANSWERER, LEADER, SEARCHER
from maopd.training.losses import (
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    NonFiniteError,
    PPOLossConfig,
    aggregate_loss,
    kl_estimate,
    ppo_clipped_surrogate,
    ppo_loss,
    ppo_role_metrics,
    register_kl_estimator,
    register_loss_aggregation,
    role_loss_weight,
)


def _batch(seed=0, n=4, t=5):
    generator = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, t, generator=generator) * 3
    logprobs = old + torch.randn(n, t, generator=generator) * 0.3
    advantages = torch.randn(n, t, generator=generator)
    mask = torch.ones(n, t)
    mask[0, 3:] = 0
    mask[2, :2] = 0
    mask[3, 4] = 0
    role_ids = torch.tensor([LEADER, SEARCHER, SEARCHER, ANSWERER])
    return logprobs, old, advantages, mask, role_ids


def _reference_surrogate(logprob, old, adv, low, high):
    ratio = math.exp(logprob - old)
    return -min(ratio * adv, min(max(ratio, 1 - low), 1 + high) * adv)


def _reference_loss(logprobs, old, adv, mask, weight, mode, low=0.2, high=0.2):
    """The aggregated PPO surrogate with explicit loops over sequences and tokens."""
    n, t = len(mask), len(mask[0])
    per_sequence_sum, per_sequence_count = [], []
    for i in range(n):
        total, count = 0.0, 0
        for j in range(t):
            if mask[i][j]:
                count += 1
                loss = _reference_surrogate(logprobs[i][j], old[i][j], adv[i][j], low, high)
                total += weight[i][j] * loss
        per_sequence_sum.append(total)
        per_sequence_count.append(count)
    sequences = sum(1 for c in per_sequence_count if c > 0)
    if mode == "token-mean":
        return sum(per_sequence_sum) / sum(per_sequence_count)
    if mode == "seq-mean-token-sum":
        return sum(per_sequence_sum) / sequences
    if mode == "seq-mean-token-mean":
        return sum(s / c for s, c in zip(per_sequence_sum, per_sequence_count) if c) / sequences
    return sum(per_sequence_sum) / (sequences * t)


@pytest.mark.parametrize("mode", sorted(LOSS_AGGREGATIONS))
def test_ppo_loss_equals_loop_reference(mode):
    logprobs, old, adv, mask, role_ids = _batch()
    weight = torch.rand(4, 5, generator=torch.Generator().manual_seed(3))
    config = PPOLossConfig(entropy_coef=0.0, loss_agg_mode=mode, clip_ratio_low=0.1, clip_ratio_high=0.3)
    terms = ppo_loss(logprobs, old, adv, mask, role_ids, config, weight=weight)
    expected = _reference_loss(
        logprobs.tolist(),
        old.tolist(),
        adv.tolist(),
        mask.tolist(),
        weight.tolist(),
        mode,
        0.1,
        0.3,
    )
    assert terms.loss.item() == pytest.approx(expected, rel=1e-5)


def test_clipped_surrogate_picks_the_pessimistic_branch():
    logprobs = torch.log(torch.tensor([[1.5, 1.5, 0.5, 0.5, 1.1]]))
    old = torch.zeros(1, 5)
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0, 2.0]])
    loss, clipped = ppo_clipped_surrogate(logprobs, old, adv, 0.2, 0.2)
    torch.testing.assert_close(loss, torch.tensor([[-1.2, 1.5, -0.5, 0.8, -2.2]]))
    assert clipped.tolist() == [[True, False, False, True, False]]


def test_gradients_flow_only_through_counted_weighted_tokens():
    logprobs, old, adv, mask, role_ids = _batch()
    logprobs.requires_grad_(True)
    weight = torch.ones(4, 5)
    weight[1, 1] = 0.0
    # garbage outside the mask must not produce NaN gradients
    with torch.no_grad():
        old[0, 4] = float("nan")
        adv[2, 0] = float("inf")
    ppo_loss(logprobs, old, adv, mask, role_ids, PPOLossConfig(entropy_coef=0.0), weight=weight).loss.backward()
    grad = logprobs.grad
    assert torch.isfinite(grad).all()
    active = mask.bool() & (weight > 0)
    assert torch.equal(grad[~active], torch.zeros(int((~active).sum())))
    # unclipped tokens with non-zero advantage do get a gradient
    assert (grad[active] != 0).sum() > active.sum() // 2


def test_zero_weighted_role_stays_in_the_denominator():
    logprobs, old, adv, mask, role_ids = _batch()
    entropy = torch.rand(4, 5)
    full = PPOLossConfig(entropy_coef=0.1)
    without = PPOLossConfig(entropy_coef=0.1, role_loss_weights={"searcher": 0.0})
    full_terms = ppo_loss(logprobs, old, adv, mask, role_ids, full, entropy=entropy)
    terms = ppo_loss(logprobs, old, adv, mask, role_ids, without, entropy=entropy)
    non_searcher = mask.clone()
    non_searcher[1:3] = 0
    # numerator keeps only Leader/Answerer tokens, denominator keeps every counted token
    policy = aggregate_loss(full_terms.token_policy_loss, non_searcher) * non_searcher.sum() / mask.sum()
    mean_entropy = (entropy * non_searcher).sum() / mask.sum()
    torch.testing.assert_close(terms.policy_loss, policy)
    torch.testing.assert_close(terms.loss, policy - 0.1 * mean_entropy)


def test_searcher_weight_zero_gives_searcher_tokens_no_gradient():
    logprobs, old, adv, mask, role_ids = _batch()
    logprobs.requires_grad_(True)
    config = PPOLossConfig(entropy_coef=0.0, kl_loss_coef=0.5, role_loss_weights={"searcher": 0.0})
    ppo_loss(logprobs, old, adv, mask, role_ids, config, ref_logprobs=old - 0.5).loss.backward()
    assert torch.equal(logprobs.grad[1:3], torch.zeros(2, 5))
    assert logprobs.grad[0].abs().sum() > 0 and logprobs.grad[3].abs().sum() > 0


def test_kl_loss_term_is_added_with_its_coefficient():
    logprobs, old, adv, mask, role_ids = _batch()
    ref = old - 0.3
    base = ppo_loss(logprobs, old, adv, mask, role_ids, PPOLossConfig(entropy_coef=0.0))
    config = PPOLossConfig(entropy_coef=0.0, kl_loss_coef=0.2, kl_loss_estimator="k3")
    terms = ppo_loss(logprobs, old, adv, mask, role_ids, config, ref_logprobs=ref)
    kl = aggregate_loss(kl_estimate(logprobs, ref, "k3"), mask)
    torch.testing.assert_close(terms.kl_loss, kl)
    torch.testing.assert_close(terms.loss, base.loss + 0.2 * kl)


def test_one_optimizer_step_reduces_the_surrogate():
    torch.manual_seed(0)
    vocab, n, t = 7, 6, 8
    logits = torch.nn.Parameter(torch.randn(n, t, vocab))
    tokens = torch.randint(0, vocab, (n, t))
    with torch.no_grad():
        old = torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
    adv = torch.randn(n, t)
    mask = torch.ones(n, t)
    mask[:, -2:] = 0
    role_ids = torch.tensor([LEADER, SEARCHER, SEARCHER, ANSWERER, ANSWERER, SEARCHER])
    config = PPOLossConfig(entropy_coef=0.0)
    optimizer = torch.optim.SGD([logits], lr=0.5)

    def loss():
        logprobs = torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
        return ppo_loss(logprobs, old, adv, mask, role_ids, config).loss

    before = loss()
    optimizer.zero_grad()
    before.backward()
    optimizer.step()
    with torch.no_grad():
        after = loss()
    assert after < before - 1e-3


def test_kl_estimators_by_hand():
    logprobs = torch.tensor([math.log(0.5)])
    ref = torch.tensor([math.log(0.25)])
    assert kl_estimate(logprobs, ref, "k1").item() == pytest.approx(math.log(2))
    assert kl_estimate(logprobs, ref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert kl_estimate(logprobs, ref, "k3").item() == pytest.approx(0.5 - 1 + math.log(2))
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3"}
    with pytest.raises(ValueError, match="unknown KL estimator 'k9'"):
        kl_estimate(logprobs, ref, "k9")


def test_k1_and_k3_are_unbiased_for_the_true_kl():
    p = torch.tensor([0.6, 0.3, 0.1])
    q = torch.tensor([0.2, 0.5, 0.3])
    true_kl = (p * (p / q).log()).sum()
    for name in ("k1", "k3"):
        expectation = (p * kl_estimate(p.log(), q.log(), name)).sum()
        torch.testing.assert_close(expectation, true_kl)


def test_aggregation_handles_empty_masks_and_unknown_modes():
    loss = torch.ones(2, 3)
    assert aggregate_loss(loss, torch.zeros(2, 3)).item() == 0.0
    with pytest.raises(ValueError, match="unknown loss_agg_mode 'sum'"):
        aggregate_loss(loss, torch.ones(2, 3), mode="sum")


def test_role_loss_weight_and_config_validation():
    weights = role_loss_weight(torch.tensor([0, 1, 2]), 2, {"searcher": 0.0, "answerer": 0.5})
    torch.testing.assert_close(weights, torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.5, 0.5]]))
    config = from_dict(
        PPOLossConfig,
        {"loss_agg_mode": "seq-mean-token-mean", "role_loss_weights": {"searcher": 0}},
    )
    assert config.role_loss_weights == {"searcher": 0.0}
    with pytest.raises(ConfigError, match="role_loss_weights.critic"):
        from_dict(PPOLossConfig, {"role_loss_weights": {"critic": 0.0}})
    with pytest.raises(ConfigError, match="loss_agg_mode"):
        from_dict(PPOLossConfig, {"loss_agg_mode": "sum"})


def test_nan_in_a_counted_advantage_raises_naming_tensor_and_role():
    logprobs, old, adv, mask, role_ids = _batch()
    adv[3, 1] = float("nan")
    with pytest.raises(NonFiniteError, match="advantages .*answerer") as info:
        ppo_loss(logprobs, old, adv, mask, role_ids)
    assert info.value.tensor_name == "advantages" and info.value.roles == ("answerer",)


def test_inf_entropy_raises_naming_the_role():
    logprobs, old, adv, mask, role_ids = _batch()
    entropy = torch.ones(4, 5)
    entropy[1, 0] = float("inf")
    with pytest.raises(NonFiniteError, match="entropy") as info:
        ppo_loss(logprobs, old, adv, mask, role_ids, entropy=entropy)
    assert info.value.roles == ("searcher",)


def test_missing_inputs_for_enabled_terms_are_named():
    logprobs, old, adv, mask, role_ids = _batch()
    with pytest.raises(ValueError, match="entropy"):
        ppo_loss(logprobs, old, adv, mask, role_ids, PPOLossConfig(entropy_coef=0.01))
    with pytest.raises(ValueError, match="ref_logprobs"):
        ppo_loss(logprobs, old, adv, mask, role_ids, PPOLossConfig(entropy_coef=0.0, kl_loss_coef=0.1))
    with pytest.raises(ValueError, match="role_ids must have shape"):
        ppo_loss(logprobs, old, adv, mask, role_ids[:2])


def test_per_role_metrics_average_each_roles_counted_tokens():
    logprobs, old, adv, mask, role_ids = _batch()
    terms = ppo_loss(logprobs, old, adv, mask, role_ids, PPOLossConfig(entropy_coef=0.0))
    entropy = torch.arange(20.0).reshape(4, 5)
    metrics = ppo_role_metrics(role_ids, mask, logprobs, old, adv, terms, ref_logprobs=old, entropy=entropy)
    searcher = mask.clone()
    searcher[[0, 3]] = 0
    assert metrics["searcher/advantage"] == pytest.approx(float((adv * searcher).sum() / searcher.sum()))
    assert metrics["leader/entropy"] == pytest.approx((0 + 1 + 2) / 3)
    assert metrics["answerer/clip_frac"] == pytest.approx(float(terms.token_clipped[3, :4].float().mean()))
    # π_T = π_old here, so both KL metrics agree
    assert metrics["leader/approx_kl_teacher"] == pytest.approx(metrics["leader/approx_kl_old"])
    assert {key.split("/")[1] for key in metrics} == {
        "policy_loss",
        "clip_frac",
        "approx_kl_old",
        "approx_kl_teacher",
        "advantage",
        "entropy",
    }
    assert metrics["leader/policy_loss"] == pytest.approx(float(terms.token_policy_loss[0, :3].mean()))
    # the KL to π_T reads only the rows the reference scored: Searchers' absent, the others unchanged
    leader_answerer = (role_ids == LEADER) | (role_ids == ANSWERER)
    scored = ppo_role_metrics(role_ids, mask, logprobs, old, adv, terms, ref_logprobs=old, ref_rows=leader_answerer)
    assert "searcher/approx_kl_teacher" not in scored and "searcher/approx_kl_old" in scored
    assert scored["leader/approx_kl_teacher"] == metrics["leader/approx_kl_teacher"]


def test_registries_reject_a_second_function_under_the_same_name():
    with pytest.raises(ValueError, match="KL estimator 'k1' is already registered"):
        register_kl_estimator("k1")(kl_estimate)
    with pytest.raises(ValueError, match="loss_agg_mode 'token-mean' is already registered"):
        register_loss_aggregation("token-mean")(aggregate_loss)
