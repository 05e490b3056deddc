"""Dr. MAS's search orchestra (``maopd.envs.orchestra_search_v1``): its rounds, the Verifier's
routing, the budget rules, its rewards and record. PettingZoo's own tests run on it with every
registered workflow (test_pettingzoo_conformance.py, test_library_conventions.py)."""

from __future__ import annotations

import subprocess

import pytest

from maopd.agents.noisy_team import NoiseConfig, NoisyTeam
from maopd.agents.scripted import scripted_team
from maopd.base.paths import CLONE_DIR
from maopd.envs import orchestra_search_v1
from maopd.envs import rewards as R
from maopd.envs.episode import run_episode
from maopd.envs.retrieval.bm25 import BM25Retriever
from maopd.envs.synthwiki import load_default_world
from maopd.envs.synthwiki.demos import demonstrations
from maopd.envs.workflows import declaration, workflow_roles

NO, YES = "<judge>no</judge>", "<judge>yes</judge>"


def play(outputs: list[str], **options) -> orchestra_search_v1.raw_env:
    """One episode with these outputs in turn; returns the finished environment."""
    env = orchestra_search_v1.raw_env(split="dev", **options)
    env.reset(seed=0)
    outputs = iter(outputs)
    while env.acting_agents():
        env.step(next(outputs))
    return env


def acting_roles(outputs: list[str], **options) -> list[str]:
    env = orchestra_search_v1.raw_env(split="dev", **options)
    env.reset(seed=0)
    roles, outputs = [], iter(outputs)
    while acting := env.acting_agents():
        roles.append(env.role_of(acting[0]))
        env.step(next(outputs))
    return roles


def test_it_is_declared_with_its_roles_and_the_judges_tag_in_its_mask():
    workflow = declaration("orchestra")
    assert workflow_roles("orchestra") == ("verifier", "searcher", "answerer")
    assert workflow.action_kinds[-1] == "judge" and workflow.max_steps == 16
    observation = orchestra_search_v1.raw_env(split="dev")
    observation.reset(seed=0)
    assert observation.observe("searcher_0")["action_mask"].tolist() == [1, 1, 0, 0, 0, 0]


def test_a_no_starts_another_round_and_a_yes_hands_every_report_to_the_answerer():
    outputs = ["<search>a</search>", "<report>first</report>", NO, "<report>second</report>", YES, "<answer>x</answer>"]
    env = play(outputs)
    assert acting_roles(outputs) == ["searcher", "searcher", "verifier", "searcher", "verifier", "answerer"]
    record = env.record
    assert [r.text for r in record.reports] == ["first", "second"] and record.selected_reports == [1, 2]
    assert [c.call_id for c in record.calls] == [
        "searcher_0@w1",
        "searcher_0@w2",
        "verifier@r1",
        "verifier@r2",
        "answerer",
    ]
    # each round's verdict is asked as π_0's judge is: no system message, the round's report
    verdicts = [c.messages for c in record.calls if c.role == "verifier"]
    assert [m["role"] for m in verdicts[1]] == ["user", "assistant"] and "Report: second" in verdicts[1][0]["content"]


def test_a_malformed_verdict_goes_to_the_answerer_and_costs_the_verifier_the_penalty():
    env = play(["<report>fact</report>", "maybe", "<answer>x</answer>"])
    assert env.record.candidates == ["<answer>x</answer>"] and env.record.counters.format_failures == 1
    assert env.final_rewards["verifier"] == R.FORMAT_PENALTY


@pytest.mark.parametrize("force_finish", [False, True])
def test_a_no_with_no_round_left_ends_without_an_answer_unless_forced(force_finish):
    outputs = ["<report>a</report>", NO] * 3 + ["<answer>x</answer>"]
    env = play(outputs, force_finish=force_finish)
    assert env.rounds == 3 and env.env_step <= env.max_steps
    assert bool(env.record.candidates) is force_finish
    if not force_finish:
        assert env.record.counters.no_answer == 1 and env.final_rewards["verifier"] == 0.0


def test_the_budget_ends_a_round_and_the_workflow_in_time():
    """Searcher calls that only search: each ends unreported after CALL_STEPS steps; no verdict
    follows, and the rounds stop where the budget leaves no room for a report, a verdict, an answer."""
    env = play(["<search>q</search>"] * 20)
    assert env.record.reports == [] and env.record.counters.unreported_calls == 3
    assert env.env_step == 3 * orchestra_search_v1.CALL_STEPS and not env.verdicts
    forced = play(["<search>q</search>"] * 2 + [NO] + ["<search>q</search>"] * 20, max_steps=5)
    assert forced.env_step <= 5


def test_the_verifier_earns_the_outcome_and_the_others_their_cascade_rewards():
    env = orchestra_search_v1.raw_env(split="dev")
    record = run_episode(env, scripted_team(), seed=3)
    em = record.rewards.em
    assert record.rewards.roles["verifier"] == em == env.final_rewards["verifier"]
    assert env.final_rewards["answerer"] == record.rewards.answerer[0]
    assert record.rewards.searcher_calls == [R.searcher_reward(em, b, False) for b in record.rewards.search_bonus]


@pytest.mark.parametrize(
    "team", [scripted_team(), NoisyTeam(NoiseConfig.uniform(0.3), seed=1)], ids=["scripted", "noisy"]
)
def test_the_scripted_and_noisy_teams_play_it(team):
    env = orchestra_search_v1.raw_env(split="dev")
    for seed in range(8):
        record = run_episode(env, team, seed=seed)
        assert {c.role for c in record.calls} <= {"verifier", "searcher", "answerer"}
        assert record.counters.env_steps <= env.max_steps


def test_pi0_can_be_shown_it_every_role_included_by_the_noisy_team():
    world = load_default_world()
    questions = world.splits["train"][:6]
    team = NoisyTeam(NoiseConfig(), seed=0)
    rows = list(demonstrations("orchestra", team, BM25Retriever(world.corpus), questions, successful_only=False))
    assert {row["role"] for row in rows} == {"verifier", "searcher", "answerer"}
    assert all(row["workflow"] == "orchestra" and row["messages"][-1]["role"] == "assistant" for row in rows)


def test_adding_the_orchestra_touched_its_module_and_one_registration_line():
    """No module of the package names the orchestra but its own and the registration table,
    which holds one line for it: the team vocabulary carries the rest."""
    found = subprocess.run(
        ["git", "grep", "-n", "orchestra", "--", "envs", "agents", "training", "maopd"],
        cwd=CLONE_DIR,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    outside = [line for line in found if not line.startswith("envs/orchestra_search_v1.py:")]
    registration = [line for line in outside if line.startswith("envs/workflows.py:")]
    assert registration and all("orchestra" in line for line in registration)
    code = [line for line in registration if '"orchestra": "maopd.envs.orchestra_search_v1"' in line]
    assert len(code) == 1
    # besides the code line, the table in the module's docstring names it
    assert [line for line in outside if line not in registration] == []
