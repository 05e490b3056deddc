"""``solve`` functions for the runner: a workflow environment played by a team policy.

``team_solver`` plays one episode per (question, seed) with ``maopd.envs.episode.run_episode``. It asks
for one answer candidate per answering request, as the paper's evaluation does. Sampling
temperature and top-p belong to the policy (``model_policy``); the scripted team ignores them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from maopd.envs.datasets import Question
from maopd.envs.policy import Policy, SamplingSettings
from maopd.envs.records import WorkflowRecord
from maopd.envs.retrieval.corpus import Corpus
from maopd.envs.workflows import env_module
from maopd.evaluation.runner import Solve


def debugging_policy(name: str, seed: int = 0) -> Policy:
    """The rule-based teams that need no model: ``scripted``, or ``scripted-noisy-answerer``
    (the scripted Leader and Searchers with a misbehaving Answerer, which exercises the failure
    taxonomy and the flexible extractor). A role a workflow registers plays by its declared rule."""
    from maopd.agents.misbehaving import MisbehavingPolicy
    from maopd.agents.scripted import ScriptedAnswerer, ScriptedLeader, ScriptedSearcher, ScriptedSolver
    from maopd.envs.policy import RoleRouter, RolesByRule

    answerers = {"scripted": ScriptedAnswerer(), "scripted-noisy-answerer": MisbehavingPolicy(seed, valid_rate=0.5)}
    if name not in answerers:
        raise ValueError(f"policy: unknown policy {name!r}; expected one of {sorted(answerers)}")
    return RoleRouter(
        {
            "leader": ScriptedLeader(),
            "searcher": ScriptedSearcher(),
            "answerer": answerers[name],
            "solver": ScriptedSolver(),
        },
        others=RolesByRule(),
    )


def with_roles(team: Policy, roles: Mapping[str, Policy], workflow: str) -> Policy:
    """``team`` with the roles in ``roles`` played by their own policies instead (``team`` itself
    when there are none)."""
    from maopd.envs.policy import RoleRouter
    from maopd.envs.workflows import workflow_roles

    if not roles:
        return team
    played = workflow_roles(workflow)
    return RoleRouter({role: roles.get(role, team) for role in played}, roles=played)


def team_solver(
    workflow: str, policy: Policy, corpus: Corpus | None, questions: Sequence[Question], **env_options: Any
) -> Solve:
    """A ``solve`` over one environment (one retriever index) built for ``questions``."""
    from maopd.envs.episode import run_episode

    env = env_module(workflow).env(questions=list(questions), corpus=corpus, num_candidates=1, **env_options)

    def solve(batch: list[Question], seeds: list[int]) -> list[WorkflowRecord]:
        return [run_episode(env, policy, seed=seed, options={"question": q}) for q, seed in zip(batch, seeds)]

    return solve


BACKENDS = ("hf", "vllm", "openai")


def model_policy(
    model: str,
    backend: str = "hf",
    temperature: float = SamplingSettings.temperature,
    top_p: float = SamplingSettings.top_p,
    max_new_tokens: int = SamplingSettings.max_new_tokens,
    max_input_tokens: int = SamplingSettings.max_input_tokens,
    device: str = "cpu",
    dtype: str = "float32",
    seed: int = 0,
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
) -> Policy:
    """The policy that plays every role, on one of the backends the training side uses.

    - ``hf``: ``HFPolicy`` over ``load_model`` (a model directory, a run directory or
      ``checkpoints/step_N``, or a Hugging Face hub id) on ``device`` in ``dtype``.
    - ``vllm``: ``VLLMPolicy`` (the vLLM venv of ``scripts/setup_vllm.sh``) on a local model.
    - ``openai``: ``OpenAIPolicy`` against an OpenAI-compatible server at ``base_url`` serving
      ``model``; the API key comes from the environment variable ``api_key_env``.
    """
    from maopd.agents.sampling import SamplingConfig
    from maopd.training.model_loading import DTYPES, model_source

    if backend not in BACKENDS:
        raise ValueError(f"backend: unknown backend {backend!r}; expected one of {BACKENDS}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype: unknown dtype {dtype!r}; expected one of {sorted(DTYPES)}")
    if backend == "openai":
        from maopd.agents.openai_policy import OpenAIPolicy, OpenAIPolicyConfig

        if not base_url:
            raise ValueError("--base-url: the openai backend needs the server's URL (e.g. http://127.0.0.1:8000/v1)")
        return OpenAIPolicy(OpenAIPolicyConfig(base_url, model, api_key_env, temperature, top_p, max_new_tokens))
    sampling = SamplingConfig(temperature, top_p, max_new_tokens, max_input_tokens)
    if backend == "vllm":
        from maopd.agents.vllm_policy import VLLMPolicy

        return VLLMPolicy(model_source(model), sampling, seed=seed, dtype=dtype)
    from maopd.agents.hf_policy import HFPolicy
    from maopd.agents.tiny_model import load_model

    loaded, tokenizer = load_model(model_source(model), DTYPES[dtype], device)
    return HFPolicy(loaded, tokenizer, sampling, seed=seed)


def checkpoint_solver(
    workflow: str,
    model_dir: str,
    corpus: Corpus | None,
    questions: Sequence[Question],
    temperature: float = SamplingSettings.temperature,
    top_p: float = SamplingSettings.top_p,
    max_new_tokens: int = SamplingSettings.max_new_tokens,
    max_input_tokens: int = SamplingSettings.max_input_tokens,
    device: str = "cpu",
    dtype: str = "float32",
    backend: str = "hf",
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    forced_starts: Mapping[str, str] | None = None,
    **env_options: Any,
) -> Solve:
    """A ``solve`` that plays every role with one model (see ``model_policy`` for ``backend``).

    With ``hf`` and ``vllm``, each ``solve`` call runs its questions as one batched team rollout
    (``TeamRolloutCollector``, one trajectory each); a question's seed keys its sampling, so
    results do not depend on which questions share a batch. The ``openai`` backend returns texts
    only (no token ids): its episodes run one by one through ``team_solver``. ``env_options``
    go to the environment, e.g. ``retriever=`` a retriever built from a ``RetrieverConfig``.
    ``forced_starts`` maps roles to the text each of their calls' first output begins with
    (``maopd.agents.forced_start.ForcedStart``; ``hf`` and ``vllm`` only): those roles' calls then
    leave no token-level record and draw their seeds from the policy's own stream, in batch
    order, not from the question's seed; such a solver measures, it does not train.
    """
    from maopd.agents.forced_start import ForcedStart
    from maopd.training.rollout import TeamRolloutCollector

    module = env_module(workflow)  # refuses an unknown workflow before a model is loaded
    policy = model_policy(
        model_dir,
        backend,
        temperature,
        top_p,
        max_new_tokens,
        max_input_tokens,
        device,
        dtype,
        base_url=base_url,
        api_key_env=api_key_env,
    )
    if backend == "openai":
        if forced_starts:
            raise ValueError("forced_starts: the openai backend returns texts only; use hf or vllm")
        return team_solver(workflow, policy, corpus, questions, **env_options)
    forced = {role: ForcedStart(policy, role, start) for role, start in (forced_starts or {}).items()}
    env_kwargs = {"questions": list(questions), "num_candidates": 1, **env_options}
    if corpus is not None:
        env_kwargs["corpus"] = corpus
    collector = TeamRolloutCollector(lambda: module.env(**env_kwargs), policy, forced)

    def solve(batch: list[Question], seeds: list[int]) -> list[WorkflowRecord]:
        rollouts = collector.collect(batch, 1, seed=0, group_keys=seeds)
        return [row[0] for row in rollouts.records]

    return solve
