"""The SynthWiki expert team: every role played by rule, from the text an LLM would see.

* Leader: parses the question into a chain of hops (or a comparison), delegates the next
  unresolved hop as its sub-question (both look-ups of a comparison in one wave), reads the
  reports, and selects all reports once every hop is resolved.
* Searcher: parses its task the same way, searches the sub-question of the next unresolved hop
  (then the bare entity name if that missed), reads the facts in the passages, and reports the
  resolved hops as canonical fact sentences. Given a whole multi-hop question (the cascade
  workflow) it searches hop after hop.
* Answerer: resolves the question's chain through the facts in the reports and answers.
* Solver (the single agent of ``maopd.envs.single_search_v1``): searches hop after hop exactly as a
  Searcher given the whole question does, then answers with the final value as the Answerer
  does, from the passages instead of reports.

The experts never read the world's graph: they parse questions, passages and reports with
``maopd.envs.synthwiki.grammar``, so their accuracy measures how solvable the world is by search.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from maopd.envs.actions import action_contents, parse_subtasks
from maopd.envs.option.single_role import SingleRoleEnv
from maopd.envs.policy import AgentOutput, AgentTurn, RoleRouter, RolesByRule
from maopd.envs.prompts import NO_FACTS, parse_reports, passage_texts, user_texts
from maopd.envs.synthwiki.grammar import parse_question, subquestion
from maopd.envs.synthwiki.knowledge import Knowledge, Step, final_answer, resolve


class _Role:
    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        return [AgentOutput([self.decide(turn)] * turn.num_candidates) for turn in turns]

    def decide(self, turn: AgentTurn) -> str:
        raise NotImplementedError


class ExpertLeader(_Role):
    def decide(self, turn: AgentTurn) -> str:
        question = turn.task
        plan = parse_question(question)
        knowledge = Knowledge(text for message in user_texts(turn, "Reports:") for _, _, text in parse_reports(message))
        delegated = {task for content in action_contents(turn.messages, "delegate") for task in parse_subtasks(content)}
        if plan is None:
            wanted = [] if delegated else [question]
        else:
            _, missing = resolve(plan, knowledge)
            wanted = [subquestion(step.predicate, step.subject) for step in missing]
            wanted = [task for task in wanted if task not in delegated]
        if wanted and "delegate" in turn.allowed:
            return "<delegate>\n" + "\n".join(wanted) + "\n</delegate>"
        return "<select>all</select>"


def next_search(turn: AgentTurn, task: str) -> tuple[str | None, list[Step]]:
    """The expert's next query for ``task`` given the passages of ``turn`` (None when every hop is
    resolved or every query was tried: the sub-question of the next unresolved hop, then its bare
    entity name), and the hops resolved so far."""
    plan = parse_question(task)
    if plan is None:
        queries, resolved = [task], []
    else:
        resolved, missing = resolve(plan, Knowledge(passage_texts(turn)))
        queries = [q for step in missing for q in (subquestion(step.predicate, step.subject), step.subject)]
    searched = set(action_contents(turn.messages, "search"))
    fresh = [query for query in queries if query not in searched]
    return (fresh[0] if fresh else None), resolved


def answer_text(question: str, knowledge: Knowledge) -> str:
    """The expert's answer to ``question`` from ``knowledge`` ('unknown' when it cannot resolve it)."""
    plan = parse_question(question)
    answer = final_answer(plan, knowledge) if plan is not None else None
    return f"<answer>{answer or 'unknown'}</answer>"


class ExpertSearcher(_Role):
    def decide(self, turn: AgentTurn) -> str:
        query, resolved = next_search(turn, turn.task)
        if query is not None and "search" in turn.allowed:
            return f"<search>{query}</search>"
        text = " ".join(step.sentence() for step in resolved) or NO_FACTS
        return f"<report>{text}</report>"


class ExpertAnswerer(_Role):
    def decide(self, turn: AgentTurn) -> str:
        body = turn.messages[-1]["content"]
        return answer_text(turn.task, Knowledge(text for _, _, text in parse_reports(body)))


class ExpertSolver(_Role):
    def decide(self, turn: AgentTurn) -> str:
        question = turn.task
        query, _ = next_search(turn, question)
        if query is not None and "search" in turn.allowed:
            return f"<search>{query}</search>"
        return answer_text(question, Knowledge(passage_texts(turn)))


def expert_team() -> RoleRouter:
    """Every role, the single agent's solver included: one policy for every workflow (a role the
    experts were not written for plays by its declared rule)."""
    return RoleRouter(
        {
            "leader": ExpertLeader(),
            "searcher": ExpertSearcher(),
            "answerer": ExpertAnswerer(),
            "solver": ExpertSolver(),
        },
        others=RolesByRule(),
    )


def single_role_env(role: str = "searcher", workflow: str = "hierarchical", **options: Any) -> SingleRoleEnv:
    """One role as a Gymnasium env, the other roles played by the expert team (unless ``others`` is given)."""
    others = options.pop("others", None) or expert_team()
    return SingleRoleEnv(role, workflow, others=others, **options)
