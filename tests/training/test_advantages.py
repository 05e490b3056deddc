"""Advantage estimators (Eq. 1, 5, 7) against values computed by hand."""

import math

import pytest
import torch

from maopd.base.config import ConfigError, from_dict
from maopd.envs import team
from maopd.envs.actions import ANSWERER, LEADER, SEARCHER
from maopd.training.advantages import (
    ADVANTAGE_ESTIMATORS,
    GRPO_EPS,
    AdvantageConfig,
    EstimatorInputs,
    assign_token_advantages,
    get_advantage_estimator,
    grpo_advantages,
    opd_advantages,
    register_advantage_estimator,
    role_token_mask,
    sequence_kl,
    team_token_advantages,
)
from maopd.training.losses import NonFiniteError, PluginOutputError


def test_grpo_binary_group_matches_hand_computation():
    # rewards 1,0,0,0: mean 0.25, population std sqrt(3)/4.
    adv = grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    std = math.sqrt(3) / 4
    expected = torch.tensor([[0.75, -0.25, -0.25, -0.25]]) / (std + 1e-6)
    torch.testing.assert_close(adv, expected)
    assert adv[0, 0].item() == pytest.approx(math.sqrt(3), rel=1e-5)


def test_grpo_unbiased_std_divides_by_group_size_minus_one():
    adv = grpo_advantages(torch.tensor([[1.0, 0.0]]), unbiased_std=True, eps=0.0)
    # mean 0.5, sample std sqrt(0.5) → ±0.5/sqrt(0.5)
    torch.testing.assert_close(adv, torch.tensor([[1.0, -1.0]]) / math.sqrt(2))


def test_grpo_is_per_row_and_uses_population_std():
    rewards = torch.tensor([[0.9, 0.1, 0.5], [2.0, 4.0, 6.0]])
    adv = grpo_advantages(rewards, eps=0.0)
    for row in range(2):
        values = rewards[row].tolist()
        mean = sum(values) / 3
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / 3)
        for g in range(3):
            assert adv[row, g].item() == pytest.approx((values[g] - mean) / std, rel=1e-5, abs=1e-6)


def test_grpo_zero_variance_groups_give_exactly_zero():
    # R_L = 0.9 + 0.1·5/6 for all five trajectories: in float32 the mean differs from the value
    # in the last bit, and (R − μ)/(0 + ε) would turn that round-off into advantages of ~0.06.
    leader_reward = 0.9 + 0.1 * 5 / 6
    rewards = torch.tensor([[leader_reward] * 5, [1.0] * 5, [0.0] * 5, [1.0, 0.0, 1.0, 0.0, 0.0]])
    naive = (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, unbiased=False, keepdim=True) + 1e-6)
    assert naive[0].abs().max() > 0.01
    adv = grpo_advantages(rewards)
    assert torch.equal(adv[:3], torch.zeros(3, 5))
    assert adv[3].abs().min() > 0.5


