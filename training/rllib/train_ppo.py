"""Multi-agent PPO with one shared policy on the option-mode search environment, with RLlib and Tune.

Every agent (Leader, Searchers, Answerer) maps to one action-masking PPO module; the role is a
feature of the observation. Rewards are the environment's role rewards (text mode's, unchanged).
The run goes through ``ray.tune.Tuner`` (trainable ``PPO``), so ``--out`` holds Tune's experiment
directory ``ppo/`` with the trial ``ppo/PPO_0/``: ``progress.csv``, ``result.json``, TensorBoard
event files and checkpoints ``checkpoint_000000/`` … (every ``--checkpoint-every`` iterations and at
the end). Before training and after every iteration the greedy policy plays held-out questions
(split ``dev``; test stays sealed for the report): the results' ``dev`` entry (``em``,
``searches``), with the figure before training as ``dev_before_training`` in the first result.
``curve.json`` and ``curve.png`` in ``--out`` are made from those results.

    python -m maopd.training.rllib.train_ppo --workflow hierarchical --iterations 12 --out runs/rllib_ppo
    python -m maopd.training.rllib.train_ppo --out runs/rllib_ppo --resume     # go on after an interruption
    python -m maopd.training.rllib.train_ppo --restore runs/rllib_ppo/ppo/PPO_0/checkpoint_000011 --out runs/more

``--restore`` starts a new run from a checkpoint's learner state (the shared module's weights and
its optimizer) and EnvRunner state; its iterations count from 0 again. ``--resume`` continues the
experiment already in ``--out`` from its trial's latest checkpoint, with the settings it was started
with (Tune stores them); a finished experiment trains no more. The trained policy:
``Algorithm.from_checkpoint(path).get_module(SHARED_POLICY)``.

Ray keeps its temporary files under ``--out``; it runs with 2 CPUs and no dashboard.
``--keep-checkpoints N`` keeps only the newest N checkpoints (default: every one).

**Determinism**: two runs with the same ``--seed`` write the same ``progress.csv``, wall-clock, throughput
and host columns excepted (tested). The seed reaches RLlib (``PPOConfig.debugging(seed=...)``: the
module's initial weights, minibatch shuffling, and each environment's seed on its first reset); the
worker count is fixed (sampling in the trial's own process, 8 environments); and every Ray worker
starts with one ``PYTHONHASHSEED`` (``init_local_ray``): Python salts string hashes per process,
and RLlib's learner iterates hash-ordered collections, so without it the first update already
differed between two runs of one seed.

The builder behind the script is ``ppo_config(workflow, seed, batch, lr)``, an RLlib ``PPOConfig``
to adapt (``.training(...)``, ``.env_runners(...)``) and build or tune yourself.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from maopd.base.arguments import positive_float, positive_int, seed_int
from maopd.base.atomic import write_path_atomically
from maopd.base.json_files import json_text, write_json
from maopd.envs.option.wrapper import option_env, play_options
from maopd.training.rllib.envs import (
    ENV_NAMES,
    SHARED_POLICY,
    init_local_ray,
    register_envs,
    shared_policy_mapping,
)

EXPERIMENT = "ppo"  # Tune's experiment directory under --out
TRIAL_DIR = "PPO_0"  # the one trial's directory under it (Tune would add a timestamp)
CHECKPOINT_MARKER = "rllib_checkpoint.json"  # RLlib writes it into every Algorithm checkpoint
RUN_SETTINGS = (
    "workflow",
    "iterations",
    "batch",
    "lr",
    "seed",
    "eval_questions",
    "checkpoint_every",
    "keep_checkpoints",
)


def ppo_config(workflow: str, seed: int, batch: int, lr: float):
    """The script's RLlib ``PPOConfig``: one action-masking module shared by every agent of the
    option-mode ``workflow`` (train split), ``batch`` agent steps per iteration, seeded by ``seed``."""
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
            minibatch_size=min(128, batch),  # PPO refuses a minibatch larger than the batch
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
        ems.append(record.rewards.em)
        searches.append(record.counters.search_actions)
    return {"em": float(np.mean(ems)), "searches": float(np.mean(searches))}


def _dev_evaluation_class():
    """``DevEvaluation``, defined on first use: the module imports without Ray (its error message
    names the install command, see ``maopd.training.rllib.envs``)."""
    from ray.rllib.callbacks.callbacks import RLlibCallback
    from ray.rllib.core import COMPONENT_ENV_RUNNER, COMPONENT_LEARNER_GROUP

    class DevEvaluation(RLlibCallback):
        """Restores ``restore`` (a checkpoint directory) when the algorithm is built, and plays
        ``eval_questions`` dev questions greedily before training and after every iteration.

        From a checkpoint it loads the learner group (module weights, optimizer) and the EnvRunner
        (connector state), not the counters: a full restore would carry the checkpoint's iteration
        number over, and ``--iterations`` counts the iterations of this run.
        """

        def __init__(self, workflow: str, eval_questions: int, restore: str | None = None):
            super().__init__()
            self.workflow = workflow
            self.eval_questions = eval_questions
            self.restore = restore
            self.before_training: dict[str, float] | None = None

        def on_algorithm_init(self, *, algorithm, **kwargs) -> None:
            if self.restore is not None:
                for component in (COMPONENT_LEARNER_GROUP, COMPONENT_ENV_RUNNER):
                    if (Path(self.restore) / component).is_dir():
                        algorithm.restore_from_path(Path(self.restore) / component, component=component)
            self.before_training = self._evaluate(algorithm)

        def on_train_result(self, *, algorithm, result: dict, **kwargs) -> None:
            # Tune restores a resumed trial after this algorithm was built: only a first
            # iteration follows the weights ``before_training`` was measured on.
            if result["training_iteration"] == 1:
                result["dev_before_training"] = self.before_training
            result["dev"] = self._evaluate(algorithm)

        def _evaluate(self, algorithm) -> dict[str, float]:
            return greedy_accuracy(algorithm.get_module(SHARED_POLICY), self.workflow, self.eval_questions)

    return DevEvaluation


def _trial_dirname(trial) -> str:
    """A fixed trial directory name, so that the paths under ``--out`` are known in advance."""
    return TRIAL_DIR


def agent_steps(result: dict) -> int:
    """Agent steps sampled so far (RLlib gives one count per agent, or one count)."""
    lifetime = result["env_runners"]["num_agent_steps_sampled_lifetime"]
    return int(lifetime if np.isscalar(lifetime) else sum(lifetime.values()))


def curve_from_results(results: list[dict]) -> list[dict[str, Any]]:
    """One row per iteration from the trial's results (``result.json``, one line per iteration; a
    resumed trial may repeat an iteration done after its last checkpoint: the later row counts),
    after a row for the policy before training."""
    by_iteration = {result["training_iteration"]: result for result in results}
    rows = [by_iteration[i] for i in sorted(by_iteration)]
    curve = []
    if rows and rows[0].get("dev_before_training") is not None:
        before = rows[0]["dev_before_training"]
        curve.append(
            {
                "iteration": 0,
                "agent_steps": 0,
                "train_return_mean": None,  # no episode has been played yet
                "seconds": 0.0,
                **{f"dev_{k}": v for k, v in before.items()},
            }
        )
    for result in rows:
        curve.append(
            {
                "iteration": result["training_iteration"],
                "agent_steps": agent_steps(result),
                "train_return_mean": result["env_runners"].get("episode_return_mean"),
                "seconds": result["time_total_s"],
                **{f"dev_{k}": v for k, v in result["dev"].items()},
            }
        )
    return curve


def read_results(trial_dir: Path) -> list[dict]:
    """The trial's ``result.json`` lines (Tune writes non-finite numbers as bare ``NaN``, which
    Python's parser reads; ``write_json`` turns them into ``null`` in the curve)."""
    lines = (trial_dir / "result.json").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def plot(curve: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [row["agent_steps"] for row in curve]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, [row["dev_em"] for row in curve], marker="o")
    ax.set_xlabel("agent steps sampled (count)")
    ax.set_ylabel("greedy EM, dev split (fraction)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    write_path_atomically(path, lambda temporary: fig.savefig(temporary, dpi=120))
    plt.close(fig)


def parse_args(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="train_ppo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workflow", choices=["cascade", "hierarchical"], default="hierarchical")
    parser.add_argument("--iterations", type=positive_int, default=12)
    parser.add_argument("--batch", type=positive_int, default=1500, help="agent steps per PPO iteration")
    parser.add_argument("--lr", type=positive_float, default=1e-3)
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--eval-questions", type=positive_int, default=100)
    parser.add_argument("--out", type=Path, default=Path("runs/rllib_ppo"))
    parser.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=1,
        help="iterations between checkpoints (one is kept at the end too)",
    )
    parser.add_argument(
        "--keep-checkpoints",
        type=positive_int,
        default=None,
        metavar="N",
        help="keep only the newest N checkpoints (default: every one)",
    )
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--restore", type=Path, metavar="CHECKPOINT", help="start from this checkpoint's state")
    start.add_argument("--resume", action="store_true", help="continue the interrupted experiment in --out")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # Tune's storage_path must be absolute
    experiment = args.out / EXPERIMENT
    if args.restore is not None:
        args.restore = args.restore.resolve()
        if not (args.restore / CHECKPOINT_MARKER).is_file():
            parser.exit(
                2,
                f"train_ppo: --restore {args.restore} is not an RLlib checkpoint (no {CHECKPOINT_MARKER}); "
                f"give a checkpoint directory such as OUT/{EXPERIMENT}/{TRIAL_DIR}/checkpoint_000000\n",
            )
    # an experiment resumes with the settings Tune stored; a changed one would be ignored silently
    changed = [name for name in RUN_SETTINGS if getattr(args, name) != parser.get_default(name)]
    if args.resume and changed:
        options = ", ".join("--" + name.replace("_", "-") for name in changed)
        parser.exit(2, f"train_ppo: --resume goes on with the experiment's own settings; drop {options}\n")
    if args.resume and not (experiment / "tuner.pkl").is_file():
        parser.exit(2, f"train_ppo: --resume: {experiment} holds no Tune experiment; run without --resume\n")
    if not args.resume and experiment.exists():
        parser.exit(
            2,
            f"train_ppo: {experiment} exists already; pass --resume to continue that run or choose another --out\n",
        )
    return parser, args


