"""``solve`` functions for the runner: a workflow environment played by a team policy.

``team_solver`` plays one episode per (question, seed) with ``envs.episode.run_episode``. It asks
for one answer candidate per answering request, as the paper's evaluation does. Sampling
temperature and top-p belong to the policy (see ``EvalSettings``); the scripted team ignores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.policy import Policy
from benchmarks.eval.runner import Solve
from envs.datasets import Question
from envs.retrieval.corpus import Corpus

WORKFLOWS = ("hierarchical", "cascade")


def debugging_policy(name: str, seed: int = 0) -> Policy:
    """The rule-based teams that need no model: ``scripted``, or ``scripted-noisy-answerer``
    (the scripted Leader and Searchers with a misbehaving Answerer, which exercises the failure
    taxonomy and the flexible extractor)."""
    from agents.misbehaving import MisbehavingPolicy
    from agents.policy import RoleRouter
    from agents.scripted import ScriptedAnswerer, ScriptedLeader, ScriptedSearcher

    answerers = {"scripted": ScriptedAnswerer(), "scripted-noisy-answerer": MisbehavingPolicy(seed, valid_rate=0.5)}
    if name not in answerers:
        raise ValueError(f"policy: unknown policy {name!r}; expected one of {sorted(answerers)}")
    return RoleRouter({"leader": ScriptedLeader(), "searcher": ScriptedSearcher(), "answerer": answerers[name]})


def team_solver(workflow: str, policy: Policy, corpus: Corpus, questions: Sequence[Question], **env_options: Any) -> Solve:
    """A ``solve`` over one environment (one retriever index) built for ``questions``."""
    from envs import cascade_search_v0, hierarchical_search_v0
    from envs.episode import run_episode

    if workflow not in WORKFLOWS:
        raise ValueError(f"workflow: unknown workflow {workflow!r}; expected one of {WORKFLOWS}")
    module = hierarchical_search_v0 if workflow == "hierarchical" else cascade_search_v0
    env = module.env(questions=list(questions), corpus=corpus, num_candidates=1, **env_options)

    def solve(batch: list[Question], seeds: list[int]) -> list[dict[str, Any]]:
        return [run_episode(env, policy, seed=seed, options={"question": q}) for q, seed in zip(batch, seeds)]

    return solve