def test_grpo_answerer_candidates_normalize_within_parent_workflow():
    # [B=1, G=2, n=3]: workflow 0 has candidates 1,0,0; workflow 1 has all 1 (zero variance).
    rewards = torch.tensor([[[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]])
    adv = grpo_advantages(rewards, eps=0.0)
    std = math.sqrt(2) / 3
    torch.testing.assert_close(adv[0, 0], torch.tensor([2 / 3, -1 / 3, -1 / 3]) / std)
    assert torch.equal(adv[0, 1], torch.zeros(3))


def test_grpo_valid_mask_leaves_entries_out_of_the_statistics():
    rewards = torch.tensor([[1.0, 0.0, float("nan"), 5.0]])
    valid = torch.tensor([[True, True, False, False]])
    adv = grpo_advantages(rewards, valid, eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([[1.0, -1.0, 0.0, 0.0]]))
    # a group with a single valid entry has zero variance → 0
    single = grpo_advantages(torch.tensor([[3.0, 1.0]]), torch.tensor([[True, False]]))
    assert torch.equal(single, torch.zeros(1, 2))


def test_grpo_rejects_mask_of_wrong_shape():
    with pytest.raises(ValueError, match="valid_mask shape"):
        grpo_advantages(torch.zeros(2, 3), torch.ones(2, 2))


def test_opd_is_beta_times_masked_log_ratio():
    teacher = torch.tensor([[-1.0, -0.5, -2.0, float("-inf")]])
    old = torch.tensor([[-2.0, -0.5, -1.0, -3.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    adv = opd_advantages(teacher, old, mask)
    # the -inf sits under mask 0 and must not leak
    torch.testing.assert_close(adv, torch.tensor([[0.01, 0.0, -0.01, 0.0]]))


def test_opd_clamp_bounds_extreme_log_ratios():
    teacher = torch.tensor([[-40.0, -0.1]])
    old = torch.tensor([[-0.1, -30.0]])
    mask = torch.ones(1, 2)
    adv = opd_advantages(teacher, old, mask, beta=0.5, log_ratio_clamp=5.0)
    torch.testing.assert_close(adv, torch.tensor([[-2.5, 2.5]]))
    unclamped = opd_advantages(teacher, old, mask, beta=0.5)
    torch.testing.assert_close(unclamped, torch.tensor([[-19.95, 14.95]]))


def test_registry_names_the_paper_signals():
    assert set(ADVANTAGE_ESTIMATORS) == {
        "grpo",
        "opd",
        "grpo_final_em",
        "grpo_rs",
        "none",
        "grpo_agentwise",
        "grpo_agentwise_final_em",
    }
    with pytest.raises(ValueError, match="unknown advantage estimator 'gae'"):
        get_advantage_estimator("gae")


def test_a_registered_estimator_is_what_team_advantages_dispatch_to():
    """A user's estimator, registered under a new name, is validated by the config and used."""
    calls = []

    @register_advantage_estimator("constant_for_test")
    def constant(inputs: EstimatorInputs) -> torch.Tensor:
        calls.append((inputs.role, inputs.config.searcher_signal))
        return torch.full(inputs.response_mask.shape, 0.25)

    try:
        config = AdvantageConfig(searcher_signal="constant_for_test", kl_in_reward_coef=0.0)
        batch = _team_batch()
        result = team_token_advantages(
            **batch,
            config=config,
            leader_rewards=torch.tensor([[0.9, 0.1]]),
            answerer_rewards=torch.tensor([[[1.0, 0.0], [1.0, 1.0]]]),
        )
        is_searcher = batch["role_ids"] == SEARCHER
        searcher = result.token_advantages[is_searcher]
        mask = batch["response_mask"][is_searcher].bool()
        assert calls == [("searcher", "constant_for_test")]
        assert torch.all(searcher[mask] == 0.25) and torch.all(searcher[~mask] == 0)
    finally:
        del ADVANTAGE_ESTIMATORS["constant_for_test"]
    with pytest.raises(ConfigError, match="searcher_signal: 'constant_for_test' is not one of"):
        AdvantageConfig(searcher_signal="constant_for_test")


def test_role_token_mask_keeps_only_the_roles_generated_tokens():
    role_ids = torch.tensor([LEADER, SEARCHER, ANSWERER])
    response = torch.tensor([[1, 1, 0], [1, 0, 1], [1, 1, 1]])
    expected = torch.tensor([[0, 0, 0], [1, 0, 1], [0, 0, 0]], dtype=torch.bool)
    assert torch.equal(role_token_mask(role_ids, response, "searcher"), expected)


def test_sequence_kl_k1_sums_log_ratio_over_generated_tokens():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    ref = torch.tensor([[-1.5, -1.0, float("nan")], [-0.5, -1.5, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    torch.testing.assert_close(sequence_kl(logprobs, ref, mask), torch.tensor([0.5 - 1.0, 1.0]))


ROLES = torch.tensor([LEADER, SEARCHER, ANSWERER])
RESPONSE = torch.tensor([[1, 1, 0], [1, 0, 1], [1, 1, 1]])


def test_assign_token_advantages_gives_each_token_its_roles_part():
    leader = torch.full((3, 3), 0.7)
    searcher = torch.tensor([[5.0, 5.0, 5.0], [0.02, 0.0, -0.03], [5.0, 5.0, 5.0]])
    adv = assign_token_advantages(ROLES, RESPONSE, {"leader": leader, "searcher": searcher})
    # the Answerer has no part: its tokens get 0, as every token outside the response mask does
    expected = torch.tensor([[0.7, 0.7, 0.0], [0.02, 0.0, -0.03], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(adv, expected)


def _role_part(signal: str, role: str, sequence: torch.Tensor) -> torch.Tensor:
    config = AdvantageConfig(**{f"{role}_signal": signal})
    no_outcomes = torch.zeros(3)
    inputs = EstimatorInputs(
        role, ROLES, RESPONSE, torch.zeros(3, 3), torch.zeros(3, 3), sequence, config, no_outcomes, no_outcomes.long()
    )
    return get_advantage_estimator(signal)(inputs)


@pytest.mark.parametrize("signal", ["grpo", "grpo_final_em", "grpo_rs"])
def test_outcome_signals_broadcast_the_sequence_value(signal):
    sequence = torch.tensor([0.0, 0.3, 0.0])
    adv = assign_token_advantages(ROLES, RESPONSE, {"searcher": _role_part(signal, "searcher", sequence)})
    torch.testing.assert_close(adv[1], torch.tensor([0.3, 0.0, 0.3]))


def test_none_signal_zeroes_its_role():
    sequence = torch.tensor([0.7, 0.3, -0.4])
    parts = {"leader": _role_part("grpo", "leader", sequence), "searcher": _role_part("none", "searcher", sequence)}
    adv = assign_token_advantages(ROLES, RESPONSE, parts)
    assert torch.equal(adv[1], torch.zeros(3))
    torch.testing.assert_close(adv[0], torch.tensor([0.7, 0.7, 0.0]))


def test_an_estimator_that_declares_the_teacher_refuses_a_batch_without_its_log_probs():
    batch = {**_team_batch(), "teacher_logprobs": None}
    with pytest.raises(ValueError, match="advantage estimator 'opd' of the searcher tokens needs teacher_logprobs"):
        team_token_advantages(
            **batch,
            leader_rewards=torch.zeros(1, 2),
            answerer_rewards=torch.zeros(1, 2, 2),
            config=AdvantageConfig(kl_in_reward_coef=0.0),
        )


def test_assign_token_advantages_rejects_bad_input():
    with pytest.raises(ValueError, match=r"the searcher advantages must have shape \[3, 3\]"):
        assign_token_advantages(ROLES, RESPONSE, {"searcher": torch.zeros(2, 3)})
    unregistered = len(team.role_names())  # one past the last registered role's id
    with pytest.raises(ValueError, match="role_ids must be in"):
        assign_token_advantages(torch.tensor([0, unregistered, 1]), RESPONSE, {"searcher": torch.zeros(3, 3)})


def _team_batch():
    """B=1 question, G=2 trajectories, n=2 candidates, T=3.

    Sequences: trajectory 0 has a Leader call, two Searcher calls and two Answerer candidates;
    trajectory 1 has a Leader call, one Searcher call and two candidates.
    """
    role_ids = torch.tensor([LEADER, SEARCHER, SEARCHER, ANSWERER, ANSWERER, LEADER, SEARCHER, ANSWERER, ANSWERER])
    traj_index = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1])
    candidate_index = torch.tensor([-1, -1, -1, 0, 1, -1, -1, 0, 1])
    response_mask = torch.ones(9, 3)
    response_mask[1, 2] = 0  # a retrieved passage inside a Searcher call
    old = torch.full((9, 3), -1.0)
    teacher = old.clone()
    teacher[1] = torch.tensor([-0.5, -2.0, float("-inf")])  # -inf under the passage mask
    return {
        "role_ids": role_ids,
        "traj_index": traj_index,
        "candidate_index": candidate_index,
        "response_mask": response_mask,
        "old_logprobs": old,
        "teacher_logprobs": teacher,
    }


def test_team_advantages_all_equal_outcomes_grpo_zero_opd_signal():
    batch = _team_batch()
    result = team_token_advantages(
        **batch,
        leader_rewards=torch.tensor([[0.9, 0.9]]),
        answerer_rewards=torch.tensor([[[1.0, 1.0], [1.0, 1.0]]]),
    )
    adv = result.token_advantages
    non_searcher = batch["role_ids"] != SEARCHER
    assert torch.equal(adv[non_searcher], torch.zeros(int(non_searcher.sum()), 3))
    torch.testing.assert_close(adv[1], torch.tensor([0.005, -0.01, 0.0]))
    assert torch.equal(adv[2], torch.zeros(3)) and torch.equal(adv[6], torch.zeros(3))


def test_team_advantages_resolve_trajectory_and_candidate_levels():
    batch = _team_batch()
    config = AdvantageConfig(kl_in_reward_coef=0.0, grpo_eps=0.0)
    result = team_token_advantages(
        **batch,
        leader_rewards=torch.tensor([[1.0, 0.0]]),
        answerer_rewards=torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]),
        config=config,
    )
    seq = result.sequence_advantages
    torch.testing.assert_close(seq, torch.tensor([1.0, 0, 0, 1.0, -1.0, -1.0, 0, 0, 0]))
    torch.testing.assert_close(result.token_advantages[3], torch.ones(3))
    assert set(result.group_advantages) == {"leader", "answerer"}


def test_team_advantages_kl_enters_leader_and_answerer_rewards_before_normalization():
    batch = _team_batch()
    # trajectory 0's Leader call has k1 KL 3·(−1 − (−2)) = 3 toward π_T; candidate (0, 1) has 1.5.
    batch["teacher_logprobs"][0] = -2.0
    batch["teacher_logprobs"][4] = -1.5
    config = AdvantageConfig(kl_in_reward_coef=0.1)
    result = team_token_advantages(
        **batch,
        leader_rewards=torch.tensor([[1.0, 1.0]]),
        answerer_rewards=torch.tensor([[[1.0, 1.0], [0.0, 1.0]]]),
        config=config,
    )
    torch.testing.assert_close(result.shaped_rewards["leader"], torch.tensor([[0.7, 1.0]]))
    torch.testing.assert_close(result.shaped_rewards["answerer"], torch.tensor([[[1.0, 0.85], [0.0, 1.0]]]))
    # equal outcomes but different KL: the penalty alone orders the group
    assert result.sequence_advantages[0] < 0 < result.sequence_advantages[5]
    assert result.sequence_advantages[3] > 0 > result.sequence_advantages[4]


@pytest.mark.parametrize(("signal", "field"), [("grpo_final_em", "final_em"), ("grpo_rs", "searcher_rewards")])
def test_team_outcome_searcher_variants_give_every_call_its_trajectory_advantage(signal, field):
    batch = _team_batch()
    config = AdvantageConfig(searcher_signal=signal, kl_in_reward_coef=0.0, grpo_eps=0.0)
    result = team_token_advantages(
        **batch,
        leader_rewards=torch.tensor([[0.5, 0.5]]),
        answerer_rewards=torch.tensor([[[1.0, 1.0], [0.0, 0.0]]]),
        config=config,
        **{field: torch.tensor([[0.0, 1.0]])},
    )
    adv = result.token_advantages
    torch.testing.assert_close(adv[1], torch.tensor([-1.0, -1.0, 0.0]))
    torch.testing.assert_close(adv[2], torch.full((3,), -1.0))
    torch.testing.assert_close(adv[6], torch.full((3,), 1.0))


def test_team_outcome_variant_requires_its_reward():
    config = AdvantageConfig(searcher_signal="grpo_rs", kl_in_reward_coef=0.0)
    with pytest.raises(ValueError, match="searcher_rewards is None"):
        team_token_advantages(
            **_team_batch(),
            leader_rewards=torch.zeros(1, 2),
            answerer_rewards=torch.zeros(1, 2, 2),
            config=config,
        )


def test_team_stage_one_without_leader_or_teacher():
    # Stage I: one Searcher and n=2 candidates per trajectory, no Leader, no Teacher.
    role_ids = torch.tensor([SEARCHER, ANSWERER, ANSWERER, SEARCHER, ANSWERER, ANSWERER])
    result = team_token_advantages(
        role_ids=role_ids,
        traj_index=torch.tensor([0, 0, 0, 1, 1, 1]),
        candidate_index=torch.tensor([-1, 0, 1, -1, 0, 1]),
        response_mask=torch.ones(6, 2),
        old_logprobs=torch.zeros(6, 2),
        teacher_logprobs=None,
        leader_rewards=None,
        answerer_rewards=torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]),
        searcher_rewards=torch.tensor([[0.95, -1.0]]),
        config=AdvantageConfig(searcher_signal="grpo_rs", kl_in_reward_coef=0.0, grpo_eps=0.0),
    )
    torch.testing.assert_close(result.sequence_advantages, torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, 0.0]))


def test_team_nan_reward_raises_naming_the_role():
    rewards = torch.tensor([[1.0, float("nan")]])
    with pytest.raises(NonFiniteError, match="leader rewards .*role\\(s\\): leader") as info:
        team_token_advantages(**_team_batch(), leader_rewards=rewards, answerer_rewards=torch.zeros(1, 2, 2))
    assert info.value.tensor_name == "leader rewards" and info.value.roles == ("leader",)


def test_team_inf_teacher_logprob_on_a_searcher_token_raises():
    batch = _team_batch()
    batch["teacher_logprobs"][2, 1] = float("-inf")
    with pytest.raises(NonFiniteError, match="teacher_logprobs") as info:
        team_token_advantages(**batch, leader_rewards=torch.zeros(1, 2), answerer_rewards=torch.zeros(1, 2, 2))
    assert info.value.roles == ("searcher",)


def test_team_rejects_out_of_range_candidate_index():
    batch = _team_batch()
    batch["candidate_index"][3] = 2
    with pytest.raises(ValueError, match="candidate_index of the answerer sequences must lie in 0..1"):
        team_token_advantages(**batch, leader_rewards=torch.zeros(1, 2), answerer_rewards=torch.zeros(1, 2, 2))


def test_advantage_config_loads_from_dict_and_names_bad_fields():
    config = from_dict(AdvantageConfig, {"searcher_signal": "none", "opd_log_ratio_clamp": 10})
    assert config.searcher_signal == "none" and config.opd_log_ratio_clamp == 10.0
    with pytest.raises(ConfigError, match="searcher_signal"):
        from_dict(AdvantageConfig, {"searcher_signal": "judge"})
    with pytest.raises(ConfigError, match="opd_beta"):
        from_dict(AdvantageConfig, {"opd_beta": -1})


def test_team_inf_teacher_logprob_on_a_leader_token_raises_before_kl_shaping():
    batch = _team_batch()
    batch["teacher_logprobs"][5, 0] = float("nan")
    with pytest.raises(NonFiniteError, match="teacher_logprobs") as info:
        team_token_advantages(**batch, leader_rewards=torch.zeros(1, 2), answerer_rewards=torch.zeros(1, 2, 2))
    assert info.value.roles == ("leader",)


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        (lambda shape: torch.zeros(shape[0], shape[1] + 1), r"returned shape \[9, 4\]"),
        (lambda shape: torch.full(shape, float("nan")), r"returned 8 non-finite value\(s\)"),
        (lambda shape: torch.ones(shape, dtype=torch.bool), "returned dtype torch.bool"),
        (lambda shape: [[0.0] * shape[1]] * shape[0], "returned a list"),
    ],
    ids=["shape", "nan", "bool", "list"],
)
def test_an_estimators_bad_output_is_one_line_naming_it(output, problem):
    """NaN counts on the Searcher tokens only: the 3 Searcher calls' 9 slots less a passage token."""
    register_advantage_estimator("bad_for_test")(lambda inputs: output(tuple(inputs.response_mask.shape)))
    try:
        config = AdvantageConfig(searcher_signal="bad_for_test", kl_in_reward_coef=0.0)
        with pytest.raises(PluginOutputError, match=f"advantage estimator 'bad_for_test' {problem}"):
            team_token_advantages(
                **_team_batch(),
                config=config,
                leader_rewards=torch.tensor([[0.9, 0.1]]),
                answerer_rewards=torch.tensor([[[1.0, 0.0], [1.0, 1.0]]]),
            )
    finally:
        del ADVANTAGE_ESTIMATORS["bad_for_test"]


