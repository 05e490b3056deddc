"""Single-agent search (the Search-R1-style baseline): one solver searches and answers.

=====================  ==================================================================
Import                 ``from maopd.envs import single_search_v1``
Actions                Text
Parallel API           Yes (``parallel_env``)
Agents                 ``agents = ["solver"]``
Observation            Dict(role: Text, messages: Sequence(Dict(role, content)), action_mask: MultiBinary(5))
State                  ``state()`` in ``state_space``: question, histories, acting, step and round counters
Budget                 5 environment steps (``max_steps``)
=====================  ==================================================================

The question a reader asks of a team first: does it beat one agent? The paper compares its teams
with Search-R1, which trains a single agent with outcome rewards to interleave search calls and
an answer. Here that agent is the role ``solver``, played by the same shared model as the teams:
it receives the question and, each step, writes ``<search>query</search>`` (the top-``topk``
passages come back inside ``<information>``, exactly as a Searcher's) or ``<answer>…</answer>``,
which ends the episode. The budget is the cascade's: up to 4 searches, then an answer.

Budget rule (B = ``max_steps``): the solver acts in steps 1 … B. With ``force_finish=False`` (the
default, the paper's behaviour) it may search in step B too, and the workflow then ends without an
answer (``counters["no_answer"] = 1``, ``candidates == []``). With ``force_finish=True`` step B
allows only ``<answer>`` (its observation says so and ``action_mask`` masks ``search``), and its
output is the candidate even when it fails the format. A format failure gets feedback and the
episode continues under the budget, as a Searcher's does.

The budget counts environment steps, in which only the scheduled agents act, so it is not
PettingZoo's ``max_cycles`` (every agent that many turns, which its ``max_cycles_test`` checks):
``max_cycles`` is refused, naming ``max_steps``.

Rewards (at the end; parts in ``infos["solver"]["reward_parts"]``): R_solver = c, the exact match
of its answer (0 without one), or -1 after any format failure in the call (``maopd.envs.rewards.
solver_reward``). The record (envs/records.py) keeps the team records' fields: the answer is the
one candidate, ``rewards`` holds ``em`` and ``solver`` beside the team roles' empty entries, and
``calls`` holds one call of role ``solver``.

Each agent's reward comes with ``env.last()`` at its last turn (sum ``last()``'s rewards per
agent, PettingZoo's way); ``env.rewards`` empties as the agents leave, ``env.unwrapped.final_rewards``
keeps every agent's until the next ``reset``.

``observation_space(agent).contains`` holds for any Unicode history. ``action_mask`` (alias ``action_kinds``) orders
``("search", "report", "delegate", "select", "answer")``.

Version History
---------------
* v1 (commit 3abcc2b): the role prompts name each action tag by its opening tag alone, with no
  complete tag and no ``<information>`` block, so what an agent sees changed. Added since, with no
  version bump: ``state()``/``state_space``, the observation's ``action_mask`` (``action_kinds``
  kept as an alias), ``final_rewards``, and ``max_cycles`` as an alias of ``max_steps``, since refused;
  the module installs as ``maopd.envs.single_search_v1``.
* v0 (commit b314268): initial release as ``single_search_v0``, the Search-R1-style baseline with
  the role ``solver``.
"""

from __future__ import annotations

from typing import Any

from maopd.envs import prompts
from maopd.envs import rewards as R
from maopd.envs.records import CallRecord
from maopd.envs.roles import SOLVER_ROLE
from maopd.envs.search_env import SearchEnv, SearcherCall, call_record, short_text, with_notice
from maopd.envs.team import Workflow
from maopd.envs.workflows import pettingzoo_api

SOLVER = SOLVER_ROLE.name


WORKFLOW = Workflow(
    name="single",
    env_name="single_search_v1",
    roles=(SOLVER_ROLE,),
    max_steps=5,
    min_steps=1,  # an answer in the first step
    description="One agent searches and answers, Search-R1-style: the baseline outside the paper's method.",
    system="Single agent",
)


class raw_env(SearchEnv):
    declaration = WORKFLOW

    def _agent_names(self) -> list[str]:
        return [SOLVER]

    def _start_episode(self) -> None:
        # The solver's ReAct loop is a Searcher call's (passages, feedback, token counts) that
        # ends in an answer instead of a report; it is not a Searcher call, so it earns no R_S.
        messages = [prompts.system_message(SOLVER), prompts.solver_question_message(self.question.question)]
        self.solver_call = SearcherCall(SOLVER, 1, self.question.question, messages)
        self.solver_answer: str | None = None  # the output that holds the answer, once written

    @property
    def answered(self) -> bool:
        return self.solver_answer is not None

    def _schedule(self) -> list[str]:
        if self.answered or self.solver_call.exhausted:
            return []
        return [SOLVER]

    def _solver_allowed(self, step: int) -> tuple[str, ...]:
        """Kinds the solver may use in environment step ``step`` (1-based): only an answer in the
        last step under ``force_finish``; otherwise it may still search there."""
        if step >= self.max_steps and self.config.force_finish:
            return ("answer",)
        return ("search", "answer")

    def _allowed(self, agent: str) -> tuple[str, ...]:
        return self._solver_allowed(self.env_step + 1)

    def _messages(self, agent: str) -> list[dict[str, str]]:
        messages = self.solver_call.messages
        last_turn = agent in self.acting_agents() and self._allowed(agent) == ("answer",)
        return with_notice(messages, SOLVER) if last_turn else list(messages)

    def _resolve(self, actions: dict[str, Any]) -> None:
        call = self.solver_call
        allowed = self._solver_allowed(self.env_step)
        if allowed == ("answer",):
            call.messages = with_notice(call.messages, SOLVER)  # the history the solver saw
        text, parsed = self._take_turn(SOLVER, call, actions[SOLVER], allowed)
        self._log(f"[step {self.env_step}] solver: {short_text(text)}")
        if parsed.kind == "search":
            self._run_searches([(call, parsed.content)])
        elif parsed.kind == "answer":
            self.solver_answer = text
        else:
            call.format_failed = True
            if allowed == ("answer",):
                self.solver_answer = text  # forced finish: its last output is the candidate, as an Answerer's
            elif self.env_step < self.max_steps:
                call.messages.append(prompts.feedback_message(parsed.error or "", allowed))
        if not self.answered and self.env_step >= self.max_steps:
            call.exhausted = True  # force_finish off: the budget ran out before an answer
            self._log("  solver: budget exhausted before an answer; no answer")

    def _candidate_texts(self) -> list[str]:
        return [self.solver_answer] if self.solver_answer is not None else []

    def _workflow_rewards(self, candidate_scores: list[float]) -> dict[str, float]:
        return {SOLVER: R.solver_reward(R.team_outcome(candidate_scores), self.solver_call.format_failed)}

    def _calls(self) -> list[CallRecord]:
        return [call_record(SOLVER, SOLVER, SOLVER, None, self.solver_call)]


env, parallel_env = pettingzoo_api(raw_env)
