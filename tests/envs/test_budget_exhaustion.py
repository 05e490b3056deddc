"""SearchEnvConfig.force_finish: budget exhaustion without (False, the paper's and the default) and
with (True, an option) forcing an answer, in both workflows; the rewards stay well-defined."""

from types import SimpleNamespace

import pytest
import torch

from maopd.base.config import ConfigError
from maopd.envs import cascade_search_v1, hierarchical_search_v1, single_search_v1
from maopd.envs.episode import run_episode
from maopd.envs.prompts import LAST_TURN_NOTICE
from maopd.envs.search_env import SearchEnvConfig
from maopd.training.advantages import AdvantageConfig, team_token_advantages
from maopd.training.rollout_rewards import record_rewards
from tests.envs.test_workflows import (  # the scripted-policy helpers of the workflow tests
    OPTIONS,
    Rules,
    n_searches,
)

SEARCH = "<search>Orlen Vask</search>"
ANSWER = "<answer>Tarvel</answer>"


def always(text):
    return lambda t: text


def delegate_once(turn):
    delegated = any("<delegate>" in m["content"] for m in turn.messages if m["role"] == "assistant")
    return "<select>all</select>" if delegated else "<delegate>\nWhere was Orlen Vask born?\n</delegate>"


def test_force_finish_is_checked():
    with pytest.raises(ConfigError, match="force_finish"):
        SearchEnvConfig(force_finish="no")
    assert SearchEnvConfig().force_finish is False  # the paper: a workflow may end without an answer


# ----- the cascade -------------------------------------------------------------------------


def test_cascade_forcing_forces_a_report_and_an_answer():
    policy = Rules(searcher=always(SEARCH), answerer=always(ANSWER))
    record = run_episode(cascade_search_v1.env(force_finish=True), policy, options=OPTIONS)
    assert record.reports[0].forced and record.extracted_answers == ["Tarvel"]
    assert record.counters.no_answer is None and record.counters.unreported_calls is None
    assert "no_answer" not in record.to_json()["counters"] and "unreported_calls" not in record.to_json()["counters"]
    assert [t for t in policy.turns if t.role == "searcher"][-1].allowed == ("report",)


def test_cascade_exhausted_budget_leaves_no_answer():
    policy = Rules(searcher=always(SEARCH), answerer=always(ANSWER))
    record = run_episode(cascade_search_v1.env(force_finish=False), policy, options=OPTIONS)
    c = record.counters
    # the Searcher searches in steps 1..4 (its last step may search too) and never reports
    assert c.search_actions == 4 and c.env_steps == 4
    assert c.no_answer == 1 and c.unreported_calls == 1
    assert c.forced_reports == 0 and c.format_failures == 0
    assert record.reports == [] and record.candidates == [] and record.extracted_answers == []
    assert record.candidate_scores == [] and record.rewards.em == 0.0
    assert not any(t.role == "answerer" for t in policy.turns)
    # well-defined rewards: no Answerer entry, the unreported call gets 0.9·R_EM + 0.1·0 = 0
    assert record.rewards.answerer == [] and record.rewards.search_bonus == [0.0]
    assert record.rewards.searcher_calls == [0.0]
    last = [t for t in policy.turns if t.role == "searcher"][-1]
    assert "search" in last.allowed and "last turn" not in last.messages[-1]["content"]
    assert [call.role for call in record.calls] == ["searcher"]


def test_cascade_format_failure_on_the_last_step_ends_unreported_with_the_penalty():
    policy = Rules(searcher=lambda t: SEARCH if n_searches(t) < 3 else "garbage", answerer=always(ANSWER))
    record = run_episode(cascade_search_v1.env(force_finish=False), policy, options=OPTIONS)
    assert record.counters.no_answer == 1 and record.counters.format_failures == 1
    assert record.rewards.searcher_calls == [-1.0]


def test_cascade_without_forcing_is_unchanged_when_the_searcher_reports():
    rules = {
        "searcher": lambda t: SEARCH if n_searches(t) < 2 else "<report>born in Tarvel</report>",
        "answerer": always(ANSWER),
    }
    forced = run_episode(cascade_search_v1.env(force_finish=True), Rules(**rules), options=OPTIONS)
    free = run_episode(cascade_search_v1.env(force_finish=False), Rules(**rules), options=OPTIONS)
    assert free.counters.no_answer == 0 and free.counters.unreported_calls == 0
    free.counters.no_answer = free.counters.unreported_calls = None
    for key in ("reports", "candidates", "rewards", "counters", "searches"):
        assert getattr(free, key) == getattr(forced, key), key


# ----- the single agent --------------------------------------------------------------------


def test_single_agent_exhausted_budget_leaves_no_answer():
    policy = Rules(solver=always(SEARCH))
    record = run_episode(single_search_v1.env(force_finish=False), policy, options=OPTIONS)
    c = record.counters
    # the paper's rule: the solver may search in its last step (5) too, and ends without an answer
    assert c.search_actions == 5 and c.env_steps == 5 and c.no_answer == 1
    assert record.candidates == [] and record.extracted_answers == [] and record.candidate_scores == []
    assert record.rewards.em == 0.0 and record.rewards.roles["solver"] == 0.0
    assert all(t.allowed == ("search", "answer") for t in policy.turns)
    assert "last turn" not in policy.turns[-1].messages[-1]["content"]


