"""Multi-agent PPO with one shared policy on the option-mode search environment, with RLlib.

Every agent (Leader, Searchers, Answerer) maps to one action-masking PPO module; the role is a
feature of the observation. Rewards are the environment's role rewards (text mode's, unchanged).
After every iteration the greedy policy plays held-out questions (split ``test``) and its exact
match is recorded; the run writes ``curve.json`` and ``curve.png`` to ``--out``.

    python -m training.rllib.train_ppo --workflow hierarchical --iterations 12 --out runs/rllib_ppo

Ray keeps its temporary files under ``--out``; it runs with 2 CPUs and no dashboard.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from envs.option.wrapper import option_env, play_options
from maopd.base.json_files import write_json
from training.rllib.envs import (
    ENV_NAMES,
    SHARED_POLICY,
    init_local_ray,
    register_envs,
    shared_policy_mapping,
)


def ppo_config(workflow: str, seed: int, batch: int, lr: float):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule

    module = RLModuleSpec(module_class=ActionMaskingTorchRLModule, model_config={"head_fcnet_hiddens": (64, 64)})
    return (
        PPOConfig()
        .environment(ENV_NAMES["aec"], env_config={"workflow": workflow, "split": "train"})
        .multi_agent(policies={SHARED_POLICY}, policy_mapping_fn=shared_policy_mapping)
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={SHARED_POLICY: module}))
        .env_runners(num_env_runners=0, num_envs_per_env_runner=8)
        .learners(num_learners=0)
        .training(
            train_batch_size_per_learner=batch,
            minibatch_size=128,
            num_epochs=6,
            lr=lr,
            gamma=1.0,
            lambda_=0.95,
            entropy_coeff=0.01,
        )
        .debugging(seed=seed)
    )


def greedy_accuracy(module, workflow: str, num_questions: int) -> dict[str, float]:
    """Exact match and searches per workflow of the greedy shared policy on the dev split (test stays
    sealed for the report)."""
    env = option_env(workflow, split="dev")
    ems, searches = [], []

    def act(agent: str, obs: dict[str, np.ndarray]) -> int:
        batch = {"obs": {key: torch.as_tensor(value)[None] for key, value in obs.items()}}
        with torch.no_grad():
            logits = module.forward_inference(batch)["action_dist_inputs"][0]
        return int(torch.argmax(logits))

    for index in range(num_questions):
        record = play_options(env, act, {"question_index": index})
        ems.append(record["rewards"]["em"])
        searches.append(record["counters"]["search_actions"])
    return {"em": float(np.mean(ems)), "searches": float(np.mean(searches))}


def plot(curve: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [row["agent_steps"] for row in curve]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, [row["test_em"] for row in curve], marker="o")
    ax.set_xlabel("agent steps sampled (count)")
    ax.set_ylabel("greedy EM, test split (fraction)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflow", choices=["cascade", "hierarchical"], default="hierarchical")
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--batch", type=int, default=1500, help="agent steps per PPO iteration")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-questions", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("runs/rllib_ppo"))
    args = parser.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # tiny networks: extra threads only contend on a small machine
    init_local_ray(args.out)
    register_envs()
    algo = ppo_config(args.workflow, args.seed, args.batch, args.lr).build_algo()
    module = algo.get_module(SHARED_POLICY)
    started = time.perf_counter()
    curve = [
        {
            "iteration": 0,
            "agent_steps": 0,
            "train_return_mean": float("nan"),
            "seconds": 0.0,
            **{f"test_{k}": v for k, v in greedy_accuracy(module, args.workflow, args.eval_questions).items()},
        }
    ]
    for iteration in tqdm(range(1, args.iterations + 1), desc="PPO iterations"):
        result = algo.train()
        runners = result["env_runners"]
        test = greedy_accuracy(algo.get_module(SHARED_POLICY), args.workflow, args.eval_questions)
        curve.append(
            {
                "iteration": iteration,
                "agent_steps": int(
                    runners["num_agent_steps_sampled_lifetime"]
                    if np.isscalar(runners["num_agent_steps_sampled_lifetime"])
                    else sum(runners["num_agent_steps_sampled_lifetime"].values())
                ),
                "train_return_mean": float(runners["episode_return_mean"]),
                "seconds": time.perf_counter() - started,
                **{f"test_{k}": v for k, v in test.items()},
            }
        )
        tqdm.write(json.dumps(curve[-1]))
    algo.stop()
    command = " ".join(argv if argv is not None else sys.argv[1:])
    summary = {
        "command": f"python -m training.rllib.train_ppo {command}",
        "args": {k: str(v) for k, v in vars(args).items()},
        "curve": curve,
    }
    write_json(args.out / "curve.json", summary, indent=2)
    plot(
        curve,
        args.out / "curve.png",
        f"RLlib multi-agent PPO, shared policy, option mode, {args.workflow} (seed {args.seed})",
    )
    return summary


if __name__ == "__main__":
    main()
