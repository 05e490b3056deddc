"""Cascade search (C-MAS): one Searcher, then the Answerer.

=====================  ==================================================================
Import                 ``from maopd.envs import cascade_search_v1``
Actions                Text (Answerer: Tuple of ``num_candidates`` Texts when > 1)
Parallel API           Yes (``parallel_env``)
Agents                 ``agents = ["searcher_0", "answerer"]``
Observation            Dict(role: Text, messages: Sequence(Dict(role, content)), action_mask: MultiBinary(5))
State                  ``state()`` in ``state_space``: question, histories, acting, step and round counters
Budget                 5 environment steps (``max_steps``)
=====================  ==================================================================

The Searcher receives the question and acts ReAct-style: each step it writes
``<search>query</search>`` (the top-``topk`` passages come back inside ``<information>``) or
``<report>…</report>``. The Answerer then answers from the report with ``<answer>…</answer>``,
one text per candidate (``num_candidates``: 5 in training, 1 in evaluation).

Budget rule: the Searcher may act in steps 1 … ``max_steps``-1; if it has not reported by then,
the episode ends without an Answerer call (``counters["no_answer"]``, the paper's failure). The
Answerer acts in the step after the report, at the latest in step ``max_steps``; the episode
ends after it. With ``force_finish=True`` the Searcher may only report in step ``max_steps``-1
(its observation says so and ``action_mask`` masks ``search``), and a Searcher that has not
reported then gets the forced report ``(no report)`` and a format failure.

The budget counts environment steps, in which only the scheduled agents act, so it is not
PettingZoo's ``max_cycles`` (every agent that many turns, which its ``max_cycles_test`` checks):
``max_cycles`` is refused, naming ``max_steps``.

Rewards (at the end; parts in ``infos[agent]["reward_parts"]``): the Searcher gets
R_S = 0.9·R_EM + 0.1·b_S, the Answerer the mean over candidates of R_A,j = c_j, and any role with
a format failure -1 (see ``maopd.envs.rewards``). The finished workflow record (envs/records.py; it holds
a wall-clock duration, so it is kept out of ``infos`` to keep them seed-deterministic) is ``env.unwrapped.record``.

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
  the module installs as ``maopd.envs.cascade_search_v1``.
* v0 (commit 9fce20c): initial release as ``cascade_search_v0``, with its parallel version. Within
  v0 the paper's budget exhaustion became the default (``force_finish=False``, commit c00573b): a
  Searcher that has not reported in time ends the workflow without an answer.
"""

from __future__ import annotations

from typing import Any

from maopd.envs.roles import ANSWERER_ROLE, SEARCHER_ROLE
from maopd.envs.search_env import SearchEnv
from maopd.envs.team import Workflow
from maopd.envs.workflows import pettingzoo_api

WORKFLOW = Workflow(
    name="cascade",
    env_name="cascade_search_v1",
    roles=(SEARCHER_ROLE, ANSWERER_ROLE),
    max_steps=5,
    min_steps=2,
    description="One Searcher answers the question ReAct-style, then the Answerer answers from its report (C-MAS).",
    system="C-MAS",
)


class raw_env(SearchEnv):
    declaration = WORKFLOW

    def _agent_names(self) -> list[str]:
        return ["searcher_0", "answerer"]

    def _start_episode(self) -> None:
        self._assign("searcher_0", 1, self.question.question)

    def _searcher_last_step(self) -> int:
        return self.max_steps - 1

    def _schedule(self) -> list[str]:
        if self.answered:
            return []
        if self.active:
            return ["searcher_0"]
        if self.answer_turn is None:
            if not self.reports:
                return []  # force_finish off and the Searcher never reported: no Answerer call
            self._start_answer([report["number"] for report in self.reports])
        return ["answerer"]

    def _allowed(self, agent: str) -> tuple[str, ...]:
        if agent == "answerer":
            return ("answer",)
        return self._searcher_allowed(self.env_step + 1)

    def _messages(self, agent: str) -> list[dict[str, str]]:
        if agent == "answerer":
            return self._answerer_messages()
        return self._searcher_messages(agent)

    def _resolve(self, actions: dict[str, Any]) -> None:
        if "answerer" in actions:
            self._resolve_answer(actions["answerer"])
        else:
            self._resolve_searchers(actions)


env, parallel_env = pettingzoo_api(raw_env)
