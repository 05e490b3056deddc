"""``solve`` functions for the runner: a workflow environment played by a team policy.

``team_solver`` plays one episode per (question, seed) with ``envs.episode.run_episode``. It asks
for one answer candidate per answering request, as the paper's evaluation does. Sampling
temperature and top-p belong to the policy (see ``EvalSettings``); the scripted team ignores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.eval.runner import Solve
from envs.datasets import Question
from envs.policy import Policy
from envs.retrieval.corpus import Corpus

WORKFLOWS = ("hierarchical", "cascade")


def debugging_policy(name: str, seed: int = 0) -> Policy:
    """The rule-based teams that need no model: ``scripted``, or ``scripted-noisy-answerer``
    (the scripted Leader and Searchers with a misbehaving Answerer, which exercises the failure
    taxonomy and the flexible extractor)."""
    from agents.misbehaving import MisbehavingPolicy
    from agents.scripted import ScriptedAnswerer, ScriptedLeader, ScriptedSearcher
    from envs.policy import RoleRouter

    answerers = {"scripted": ScriptedAnswerer(), "scripted-noisy-answerer": MisbehavingPolicy(seed, valid_rate=0.5)}
    if name not in answerers:
        raise ValueError(f"policy: unknown policy {name!r}; expected one of {sorted(answerers)}")
    return RoleRouter({"leader": ScriptedLeader(), "searcher": ScriptedSearcher(), "answerer": answerers[name]})


def team_solver(workflow: str, policy: Policy, corpus: Corpus | None, questions: Sequence[Question], **env_options: Any) -> Solve:
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


def checkpoint_solver(
    workflow: str,
    model_dir: str,
    corpus: Corpus | None,
    questions: Sequence[Question],
    temperature: float = 0.6,
    top_p: float = 0.95,
    max_new_tokens: int = 512,
    max_input_tokens: int = 8192,
    **env_options: Any,
) -> Solve:
    """A ``solve`` that plays every role with a saved model (HF format), batched across questions.

    Each ``solve`` call runs its questions as one batched team rollout (``TeamRolloutCollector``,
    one trajectory each); a question's seed keys its sampling, so results do not depend on which
    questions share a batch.
    """
    from agents.hf_policy import HFPolicy
    from agents.sampling import SamplingConfig
    from agents.tiny_model import load_model
    from envs import cascade_search_v0, hierarchical_search_v0
    from training.rollout import TeamRolloutCollector
    from training.trainer import model_source

    if workflow not in WORKFLOWS:
        raise ValueError(f"workflow: unknown workflow {workflow!r}; expected one of {WORKFLOWS}")
    module = hierarchical_search_v0 if workflow == "hierarchical" else cascade_search_v0
    model, tokenizer = load_model(model_source(model_dir))
    sampling = SamplingConfig(temperature, top_p, max_new_tokens, max_input_tokens)
    policy = HFPolicy(model, tokenizer, sampling)
    env_kwargs = {"questions": list(questions), "num_candidates": 1, **env_options}
    if corpus is not None:
        env_kwargs["corpus"] = corpus
    collector = TeamRolloutCollector(lambda: module.env(**env_kwargs), policy)

    def solve(batch: list[Question], seeds: list[int]) -> list[dict[str, Any]]:
        rollouts = collector.collect(batch, 1, seed=0, group_keys=seeds)
        return [row[0] for row in rollouts.records]

    return solve