def main(argv: list[str] | None = None) -> dict:
    parser, args = parse_args(argv)
    from ray import tune

    args.out.mkdir(parents=True, exist_ok=True)
    try:
        init_local_ray(args.out)
    except OSError as exc:
        if "AF_UNIX path length" not in str(exc):
            raise
        # Ray's sockets live under --out/ray_tmp/session_<date>_<pid>/sockets/
        parser.exit(2, f"train_ppo: --out {args.out} is too long for Ray's socket paths; choose a shorter one\n")
    register_envs()
    experiment = args.out / EXPERIMENT
    if args.resume:
        if not tune.Tuner.can_restore(experiment):
            parser.exit(2, f"train_ppo: --resume: Tune cannot restore {experiment}; run without --resume\n")
        tuner = tune.Tuner.restore(str(experiment), trainable="PPO", resume_unfinished=True, resume_errored=True)
    else:
        callbacks = functools.partial(
            _dev_evaluation_class(),
            workflow=args.workflow,
            eval_questions=args.eval_questions,
            restore=None if args.restore is None else str(args.restore),
        )
        config = ppo_config(args.workflow, args.seed, args.batch, args.lr).callbacks(callbacks)
        tuner = tune.Tuner(
            "PPO",
            param_space=config,
            tune_config=tune.TuneConfig(trial_dirname_creator=_trial_dirname),
            run_config=tune.RunConfig(
                name=EXPERIMENT,
                storage_path=str(args.out),
                stop={"training_iteration": args.iterations},
                checkpoint_config=tune.CheckpointConfig(
                    checkpoint_frequency=args.checkpoint_every,
                    checkpoint_at_end=True,
                    num_to_keep=args.keep_checkpoints,
                ),
                verbose=1,  # status lines; the rows of the curve are printed at the end
            ),
        )
    result = tuner.fit()[0]
    if result.error is not None:
        raise RuntimeError(f"the PPO trial failed; its error is in {result.path}/error.txt") from result.error
    trial_results = read_results(Path(result.path))
    # Tune marks the result that met the stop criterion ``done``; an interrupted trial has none
    finished = bool(trial_results) and bool(trial_results[-1]["done"])
    curve = curve_from_results(trial_results)
    command = " ".join(argv if argv is not None else sys.argv[1:])
    summary = {
        "command": f"python -m maopd.training.rllib.train_ppo {command}",
        "args": {k: str(v) for k, v in vars(args).items()},
        "settings": {  # the trial's, which a resumed run's command line does not repeat
            "workflow": result.config["env_config"]["workflow"],
            "seed": result.config["seed"],
            "lr": result.config["lr"],
        },
        "finished": finished,
        "trial_dir": str(result.path),
        "checkpoint": None if result.checkpoint is None else result.checkpoint.path,
        "curve": curve,
    }
    write_json(args.out / "curve.json", summary, indent=2)
    for row in curve:
        print(json_text(row, "curve row"))
    settings = summary["settings"]
    plot(
        curve,
        args.out / "curve.png",
        f"RLlib multi-agent PPO, shared policy, option mode, {settings['workflow']} (seed {settings['seed']})",
    )
    if not finished:
        print(f"train_ppo: stopped before the last iteration; go on with: --out {args.out} --resume", file=sys.stderr)
    return summary


if __name__ == "__main__":
    main()
