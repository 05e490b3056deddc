"""Hierarchical search (H-MAS): a Leader delegates subtasks to Searchers in waves, then the Answerer answers.

=====================  ==================================================================
Import                 ``from maopd.envs import hierarchical_search_v1``
Actions                Text (Answerer: Tuple of ``num_candidates`` Texts when > 1)
Parallel API           Yes (``parallel_env``)
Agents                 ``agents = ["leader", "searcher_0", …, "searcher_{num_searchers-1}", "answerer"]``
Observation            Dict(role: Text, messages: Sequence(Dict(role, content)), action_mask: MultiBinary(5))
State                  ``state()`` in ``state_space``: question, histories, acting, step and round counters
Budget                 12 environment steps (``max_steps``), at most 5 delegation rounds (``max_rounds``)
=====================  ==================================================================

The Leader sees the question and writes ``<delegate>one subtask per line</delegate>``: subtask k
goes to ``searcher_k`` (subtasks beyond ``num_searchers`` are dropped and recorded). The Searchers
of a wave act concurrently, one action each per environment step, running the same ReAct loop as
in the cascade until each has reported. The Leader then sees the wave's reports (numbered across
waves) and either delegates another wave or writes ``<select>numbers</select>`` /
``<select>all</select>`` to hand reports to the Answerer, who answers with ``<answer>…</answer>``.

Budget rule (B = ``max_steps``): the last two steps are reserved for the Leader's selection and
the Answerer.
* The Leader may delegate in step s only while s ≤ B-3 and fewer than ``max_rounds`` waves ran;
  otherwise ``action_mask`` allows only ``select``.
* Searchers may act until step B-2; a call without a report then ends with none.
* A Leader format failure costs it the step and it gets feedback; a Leader that fails its last
  step ends the episode without an Answerer call (``counters["no_answer"]``, the paper's failure).
* The Answerer acts in the step after the selection, at the latest step B. The episode then ends.
* ``force_finish=True`` (an option): Searchers may only report in step B-2, a Searcher without a
  report gets the forced report ``(no report)`` and a format failure, and a Leader that fails its
  last step hands all reports to the Answerer (forced finish).

The budget counts environment steps, in which only the scheduled agents act, so it is not
PettingZoo's ``max_cycles`` (every agent that many turns, which its ``max_cycles_test`` checks):
``max_cycles`` is refused, naming ``max_steps``.

Rewards (at the end; parts in ``infos[agent]["reward_parts"]``): Leader R_L = 0.9·R_EM +
0.1·min(C_tool, 6)/6 (Eq. 6); Answerer the mean over candidates of R_A,j = c_j; each Searcher slot
the mean over its assignments of 0.9·R_EM + 0.1·b_S; a role's format failure gives it -1. The
finished workflow record (envs/records.py; it holds a wall-clock duration, so it is kept out of
``infos`` to keep them seed-deterministic) is ``env.unwrapped.record``.

Each agent's reward comes with ``env.last()`` at its last turn (sum ``last()``'s rewards per
agent, PettingZoo's way); ``env.rewards`` empties as the agents leave, ``env.unwrapped.final_rewards``
keeps every agent's until the next ``reset``.

Version History
---------------
* v1 (commit 3abcc2b): the role prompts name each action tag by its opening tag alone, with no
  complete tag and no ``<information>`` block, so what an agent sees changed. Added since, with no
  version bump: ``state()``/``state_space``, the observation's ``action_mask`` (``action_kinds``
  kept as an alias), ``final_rewards``, and ``max_cycles`` as an alias of ``max_steps``, since refused;
  the module installs as ``maopd.envs.hierarchical_search_v1``.
* v0 (commit 9fce20c): initial release as ``hierarchical_search_v0``, with its parallel version.
  Within v0 the paper's budget exhaustion became the default (``force_finish=False``, commit
  c00573b): an exhausted budget can end a workflow without an answer.
"""

from __future__ import annotations

from typing import Any

from maopd.envs import prompts
from maopd.envs import rewards as R
from maopd.envs.roles import ANSWERER_ROLE, LEADER_ROLE, SEARCHER_ROLE
from maopd.envs.search_env import SearchEnv, Turn, with_notice
from maopd.envs.team import Workflow
from maopd.envs.workflows import pettingzoo_api

WORKFLOW = Workflow(
    name="hierarchical",
    env_name="hierarchical_search_v1",
    roles=(LEADER_ROLE, SEARCHER_ROLE, ANSWERER_ROLE),
    max_steps=12,
    min_steps=5,
    description="The Leader delegates subtasks to waves of Searchers and selects reports for the Answerer (H-MAS).",
    system="H-MAS",
)


