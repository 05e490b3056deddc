"""Credit-assignment methods on the option mode: what each one gives each decision."""

from __future__ import annotations

import copy
import re
from dataclasses import replace

import numpy as np
import pytest
import torch

from maopd.envs.option.menus import MENU_SIZE
from maopd.envs.option.scenarios import SCENARIOS, OptionScenario
from maopd.training.losses import PluginOutputError
from maopd.training.marl.credit import (
    CREDIT_METHODS,
    VALUE_LR,
    CreditContext,
    StateValue,
    counterfactual_ems,
    first_report,
    fit_value,
    gae,
    get_credit_method,
    register,
    role_reward,
)
from maopd.training.marl.policy import MenuPolicy, play_batch
from maopd.training.marl.trainer import MarlConfig, evaluate, ppo_update, train, vector_env


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(0)
    env = vector_env(MarlConfig(num_envs=6), "train")
    policy = MenuPolicy(MENU_SIZE, hidden=16)
    episodes = play_batch(env, policy, list(range(12)))
    return env, policy, episodes


def test_every_method_gives_one_finite_advantage_per_decision(batch):
    env, policy, episodes = batch
    context = CreditContext(env, policy, teacher=MenuPolicy(MENU_SIZE, hidden=16))
    for name in CREDIT_METHODS:
        advantages = get_credit_method(name)(episodes, context)
        assert [len(a) for a in advantages] == [len(ep.decisions) for ep in episodes], name
        assert all(np.isfinite(a).all() for a in advantages), name


def test_role_rewards_are_the_environment_reward_parts(batch):
    _, _, episodes = batch
    for ep in episodes:
        for d in ep.decisions:
            expected = {"leader": ep.parts.leader, "answerer": np.mean(ep.parts.answerer)}.get(
                d.role, ep.parts.searcher_calls[d.call] if d.call is not None else None
            )
            assert role_reward(d, ep.parts) == pytest.approx(expected)


def test_team_reward_ranks_decisions_by_outcome_only(batch):
    env, policy, episodes = batch
    advantages = get_credit_method("team")(episodes, CreditContext(env, policy))
    for ep, adv in zip(episodes, advantages):
        same_role = {}
        for d, a in zip(ep.decisions, adv):
            same_role.setdefault(d.role, set()).add(round(float(a), 9))
        assert all(len(values) == 1 for values in same_role.values())


def test_opd_searcher_signal_is_the_teacher_student_log_ratio(batch):
    env, policy, episodes = batch
    advantages = get_credit_method("opd")(episodes, CreditContext(env, policy, teacher=policy))
    # The student as its own Teacher: every Searcher log-ratio is zero.
    for ep, adv in zip(episodes, advantages):
        for d, a in zip(ep.decisions, adv):
            if d.role == "searcher":
                assert a == pytest.approx(0.0, abs=1e-5)
    with pytest.raises(ValueError, match="Teacher"):
        get_credit_method("opd")(episodes, CreditContext(env, policy))


def test_counterfactual_replay_keeps_the_past_and_replaces_the_assignment_by_an_immediate_report(batch):
    env, policy, episodes = batch
    e = next(i for i, ep in enumerate(episodes) if any(d.call is not None for d in ep.decisions))
    ep = episodes[e]
    call = next(d.call for d in ep.decisions if d.call is not None)
    deviation = next(i for i, d in enumerate(ep.decisions) if d.call == call)
    (em,) = counterfactual_ems(episodes, [(e, call)], CreditContext(env, policy))
    assert em in (0.0, 1.0)

    def deviate(_, number, decision):
        if number < deviation:
            return ep.decisions[number].action
        return first_report(decision) if number == deviation else None

    replay = play_batch(env, policy, [ep.question_index], greedy_play=True, override=deviate)[0]
    assert replay.parts.em == em
    assert [d.action for d in replay.decisions[:deviation]] == [d.action for d in ep.decisions[:deviation]]
    # record.calls lists Searcher assignments first, in order: the replaced one reported at once.
    outputs = replay.record.calls[call].outputs
    assert len(outputs) == 1 and outputs[0].startswith("<report>")


