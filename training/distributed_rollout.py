"""Team rollouts spread over Ray actors: each worker holds environments, a policy and a retriever.

``RayRolloutCollector.collect(questions, G, seed)`` cuts the questions into one contiguous shard
per worker. Every worker runs the single-process ``TeamRolloutCollector`` on its shard with the
questions' global positions as seed keys, so the merged ``TeamBatch`` is identical to what one
process would collect for the same seed (tested), whatever the number of workers.

Retrieval: point the environments at one shared server with
``env_kwargs={"retriever": RetrieverConfig(kind="http", url=...)}`` (``maopd retriever serve``), as
Search-R1 users run it; by default each worker builds the in-process BM25 index.

Weights: after a PPO update the trainer saves the policy (HF format) and calls
``sync_weights(model_dir)``; every worker reloads it before the next collection.

Failures: if a worker dies, its shard is re-run on a fresh worker (``max_restarts`` times per
collection); after that the collection raises ``RolloutError`` naming the shard. Nothing is
silently dropped: the merged batch always holds every (question, trajectory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from maopd.agents.sampling import SamplingConfig
from maopd.base.config import check_fields, checked
from maopd.envs.datasets import Question
from maopd.training.ray_cluster import init_ray
from maopd.training.rollout import TeamBatch


class RolloutError(RuntimeError):
    """A shard of a collection could not be completed."""


class RolloutWorker:
    """Runs inside a Ray actor process: a policy loaded from ``model_dir`` plus environments."""

    def __init__(
        self, model_dir: str, workflow: str, env_kwargs: dict[str, Any], sampling: SamplingConfig, torch_threads: int
    ):
        import torch

        from maopd.agents.hf_policy import HFPolicy
        from maopd.agents.tiny_model import load_model
        from maopd.envs.workflows import env_module
        from maopd.training.rollout import TeamRolloutCollector

        torch.set_num_threads(torch_threads)
        model, tokenizer = load_model(model_dir)
        self.policy = HFPolicy(model, tokenizer, sampling)
        module = env_module(workflow)
        self.collector = TeamRolloutCollector(lambda: module.env(**env_kwargs), self.policy)

    def collect(self, questions: list[Question], group_size: int, seed: int, group_keys: list[int]) -> TeamBatch:
        return self.collector.collect(questions, group_size, seed, group_keys)

    def load_weights(self, model_dir: str) -> None:
        from maopd.agents.tiny_model import load_model

        model, _ = load_model(model_dir)
        self.policy.model.load_state_dict(model.state_dict())

    def ping(self) -> int:
        import os

        return os.getpid()


@dataclass
class RayRolloutConfig:
    num_workers: int = checked(
        2, ge=1, help="Ray actors the rollouts are spread over, each collecting one contiguous shard of the questions."
    )
    torch_threads_per_worker: int = checked(1, help="torch threads each worker uses.")
    address: str | None = checked(
        None, help="The Ray cluster to join; null starts a local one under the run directory."
    )
    max_restarts: int = checked(
        2,
        help="How many times a collection replaces a dead worker and re-runs its shard before it fails with "
        "RolloutError.",
    )
    env_kwargs: dict[str, Any] = checked(
        default_factory=dict,
        help="Keyword arguments of every worker's environments, e.g. a retriever config that points them all at "
        "one retrieval server; by default each worker builds its own BM25 index.",
    )

    def __post_init__(self) -> None:
        check_fields(self)


class RayRolloutCollector:
    def __init__(
        self,
        model_dir: str | Path,
        workflow: str,
        sampling: SamplingConfig,
        run_dir: str | Path,
        config: RayRolloutConfig | None = None,
    ):
        import ray

        self.config = config or RayRolloutConfig()
        init_ray(run_dir, self.config.address, num_cpus=None if self.config.address else self.config.num_workers)
        self._actor_class = ray.remote(num_cpus=1)(RolloutWorker)
        self.model_dir, self.workflow, self.sampling = str(model_dir), workflow, sampling
        self.workers = [self._start_worker() for _ in range(self.config.num_workers)]
        ray.get([w.ping.remote() for w in self.workers])

    def _start_worker(self):
        return self._actor_class.remote(
            self.model_dir, self.workflow, self.config.env_kwargs, self.sampling, self.config.torch_threads_per_worker
        )

    def collect(self, questions: Sequence[Question], group_size: int, seed: int) -> TeamBatch:
        import ray

        shards = _shards(len(questions), len(self.workers))
        futures = {k: self._submit(k, questions, shard, group_size, seed) for k, shard in enumerate(shards)}
        parts: dict[int, TeamBatch] = {}
        restarts = 0
        while futures:
            for k, future in list(futures.items()):
                try:
                    parts[k] = ray.get(future)
                except ray.exceptions.RayActorError as exc:
                    if restarts >= self.config.max_restarts:
                        raise RolloutError(
                            f"rollout shard {k} (questions {shards[k].start}–{shards[k].stop - 1}) "
                            f"failed after {restarts} worker restarts: {exc}"
                        ) from exc
                    restarts += 1
                    self.workers[k] = self._start_worker()
                    futures[k] = self._submit(k, questions, shards[k], group_size, seed)
                    continue
                del futures[k]
        return _merge(list(questions), group_size, [(shards[k], parts[k]) for k in range(len(shards))])

    def _submit(self, k: int, questions: Sequence[Question], shard: range, group_size: int, seed: int):
        return self.workers[k].collect.remote([questions[i] for i in shard], group_size, seed, list(shard))

    def sync_weights(self, model_dir: str | Path) -> None:
        import ray

        ray.get([w.load_weights.remote(str(model_dir)) for w in self.workers])

    def shutdown(self) -> None:
        import ray

        for worker in self.workers:
            ray.kill(worker)
        self.workers = []


def _shards(count: int, workers: int) -> list[range]:
    """Contiguous, nearly equal question ranges, one per worker that gets any."""
    size, extra = divmod(count, workers)
    shards, start = [], 0
    for k in range(workers):
        stop = start + size + (k < extra)
        if stop > start:
            shards.append(range(start, stop))
        start = stop
    return shards


def _merge(questions: list[Question], group_size: int, parts: list[tuple[range, TeamBatch]]) -> TeamBatch:
    sequences, records = [], []
    for shard, part in parts:
        sequences.extend(replace(s, group=shard.start + s.group) for s in part.sequences)
        records.extend(part.records)
    return TeamBatch(questions, group_size, sequences, records)