def test_single_agent_forcing_allows_only_an_answer_in_the_last_step():
    policy = Rules(solver=lambda t: SEARCH if "search" in t.allowed else ANSWER)
    record = run_episode(single_search_v1.env(force_finish=True), policy, options=OPTIONS)
    last = policy.turns[-1]
    assert last.allowed == ("answer",) and last.messages[-1]["content"].endswith(LAST_TURN_NOTICE["solver"])
    assert record.counters.search_actions == 4 and record.extracted_answers == ["Tarvel"]
    assert record.counters.no_answer is None and record.rewards.roles["solver"] == 1.0
    # the history keeps the notice the solver saw (token-exact rollouts continue from it)
    assert record.calls[0].messages[-2]["content"] == last.messages[-1]["content"]
    # a solver that searches anyway fails the format; its output is the (empty) candidate
    record = run_episode(single_search_v1.env(force_finish=True), Rules(solver=always(SEARCH)), options=OPTIONS)
    assert record.candidates == [SEARCH] and record.extracted_answers == [None]
    assert record.rewards.roles["solver"] == -1.0 and record.counters.format_failures == 1


# ----- the hierarchy -----------------------------------------------------------------------


def test_hierarchy_forcing_forces_a_finish():
    policy = Rules(
        leader=always("<delegate>\nWhere was Orlen Vask born?\n</delegate>"),
        searcher=always(SEARCH),
        answerer=always(ANSWER),
    )
    record = run_episode(hierarchical_search_v1.env(force_finish=True), policy, options=OPTIONS)
    assert record.selected_reports == [1] and record.extracted_answers == ["Tarvel"]
    assert record.counters.no_answer is None


def test_hierarchy_leader_that_never_selects_ends_without_an_answer():
    policy = Rules(
        leader=always("<delegate>\nWhere was Orlen Vask born?\n</delegate>"),
        searcher=always(SEARCH),
        answerer=always(ANSWER),
    )
    record = run_episode(hierarchical_search_v1.env(force_finish=False), policy, options=OPTIONS)
    c = record.counters
    # leader delegates at 1, the Searcher searches 2..10 (no report), the Leader fails at 11
    assert c.env_steps == 11 and c.search_actions == 9
    assert c.no_answer == 1 and c.unreported_calls == 1 and c.forced_reports == 0
    assert record.reports == [] and record.selected_reports == []
    assert record.candidates == [] and record.extracted_answers == [] and record.rewards.em == 0.0
    assert not any(t.role == "answerer" for t in policy.turns)
    assert record.rewards.leader == -1.0  # its failed last step is a format failure
    assert record.rewards.answerer == [] and record.rewards.searcher_calls == [0.0]
    assert [call.role for call in record.calls] == ["searcher", "leader"]


def test_hierarchy_unreported_call_gives_no_report_but_the_leader_may_still_select():
    policy = Rules(leader=delegate_once, searcher=always(SEARCH), answerer=always(ANSWER))
    record = run_episode(hierarchical_search_v1.env(force_finish=False), policy, options=OPTIONS)
    c = record.counters
    assert c.no_answer == 0 and c.unreported_calls == 1 and record.reports == []
    assert record.selected_reports == [] and record.extracted_answers == ["Tarvel"]
    leader_views = [t for t in policy.turns if t.role == "leader"]
    assert "Reports: none." in leader_views[-1].messages[-1]["content"]
    # R_L = 0.9·1 + 0.1·min(9, 6)/6; the unreported call: 0.9·R_EM + 0.1·b_S with b_S = 0
    assert record.rewards.leader == pytest.approx(1.0)
    assert record.rewards.searcher_calls == [pytest.approx(0.9)]


def test_hierarchy_without_forcing_is_unchanged_when_everyone_finishes():
    rules = {
        "leader": delegate_once,
        "answerer": always(ANSWER),
        "searcher": lambda t: SEARCH if n_searches(t) < 1 else "<report>born in Tarvel</report>",
    }
    forced = run_episode(hierarchical_search_v1.env(force_finish=True), Rules(**rules), options=OPTIONS)
    free = run_episode(hierarchical_search_v1.env(force_finish=False), Rules(**rules), options=OPTIONS)
    assert free.counters.no_answer == 0 and free.counters.unreported_calls == 0
    free.counters.no_answer = free.counters.unreported_calls = None
    for key in ("reports", "selected_reports", "candidates", "rewards", "counters"):
        assert getattr(free, key) == getattr(forced, key), key


# ----- the trainer reads such records --------------------------------------------------------


def test_no_answer_records_give_finite_rewards_and_advantages():
    policy = Rules(
        leader=always("<delegate>\nWhere was Orlen Vask born?\n</delegate>"),
        searcher=always(SEARCH),
        answerer=always(ANSWER),
    )
    empty = run_episode(hierarchical_search_v1.env(force_finish=False), policy, options=OPTIONS)
    batch = SimpleNamespace(records=[[empty, empty]], group_size=2)
    rewards = record_rewards(batch)
    assert rewards["answerer"].shape == (1, 2, 1) and not rewards["candidate_mask"].any()
    assert rewards["leader"].tolist() == [[-1.0, -1.0]] and rewards["em"].tolist() == [[0.0, 0.0]]
    # one Leader and one Searcher call per trajectory, no Answerer sequence
    role_ids = torch.tensor([0, 1, 0, 1])
    mask = torch.ones(4, 3)
    advantages = team_token_advantages(
        role_ids=role_ids,
        traj_index=torch.tensor([0, 0, 1, 1]),
        candidate_index=torch.zeros(4, dtype=torch.long),
        response_mask=mask,
        old_logprobs=-torch.ones(4, 3),
        teacher_logprobs=-torch.ones(4, 3),
        leader_rewards=rewards["leader"],
        answerer_rewards=rewards["answerer"],
        searcher_rewards=rewards["searcher"],
        final_em=rewards["em"],
        candidate_mask=rewards["candidate_mask"],
        config=AdvantageConfig(),
    )
    assert torch.isfinite(advantages.token_advantages).all()
    assert advantages.token_advantages.abs().sum() == 0  # equal rewards, Teacher = π_old