class raw_env(SearchEnv):
    declaration = WORKFLOW

    def _agent_names(self) -> list[str]:
        searchers = [f"searcher_{k}" for k in range(self.config.num_searchers)]
        return ["leader", *searchers, "answerer"]

    def _start_episode(self) -> None:
        self.rounds = 0
        self.leader_out_of_budget = False
        question = prompts.question_message(self.question.question, self.config.num_searchers, self.config.max_rounds)
        self.leader = Turn("leader", "leader", [prompts.system_message("leader"), question])

    def _searcher_last_step(self) -> int:
        return self.max_steps - 2

    def _leader_allowed(self, step: int) -> tuple[str, ...]:
        if self.rounds < self.config.max_rounds and step <= self.max_steps - 3:
            return ("delegate", "select")
        return ("select",)

    def _leader_last_step(self, step: int) -> bool:
        return step >= self.max_steps - 1

    def _schedule(self) -> list[str]:
        if self.answered:
            return []
        if self.active:
            return [agent for agent in self.possible_agents if agent in self.active]
        if self.answer_turn is not None:
            return ["answerer"]
        if self.leader_out_of_budget:
            return []  # force_finish off: the Leader failed its last turn; no Answerer call
        return ["leader"]

    def _allowed(self, agent: str) -> tuple[str, ...]:
        role = self.role_of(agent)
        if role == "leader":
            return self._leader_allowed(self.env_step + 1)
        if role == "answerer":
            return ("answer",)
        return self._searcher_allowed(self.env_step + 1)

    def _messages(self, agent: str) -> list[dict[str, str]]:
        role = self.role_of(agent)
        if role == "leader":
            acting = agent in self.acting_agents() and self._leader_last_step(self.env_step + 1)
            return with_notice(self.leader.messages, "leader") if acting else list(self.leader.messages)
        if role == "answerer":
            return self._answerer_messages()
        return self._searcher_messages(agent)

    def _resolve(self, actions: dict[str, Any]) -> None:
        if "leader" in actions:
            self._resolve_leader(actions["leader"])
        elif "answerer" in actions:
            self._resolve_answer(actions["answerer"])
        else:
            self._resolve_searchers(actions)
            if not self.active:
                reports = self.reports[self._wave_start :]
                self.leader.messages.append(
                    prompts.reports_message([(r["number"], r["task"], r["text"]) for r in reports])
                )

    def _resolve_leader(self, action: Any) -> None:
        step = self.env_step
        allowed = self._leader_allowed(step)
        leader = self.leader
        if self._leader_last_step(step):
            leader.messages = with_notice(leader.messages, "leader")
        text, parsed = self._take_turn("leader", leader, action, allowed)
        self._log(f"[step {step}] leader: {' '.join(text.split())[:200]}")
        if parsed.kind == "delegate":
            self.rounds += 1
            self.counters.delegation_rounds += 1
            self._wave_start = len(self.reports)
            kept = parsed.subtasks[: self.config.num_searchers]
            self.dropped_subtasks.extend(parsed.subtasks[self.config.num_searchers :])
            for k, task in enumerate(kept):
                agent = f"searcher_{k}"
                self.subtasks.append({"wave": self.rounds, "agent": agent, "task": task})
                self._assign(agent, self.rounds, task)
            self._log(f"  wave {self.rounds}: {len(kept)} subtasks")
        elif parsed.kind == "select":
            numbers = [r["number"] for r in self.reports]
            chosen = numbers if parsed.selection is None else [n for n in parsed.selection if n in numbers]
            self._start_answer(chosen)
            self._log(f"  selected reports {chosen}")
        else:
            leader.format_failed = True
            if self._leader_last_step(step) and not self.config.force_finish:
                self.leader_out_of_budget = True
                self._log("  budget exhausted without a selection: the workflow ends without an answer")
            elif self._leader_last_step(step):
                self._start_answer([r["number"] for r in self.reports])
                self._log("  forced finish: all reports go to the Answerer")
            else:
                leader.messages.append(prompts.feedback_message(parsed.error or "", self._leader_allowed(step + 1)))

    def _instructions(self, agent: str) -> str:
        if agent == "leader":
            return prompts.team_instructions(self.config.num_searchers, self.config.max_rounds)
        return ""

    def _leader_reward(self, r_em: float) -> float:
        return R.leader_reward(r_em, self.counters.tool_steps, self.leader.format_failed)

    def _turns(self) -> list[Turn]:
        return [self.leader, *super()._turns()]


env, parallel_env = pettingzoo_api(raw_env)