def test_ppo_update_raises_the_probability_of_advantaged_actions(batch):
    _, policy, episodes = batch
    torch.manual_seed(0)
    student = MenuPolicy(MENU_SIZE, hidden=16)
    student.load_state_dict(policy.state_dict())
    optimizer = torch.optim.Adam(student.parameters(), lr=1e-2)
    advantages = [np.ones(len(ep.decisions)) for ep in episodes]
    decisions = [d for ep in episodes for d in ep.decisions]
    obs = torch.as_tensor(np.stack([d.observation for d in decisions]))
    masks = torch.as_tensor(np.stack([d.mask for d in decisions]))
    actions = torch.tensor([d.action for d in decisions])
    before = student.distribution(obs, masks).log_prob(actions).mean()
    ppo_update(student, optimizer, episodes, advantages, MarlConfig(entropy_coef=0.0, epochs=2))
    assert student.distribution(obs, masks).log_prob(actions).mean() > before


@pytest.mark.slow
def test_training_with_hints_learns_the_world_quickly(monkeypatch):
    """Averaged over three seeds: how far one seed gets in 12 iterations depends on the world's
    transitions (on the default world seed 0 ends far below seeds 1 and 2)."""
    monkeypatch.setitem(SCENARIOS, "hints_for_test", OptionScenario("hints_for_test", hints=True))
    ems = []
    for seed in (0, 1, 2):
        config = MarlConfig(
            method="role",
            scenario="hints_for_test",
            seed=seed,
            iterations=12,
            episodes_per_iteration=16,
            eval_questions=30,
        )
        _, metrics = train(config, progress=False)
        ems.append(metrics["em"])
        assert [row["iteration"] for row in metrics["curve"]] == list(range(1, 13))
    random_policy = evaluate(MenuPolicy(MENU_SIZE), config)
    assert np.mean(ems) > random_policy["em"] + 0.3


def test_unknown_method_is_named():
    with pytest.raises(ValueError, match="credit-assignment method 'coma2'"):
        train(MarlConfig(method="coma2"), progress=False)


@pytest.mark.parametrize(
    ("returned", "problem"),
    [
        (
            lambda episodes: [np.zeros(len(ep.decisions) - 1) for ep in episodes],
            r"returned shape \[\d+\] for episode 0",
        ),
        (lambda episodes: [np.zeros(len(ep.decisions)) for ep in episodes[1:]], "returned 11 for 12 episodes"),
        (lambda episodes: np.zeros(5), "returned ndarray for 12 episodes"),
        (
            lambda episodes: [np.full(len(ep.decisions), np.nan) for ep in episodes],
            r"returned \d+ non-finite value\(s\)",
        ),
        (lambda episodes: [np.ones(len(ep.decisions), dtype=bool) for ep in episodes], "returned dtype bool"),
        (lambda episodes: [list(range(len(ep.decisions))) for ep in episodes], "returned a list for episode 0"),
    ],
    ids=["short", "missing_episode", "not_a_list", "nan", "bool", "plain_list"],
)
def test_a_plugin_methods_bad_output_is_one_line_naming_the_method(batch, returned, problem):
    env, policy, episodes = batch
    try:
        register("bad_for_test")(lambda episodes, ctx: returned(episodes))
        named = rf"credit-assignment method 'bad_for_test' \({re.escape(__file__)}\) {problem}"
        with pytest.raises(PluginOutputError, match=named) as info:
            get_credit_method("bad_for_test")(episodes, CreditContext(env, policy))
        assert "\n" not in str(info.value)
    finally:
        CREDIT_METHODS.pop("bad_for_test", None)


def _mutate(episodes):
    episodes[0].decisions.pop()
    return [np.zeros(len(ep.decisions)) for ep in episodes]


