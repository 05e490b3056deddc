"""A team defined in this one file, a new role included, through the team vocabulary alone: its
role, its declaration and its program, registered at run time. It passes PettingZoo's tests and
plays a whole episode with a policy per role, touching no module of the package."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

from maopd.envs import prompts, team, workflows
from maopd.envs import rewards as R
from maopd.envs.episode import run_episode
from maopd.envs.policy import AgentOutput, AgentTurn, RoleRouter
from maopd.envs.roles import ANSWERER_ROLE, ROLES, SEARCHER_ROLE
from maopd.envs.search_env import SearchEnv, Turn
from maopd.envs.team import Role, Workflow, register_role, role_id
from maopd.envs.workflows import (
    declaration,
    env_module,
    pettingzoo_api,
    register_workflow,
    workflow_names,
    workflow_roles,
)

SUMMARIZER = Role(
    name="summarizer",
    prompt="You are a Summarizer. Rewrite the Searcher's report as one short sentence inside a <report> tag and "
    "close the tag.",
    actions=("report",),
)
WORKFLOW = Workflow(
    name="relay",
    env_name="relay_search_v1",
    roles=(SEARCHER_ROLE, SUMMARIZER, ANSWERER_ROLE),
    max_steps=6,
    min_steps=3,
    description="A Searcher reports, a Summarizer rewrites the report, the Answerer answers from it.",
)


class raw_env(SearchEnv):
    declaration = WORKFLOW

    def _agent_names(self) -> list[str]:
        return ["searcher_0", "summarizer", "answerer"]

    def _start_episode(self) -> None:
        self._assign("searcher_0", 1, self.question.question)
        self.summary: Turn | None = None

    def _searcher_last_step(self) -> int:
        return self.max_steps - 2  # the Summarizer and the Answerer act once each after it

    def _schedule(self) -> list[str]:
        if self.answered or (not self.active and not self.reports):
            return []
        if self.active:
            return ["searcher_0"]
        if self.summary is None:
            report = self.reports[-1]
            messages = [
                prompts.system_message("summarizer"),
                prompts.reports_message([(report["number"], report["task"], report["text"])]),
            ]
            self.summary = Turn("summarizer", "summarizer", messages)
            return ["summarizer"]
        if self.answer_turn is None:
            self._start_answer([self.reports[-1]["number"]])  # the summary, or the report it failed to rewrite
        return ["answerer"]

    def _allowed(self, agent: str) -> tuple[str, ...]:
        if agent == "searcher_0":
            return self._searcher_allowed(self.env_step + 1)
        return ("report",) if agent == "summarizer" else ("answer",)

    def _messages(self, agent: str) -> list[dict[str, str]]:
        if agent == "summarizer":
            return list(self.summary.messages) if self.summary else [prompts.system_message("summarizer")]
        return self._answerer_messages() if agent == "answerer" else self._searcher_messages(agent)

    def _resolve(self, actions: dict[str, Any]) -> None:
        if "answerer" in actions:
            self._resolve_answer(actions["answerer"])
        elif "summarizer" in actions:
            _, parsed = self._take_turn("summarizer", self.summary, actions["summarizer"], ("report",))
            self.summary.format_failed = not parsed.valid
            if parsed.valid:
                number = len(self.reports) + 1
                report = {"number": number, "wave": 1, "agent": "summarizer", "task": "summary"}
                self.reports.append({**report, "text": parsed.content, "forced": False})
        else:
            self._resolve_searchers(actions)

    def _workflow_rewards(self, candidate_scores: list[float]) -> dict[str, Any]:
        failed = self.summary is not None and self.summary.format_failed
        return {"summarizer": R.FORMAT_PENALTY if failed else R.team_outcome(candidate_scores)}

    def _turns(self) -> list[Turn]:
        return [*([self.summary] if self.summary else []), *super()._turns()]


env, parallel_env = pettingzoo_api(raw_env)


@pytest.fixture(autouse=True)
def relay(monkeypatch):
    """The team registered for one test: the registries are copies, so no other test sees it."""
    monkeypatch.setattr(team, "_ROLES", dict(team._ROLES))
    monkeypatch.setattr(workflows, "_REGISTERED", dict(workflows._REGISTERED))
    register_role(SUMMARIZER)
    return register_workflow(raw_env)


class Relay:
    """Searches the question once, reports the first passage, rewrites the report, answers with
    the report's last word."""

    def act(self, turns: list[AgentTurn]) -> list[AgentOutput]:
        return [AgentOutput([self._one(turn)] * turn.num_candidates) for turn in turns]

    def _one(self, turn: AgentTurn) -> str:
        last = turn.messages[-1]["content"]
        if turn.role == "searcher":
            if last.startswith("<information>"):
                return f"<report>{prompts.parse_passages(last)[0][1]}</report>"
            return f"<search>{turn.task}</search>"
        if turn.role == "summarizer":
            (_, _, text), *_ = prompts.parse_reports(last)
            return f"<report>{text.split('.')[0]}.</report>"
        return f"<answer>{last.split()[-1].strip('.')}</answer>"


def test_the_team_is_registered_with_its_new_role(relay):
    assert relay is WORKFLOW and "relay" in workflow_names() and declaration("relay") is WORKFLOW
    assert workflow_roles("relay") == ("searcher", "summarizer", "answerer")
    assert env_module("relay").raw_env is raw_env
    # the next id; the built-in roles keep theirs
    assert role_id("summarizer") == len(team.role_names()) - 1
    assert [role_id(name) for name in ROLES] == list(range(len(ROLES)))
    with pytest.raises(ValueError, match="already registered with another definition"):
        register_role(replace(SUMMARIZER, actions=("answer",)))


def test_the_team_passes_pettingzoos_tests():
    api_test(env(split="dev"), num_cycles=20)
    parallel_api_test(parallel_env(split="dev"), num_cycles=20)
    seed_test(lambda **kwargs: env(split="dev", **kwargs), num_cycles=10)
    parallel_seed_test(lambda **kwargs: parallel_env(split="dev", **kwargs))


@pytest.mark.parametrize("num_candidates", [1, 2])
def test_the_team_plays_an_episode_with_a_policy_per_role(num_candidates):
    team = Relay()
    policy = RoleRouter({role: team for role in workflow_roles("relay")}, workflow_roles("relay"))
    game = raw_env(split="dev", num_candidates=num_candidates)
    record = run_episode(game, policy, seed=0)
    assert [call.role for call in record.calls] == ["searcher", "summarizer", "answerer"]
    assert [r.agent for r in record.reports] == ["searcher_0", "summarizer"]
    assert record.selected_reports == [2] and len(record.candidates) == num_candidates
    assert record.rewards.roles["summarizer"] == record.rewards.em == game.final_rewards["summarizer"]
    assert record.counters.format_failures == 0 and record.counters.search_actions == 1


def test_a_format_failure_of_the_new_role_costs_it_the_penalty():
    game = raw_env(split="dev")
    game.reset(seed=0)
    outputs = iter(["<search>x</search>", "<report>found</report>", "no tag", "<answer>y</answer>"])
    while game.acting_agents():
        game.step(next(outputs))
    assert game.final_rewards["summarizer"] == R.FORMAT_PENALTY
    assert game.record.selected_reports == [1]  # the Searcher's report goes on unrewritten
