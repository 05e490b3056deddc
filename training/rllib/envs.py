"""Registration helpers: the option-mode search environments as RLlib ``MultiAgentEnv``s.

This module imports Ray: install the ``rllib`` extra.

* ``api="aec"`` wraps the AEC environment in RLlib's ``PettingZooEnv`` (one agent acts per RLlib
  step; a wave's Searchers act one after another within one environment step).
* ``api="parallel"`` wraps the parallel environment in ``ActingAgentsParallelEnv``: like RLlib's
  ``ParallelPettingZooEnv``, but it hands out observations only for the agents scheduled to act
  (the Leader, or a wave's Searchers, or the Answerer), so RLlib never asks a waiting agent (whose
  menu is empty) for an action. At the end every agent gets its final observation and reward.

Every agent has the same spaces, so one policy with shared parameters (the role is in the
features) can play all roles, as the shared LLM does in text mode.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from maopd.base.atomic import output_directory
from maopd.envs.option.wrapper import option_env, option_parallel_env
from maopd.training.rllib import missing_ray

try:
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv, PettingZooEnv
except ModuleNotFoundError as exc:
    if (exc.name or "ray").split(".")[0] != "ray":
        raise
    raise missing_ray(exc) from None

ENV_NAMES = {"aec": "search_options", "parallel": "search_options_parallel"}
SHARED_POLICY = "shared"


def make_multi_agent_env(config: dict[str, Any] | None = None):
    """An RLlib ``MultiAgentEnv`` from ``config``: ``workflow``, ``api`` ("aec" | "parallel"),
    ``menu_size`` and any environment option (``split``, ``max_steps``, …)."""
    options = dict(config or {})
    api = options.pop("api", "aec")
    if api == "aec":
        return PettingZooEnv(option_env(**options))
    if api == "parallel":
        return ActingAgentsParallelEnv(option_parallel_env(**options))
    raise ValueError(f"api={api!r} is invalid; expected 'aec' or 'parallel'")


def register_envs() -> dict[str, str]:
    """Register both APIs with Ray's registry (``config.environment(ENV_NAMES["aec"], ...)``)."""
    from ray.tune.registry import register_env

    for api, name in ENV_NAMES.items():
        register_env(name, lambda config, api=api: make_multi_agent_env({**config, "api": api}))
    return dict(ENV_NAMES)


def shared_policy_mapping(agent_id: str, episode: Any = None, **kwargs: Any) -> str:
    """Every agent (Leader, Searchers, Answerer) plays with the one shared policy."""
    return SHARED_POLICY


def init_local_ray(run_dir: str | Path, num_cpus: int = 2) -> None:
    """Start a local Ray with its temporary files under ``run_dir`` (nothing in the home folder).

    Every worker starts with one ``PYTHONHASHSEED`` (the caller's, else 0): Python salts string
    hashes per process, and RLlib's learner iterates hash-ordered collections, so two runs of one
    seed would otherwise train differently.

    ``RAY_AUTH_MODE=token`` would make Ray write a token to ``~/.ray``; the local cluster here
    listens on 127.0.0.1 only, so token authentication is left disabled unless the caller set it.
    """
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    temp_dir = Path(run_dir).resolve() / "ray_tmp"
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        _temp_dir=str(output_directory(temp_dir, library_links=True)),
        log_to_driver=False,
        ignore_reinit_error=True,
        runtime_env={"env_vars": {"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}},
    )


class ActingAgentsParallelEnv(ParallelPettingZooEnv):
    """``ParallelPettingZooEnv`` that asks only the scheduled agents to act (see the module docstring)."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observations, infos = super().reset(seed=seed, options=options)
        return self._acting_only(observations, infos)

    def step(self, action_dict):
        observations, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if terminateds["__all__"] or truncateds["__all__"]:
            return observations, rewards, terminateds, truncateds, infos
        observations, infos = self._acting_only(observations, infos)
        return observations, rewards, terminateds, truncateds, infos

    def _acting_only(self, observations: dict, infos: dict) -> tuple[dict, dict]:
        acting = self.par_env.acting_agents()
        return {a: observations[a] for a in acting}, {a: infos[a] for a in acting}