def test_agentwise_normalisation_pools_a_roles_calls_on_each_question():
    """Dr. MAS: one group per question and role whose members are the role's calls, so a
    workflow with three calls weighs three times; the sample std; a lone call keeps its score."""
    from maopd.envs.team import role_id

    leader = role_id("leader")
    # question 0: workflow 0 (EM 1) made three Leader calls, workflow 1 (EM 0) one; question 1: one call
    batch = dict(
        role_ids=torch.full((5,), leader),
        traj_index=torch.tensor([0, 0, 0, 1, 2]),
        candidate_index=torch.zeros(5, dtype=torch.long),
        response_mask=torch.ones(5, 2, dtype=torch.bool),
        old_logprobs=torch.zeros(5, 2),
        teacher_logprobs=None,
        leader_rewards=torch.tensor([[1.0, 0.0], [0.5, 0.5]]),
        answerer_rewards=None,
    )
    result = team_token_advantages(
        **batch, config=AdvantageConfig(leader_signal="grpo_agentwise", kl_in_reward_coef=0.0)
    )
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0])
    expected = (scores - scores.mean()) / (scores.std() + GRPO_EPS)
    torch.testing.assert_close(result.token_advantages[:4, 0], expected)
    assert float(result.token_advantages[4, 0]) == 0.5  # a group of one call: its raw score
    # plain GRPO on the same rewards weighs each workflow once
    plain = team_token_advantages(**batch, config=AdvantageConfig(kl_in_reward_coef=0.0))
    assert float(plain.token_advantages[0, 0]) != float(result.token_advantages[0, 0])


