"""MultiAgent-OPD: train hierarchical teams of LLM agents with RL and on-policy distillation.

One import root, in layers that import only downwards: ``maopd.base`` (the shared base: configs,
errors, files, paths), ``maopd.envs`` (PettingZoo and Gymnasium environments), ``maopd.agents``
(policies and teams), ``maopd.training`` (rollouts, advantages, PPO, the stage trainers),
``maopd.evaluation`` (the evaluation protocol), ``maopd.pipeline`` (the main job), ``maopd.study``
(the testbed's gates, pre-registration and report) and ``maopd.commands`` with ``maopd.cli`` (the
``maopd`` command line). Importing this package imports none of them.
"""
