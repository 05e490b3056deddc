"""Policies: scripted, expert, noisy and misbehaving teams, HF / vLLM / OpenAI-compatible LLMs.

Importing this package registers the Gymnasium single-role environments (``maopd.envs.option.single_role``,
option-mode actions, the other roles played by the expert team: ``maopd.agents.expert_team.single_role_env``)
under the ``maopd`` namespace::

    import maopd.agents, gymnasium
    env = gymnasium.make("maopd/HierarchicalSearcher-v1")          # or any of GYMNASIUM_IDS
    env = gymnasium.make("maopd/SingleRole-v1", role="answerer", workflow="cascade", split="test")

Without importing it first, ``gymnasium.make("maopd.agents:maopd/HierarchicalSearcher-v1")`` does both.
The multi-agent environments (``maopd.envs.hierarchical_search_v1``, ``maopd.envs.cascade_search_v1``, their
option mode) are PettingZoo environments, made with their modules' ``env()``, not ``gymnasium.make``.
"""

GYMNASIUM_IDS = {
    "maopd/SingleRole-v1": {},
    "maopd/HierarchicalLeader-v1": {"role": "leader", "workflow": "hierarchical"},
    "maopd/HierarchicalSearcher-v1": {"role": "searcher", "workflow": "hierarchical"},
    "maopd/HierarchicalAnswerer-v1": {"role": "answerer", "workflow": "hierarchical"},
    "maopd/CascadeSearcher-v1": {"role": "searcher", "workflow": "cascade"},
    "maopd/CascadeAnswerer-v1": {"role": "answerer", "workflow": "cascade"},
}


def register_gymnasium_envs() -> None:
    """Register ``GYMNASIUM_IDS`` (idempotent); the entry point is imported only by ``make``."""
    import gymnasium

    for env_id, kwargs in GYMNASIUM_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point="maopd.agents.expert_team:single_role_env", kwargs=kwargs)


register_gymnasium_envs()
