"""The Gymnasium ids of the single-role environments, registered by an explicit call.

``register_envs()`` registers ``GYMNASIUM_IDS`` under the ``maopd`` namespace: each is the
single-role environment of one role of a workflow (``maopd.envs.option.single_role``, option-mode
actions), the other roles played by the expert team (``maopd.agents.expert_team.single_role_env``)::

    import gymnasium
    from maopd.agents.registration import register_envs

    register_envs()
    env = gymnasium.make("maopd/HierarchicalSearcher-v1")          # or any of GYMNASIUM_IDS
    env = gymnasium.make("maopd/SingleRole-v1", role="answerer", workflow="cascade", split="test")

Importing a module of the package registers nothing: a registry changed as a side effect of an
import is one a reader cannot trace. The multi-agent environments (``maopd.envs.hierarchical_search_v1``,
``maopd.envs.cascade_search_v1``, their option mode) are PettingZoo environments, made with their
modules' ``env()``, not ``gymnasium.make``.
"""

from __future__ import annotations

GYMNASIUM_IDS = {
    "maopd/SingleRole-v1": {},
    "maopd/HierarchicalLeader-v1": {"role": "leader", "workflow": "hierarchical"},
    "maopd/HierarchicalSearcher-v1": {"role": "searcher", "workflow": "hierarchical"},
    "maopd/HierarchicalAnswerer-v1": {"role": "answerer", "workflow": "hierarchical"},
    "maopd/CascadeSearcher-v1": {"role": "searcher", "workflow": "cascade"},
    "maopd/CascadeAnswerer-v1": {"role": "answerer", "workflow": "cascade"},
}


def register_envs() -> list[str]:
    """Register ``GYMNASIUM_IDS`` with Gymnasium (idempotent) and return them; the entry point is
    imported only by ``gymnasium.make``."""
    import gymnasium

    for env_id, kwargs in GYMNASIUM_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point="maopd.agents.expert_team:single_role_env", kwargs=kwargs)
    return list(GYMNASIUM_IDS)