@pytest.mark.parametrize(
    ("method", "problem"),
    [
        (lambda episodes: 1 / 0, r"raised at line \d+: ZeroDivisionError: division by zero"),
        (_mutate, "changed the episodes it was given"),
    ],
    ids=["raises", "mutates"],
)
def test_a_plugin_method_that_raises_or_changes_its_input_is_one_line_naming_it(batch, method, problem):
    env, policy, episodes = batch
    episodes = copy.deepcopy(episodes)  # the module's batch stays as it was
    try:
        register("bad_for_test")(lambda episodes, ctx: method(episodes))
        named = rf"credit-assignment method 'bad_for_test' \({re.escape(__file__)}\) {problem}"
        with pytest.raises(PluginOutputError, match=named) as info:
            get_credit_method("bad_for_test")(episodes, CreditContext(env, policy))
        assert "\n" not in str(info.value) and info.value.__cause__ is None
    finally:
        CREDIT_METHODS.pop("bad_for_test", None)


def test_integer_advantages_from_a_plugin_are_accepted(batch):
    env, policy, episodes = batch
    try:
        register("ints_for_test")(lambda episodes, ctx: [np.ones(len(ep.decisions), dtype=np.int64) for ep in episodes])
        advantages = get_credit_method("ints_for_test")(episodes, CreditContext(env, policy))
        assert [len(a) for a in advantages] == [len(ep.decisions) for ep in episodes]
    finally:
        CREDIT_METHODS.pop("ints_for_test", None)


# ----- MAPPO and the global state ------------------------------------------------------------------
TINY = {"iterations": 2, "episodes_per_iteration": 4, "eval_questions": 4, "num_envs": 4, "hidden": 16}


def test_gae_with_gamma_one_matches_a_hand_computed_example():
    rewards, values = np.array([0.0, 0.0, 1.0]), np.array([0.5, 0.2, 0.4])
    # δ = (0 + 0.2 − 0.5, 0 + 0.4 − 0.2, 1 + 0 − 0.4) = (−0.3, 0.2, 0.6); A_t = δ_t + γλ A_{t+1}
    np.testing.assert_allclose(gae(rewards, values, 1.0, 0.5), [-0.3 + 0.5 * 0.5, 0.2 + 0.5 * 0.6, 0.6])
    # λ = 1: the Monte Carlo return minus V; λ = 0: the one-step TD error
    np.testing.assert_allclose(gae(rewards, values, 1.0, 1.0), [0.5, 0.8, 0.6])
    np.testing.assert_allclose(gae(rewards, values, 1.0, 0.0), [-0.3, 0.2, 0.6])


def test_mappo_value_loss_falls_on_a_fixed_batch(batch):
    _, _, episodes = batch
    torch.manual_seed(0)
    decisions = [d for ep in episodes for d in ep.decisions]
    inputs = StateValue.inputs(decisions)
    assert inputs.shape == (len(decisions), decisions[0].state.size + 3)
    targets = torch.tensor([float(ep.parts.em) for ep in episodes for _ in ep.decisions])
    value = StateValue(decisions[0].state.size, hidden=16)
    losses = fit_value(value, torch.optim.Adam(value.parameters(), lr=VALUE_LR), inputs, targets, epochs=40)
    # below the best constant's loss (the targets' variance): the state explains part of the outcome
    assert losses[-1] < losses[0] and losses[-1] < 0.8 * targets.var(unbiased=False).item()


def test_mappo_keeps_its_value_across_batches_and_reads_the_state(batch):
    env, policy, episodes = batch
    context = CreditContext(env, policy)
    mappo = get_credit_method("mappo")
    first = mappo(episodes, context)
    value = context.state["mappo_value"]
    second = mappo(episodes, context)
    assert context.state["mappo_value"] is value
    assert not all(np.allclose(a, b) for a, b in zip(first, second))  # V was fitted in between
    # V reads the state: the same initial net gives other advantages on zeroed states
    blank = [replace(ep, decisions=[replace(d, state=np.zeros_like(d.state)) for d in ep.decisions]) for ep in episodes]
    outputs = []
    for played in (episodes, blank):
        torch.manual_seed(0)
        outputs.append(mappo(played, CreditContext(env, policy)))
    assert not all(np.allclose(a, b) for a, b in zip(*outputs))


def test_a_tiny_training_run_with_mappo_completes():
    _, metrics = train(MarlConfig(method="mappo", **TINY), progress=False)
    assert [row["iteration"] for row in metrics["curve"]] == [1, 2] and 0.0 <= metrics["em"] <= 1.0
