"""RLlib's EnvRunner samples the option-mode environments through both registration helpers."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.rllib")

from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule

from training.rllib.envs import (
    ENV_NAMES,
    SHARED_POLICY,
    make_multi_agent_env,
    register_envs,
    shared_policy_mapping,
)


@pytest.mark.parametrize("api", ["aec", "parallel"])
@pytest.mark.parametrize("workflow", ["cascade", "hierarchical"])
def test_env_runner_samples_complete_episodes(api, workflow):
    register_envs()
    module = RLModuleSpec(module_class=ActionMaskingTorchRLModule, model_config={"head_fcnet_hiddens": (16,)})
    config = (
        PPOConfig()
        # forced finish: a random policy never reports in time, and the Answerer should act too
        .environment(ENV_NAMES[api], env_config={"workflow": workflow, "split": "test", "force_finish": True})
        .multi_agent(policies={SHARED_POLICY}, policy_mapping_fn=shared_policy_mapping)
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={SHARED_POLICY: module}))
        .env_runners(num_env_runners=0)
        .debugging(seed=0)
    )
    runner = MultiAgentEnvRunner(config=config)
    episodes = runner.sample(num_episodes=3)
    runner.stop()
    assert len(episodes) == 3 and all(e.is_done for e in episodes)
    first = "leader" if workflow == "hierarchical" else "searcher_0"
    for episode in episodes:
        assert {first, "answerer"} <= set(episode.agent_ids)
        # Rewards are the environment's role rewards: each lies in [-1, 1].
        for agent_episode in episode.agent_episodes.values():
            assert all(-1.0 <= r <= 1.0 for r in agent_episode.get_rewards())


def test_parallel_adapter_only_asks_scheduled_agents():
    env = make_multi_agent_env({"workflow": "hierarchical", "api": "parallel", "split": "test"})
    observations, _ = env.reset(seed=0)
    assert list(observations) == ["leader"]
    observations, *_ = env.step({"leader": 0})
    assert observations and all(obs["action_mask"].sum() > 0 for obs in observations.values())


def test_unknown_api_is_named():
    with pytest.raises(ValueError, match="api="):
        make_multi_agent_env({"api": "vector"})