def test_a_registered_role_learns_from_its_own_rewards_by_its_configured_signal(monkeypatch):
    """A role beyond the built-in four: its rows are routed by ``role_signals`` (grpo when not
    named) over the rewards ``role_rewards`` gives it, and the other roles are untouched."""
    from maopd.envs import team

    monkeypatch.setattr(team, "_ROLES", dict(team._ROLES))
    team.register_role(team.Role(name="critic", prompt="Judge.", actions=("judge",)))
    critic, answerer = team.role_id("critic"), team.role_id("answerer")
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    common = dict(
        role_ids=torch.tensor([critic, critic, critic, critic, answerer]),
        traj_index=torch.tensor([0, 1, 2, 3, 0]),
        candidate_index=torch.zeros(5, dtype=torch.long),
        response_mask=torch.ones(5, 3, dtype=torch.bool),
        old_logprobs=torch.zeros(5, 3),
        teacher_logprobs=None,
        leader_rewards=None,
        answerer_rewards=torch.tensor([[[1.0], [0.0], [0.0], [1.0]]]),
        role_rewards={"critic": rewards},
    )
    by_default = team_token_advantages(**common, config=AdvantageConfig(kl_in_reward_coef=0.0))
    torch.testing.assert_close(by_default.token_advantages[:4, 0], grpo_advantages(rewards)[0])
    silenced = team_token_advantages(
        **common, config=AdvantageConfig(kl_in_reward_coef=0.0, role_signals={"critic": "none"})
    )
    assert not silenced.token_advantages[:4].any()
    with pytest.raises(ConfigError, match="role_signals.leader: set leader_signal instead"):
        AdvantageConfig(role_signals={"leader": "grpo"})
