"""Credit-assignment benchmark on the option mode: methods × seeds × scenarios, with paired CIs.

Each run trains the shared ``MenuPolicy`` (training/marl) with PPO and one credit-assignment
method on one scenario (``envs/option/scenarios.py``) for a fixed budget of iterations × episodes,
then plays the first ``--eval-questions`` dev questions greedily (``training.marl.trainer.evaluate``;
the test split stays sealed for the reported figures). The report gives, per scenario:

* a table of final EM, searches per workflow and workflows without a search (mean and 95%
  bootstrap CI over seeds), and the change in searches per workflow from the first to the last
  ``--window`` training iterations (the paper's search-collapse indicator);
* paired differences of final EM between every two methods (paired by seed, bootstrap CI);
* learning curves (training EM, searches per workflow, workflows without search) with 95%
  t-intervals across seeds, one figure per scenario.

A method from your own file is registered before the runs: ``--plugin my_method.py`` runs the file,
whose ``@register("name")`` adds to ``training.marl.credit.CREDIT_METHODS``; the file's path and
SHA-256 are saved with the results. ``--speed`` instead measures training episodes per second, in
one run, of the vectorized path with lean transitions (``envs.option.lean``, what the benchmark
trains with), of the same path with text-environment transitions, of the one-episode-at-a-time
reference path and, with ``--reference-checkout``, of an older checkout's loop; each path in a
fresh process, so that none inherits another's caches.

    python benchmarks/credit_assignment.py --out runs/benchmarks/credit_assignment
    python benchmarks/credit_assignment.py --speed --iterations 10 --seeds 0 1 2 \
        --out runs/benchmarks/credit_assignment_speed
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import multiprocessing
import os
import platform
import random
import runpy
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.eval.student_t import t_half_width
from envs.option.menus import MENU_SIZE
from envs.option.scenarios import SCENARIOS, get_scenario
from maopd.base.json_files import write_json
from training.marl.credit import CREDIT_METHODS, CreditContext, get_credit_method
from training.marl.policy import MenuPolicy, play, play_batch
from training.marl.trainer import MarlConfig, ppo_update, train, vector_env

COLUMNS = ("em", "searches_per_workflow", "no_search_workflows")
# A training process keeps many small objects alive (transition, menu and parse caches): with
# CPython's default thresholds the cyclic collector rescans them every few thousand allocations,
# 15-20% of the loop's time. Every loop run or timed here collects less often (it still collects).
GC_THRESHOLDS = (50_000, 20, 20)
BOOTSTRAP_DRAWS = 10_000


def bootstrap_ci(values: list[float], seed: int = 0) -> tuple[float, float, float] | None:
    """Mean and 95% percentile-bootstrap interval of the mean; None for fewer than two values."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return None
    draws = np.random.default_rng(seed).integers(0, x.size, size=(BOOTSTRAP_DRAWS, x.size))
    means = x[draws].mean(axis=1)
    return float(x.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def cell(values: list[float]) -> str:
    interval = bootstrap_ci(values)
    if interval is None:
        return f"{np.mean(values):.3f} (1 seed)"
    mean, low, high = interval
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def search_change(run: dict, window: int) -> float:
    """Searches per workflow over the last ``window`` training iterations minus the first ``window``."""
    searches = [row["searches_per_workflow"] for row in run["curve"]]
    return float(np.mean(searches[-window:]) - np.mean(searches[:window]))


def table(runs_by_method: dict[str, list[dict]], window: int = 10) -> str:
    header = (
        "| method | final EM | searches / workflow | workflows without search | "
        f"Δ searches, last {window} − first {window} iterations | seconds / run |"
    )
    lines = [header, "|---|---|---|---|---|---|"]
    for method, runs in runs_by_method.items():
        cells = [cell([run[column] for run in runs]) for column in COLUMNS]
        change = cell([search_change(run, window) for run in runs]) if runs[0].get("curve") else "—"
        lines.append(
            f"| {method} | " + " | ".join(cells) + f" | {change} | {np.mean([r['seconds'] for r in runs]):.0f} |"
        )
    return "\n".join(lines)


def paired_differences(runs_by_method: dict[str, list[dict]]) -> list[dict]:
    """Final EM of method a minus method b, paired by seed, for every pair."""
    methods = list(runs_by_method)
    rows = []
    for i, a in enumerate(methods):
        for b in methods[i + 1 :]:
            by_seed = {run["config"]["seed"]: run["em"] for run in runs_by_method[b]}
            differences = [
                run["em"] - by_seed[run["config"]["seed"]]
                for run in runs_by_method[a]
                if run["config"]["seed"] in by_seed
            ]
            interval = bootstrap_ci(differences)
            if interval is not None:
                mean, low, high = interval
                rows.append(
                    {
                        "a": a,
                        "b": b,
                        "seeds": len(differences),
                        "mean": mean,
                        "low": low,
                        "high": high,
                        "excludes_zero": low > 0 or high < 0,
                    }
                )
    return rows


def plot_curves(scenario: str, runs_by_method: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("em", "training EM (fraction correct)"),
        ("searches_per_workflow", "searches per workflow"),
        ("no_search_workflows", "workflows without search (fraction)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(13, 3.8))
    styles = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]
    for (key, label), ax in zip(panels, axes):
        for index, (method, runs) in enumerate(runs_by_method.items()):
            values = np.array([[row[key] for row in run["curve"]] for run in runs])
            steps = np.arange(1, values.shape[1] + 1)
            mean = values.mean(axis=0)
            ax.plot(steps, mean, linestyle=styles[index % len(styles)], label=method)
            if len(runs) > 1:
                half = t_half_width(values)
                high = mean + half if key == "searches_per_workflow" else np.minimum(mean + half, 1.0)
                ax.fill_between(steps, np.maximum(mean - half, 0.0), high, alpha=0.15)
        ax.set_xlabel("PPO iteration")
        ax.set_ylabel(label)
        ax.xaxis.get_major_locator().set_params(integer=True)
    seeds = len(next(iter(runs_by_method.values())))
    fig.suptitle(f"{scenario}: mean over {seeds} seeds, 95% t-interval bands")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


_LOADED_PLUGINS: dict[Path, list[str]] = {}  # per process: a spawned worker loads them again


def load_plugins(paths: list[Path]) -> list[dict]:
    """Run each plugin file once per process (its ``@register`` calls add methods); describe it."""
    described = []
    for path in paths:
        key = path.resolve()
        if key not in _LOADED_PLUGINS:
            before = set(CREDIT_METHODS)
            runpy.run_path(str(path), run_name="credit_plugin")
            _LOADED_PLUGINS[key] = sorted(set(CREDIT_METHODS) - before)
        described.append(
            {
                "path": str(path),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "methods": _LOADED_PLUGINS[key],
            }
        )
    return described


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_at_end": list(os.getloadavg()),
    }


def reference_training(config: MarlConfig) -> int:
    """The one-episode-at-a-time path: ``play`` on a plain option env, one policy call per decision.
    Returns the number of episodes played."""
    method = get_credit_method(config.method)
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    env = get_scenario(config.scenario).make_env("train", retriever=None)
    policy = MenuPolicy(MENU_SIZE, config.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    context = CreditContext(vector_env(config, "train"), policy)
    for _ in range(config.iterations):
        episodes = [
            play(env, policy, {"question_index": rng.randrange(len(env.unwrapped.questions))})
            for _ in range(config.episodes_per_iteration)
        ]
        ppo_update(policy, optimizer, episodes, method(episodes, context), config)
    return config.iterations * config.episodes_per_iteration


def vectorized_training(config: MarlConfig) -> int:
    """The benchmark's path (``training.marl.trainer.train`` without the evaluation), with the
    config's transitions (lean or text)."""
    method = get_credit_method(config.method)
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    venv = vector_env(config, "train")
    policy = MenuPolicy(MENU_SIZE, config.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    context = CreditContext(vector_env(config, "train"), policy)
    for _ in range(config.iterations):
        episodes = play_batch(
            venv, policy, [rng.randrange(len(venv.questions)) for _ in range(config.episodes_per_iteration)]
        )
        ppo_update(policy, optimizer, episodes, method(episodes, context), config)
    return config.iterations * config.episodes_per_iteration


# The paths ``--speed`` times: today's one-episode-at-a-time ``play`` loop, and the vectorized loop
# with new transitions from the text environment or from the lean environments.
SPEED_PATHS = {
    "reference": (reference_training, "text"),
    "vectorized_text": (vectorized_training, "text"),
    "vectorized_lean": (vectorized_training, "lean"),
}


def timed_path(path: str, config: dict, seeds: list[int]) -> list[dict]:
    """``path`` trained on each of ``seeds`` in turn, in this process (seeds after the first share
    its caches, as in the benchmark); the world (BM25 index, closed book) is built before the clock starts."""
    torch.set_num_threads(1)
    gc.set_threshold(*GC_THRESHOLDS)
    run, transitions = SPEED_PATHS[path]
    config = MarlConfig(**{**config, "transitions": transitions})
    get_scenario(config.scenario).make_env("train")
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # torch imports its compiler on a first optimizer (seconds)
    return [timed(run, replace(config, seed=seed)) for seed in seeds]


def timed_path_in_subprocess(path: str, config: MarlConfig, seeds: list[int]) -> list[dict]:
    """``timed_path`` in a fresh process, so that every path starts with cold caches (retrieval,
    parses, menus, transitions) instead of inheriting those of the paths timed before it."""
    code = (
        "import json, sys\n"
        "from benchmarks.credit_assignment import timed_path\n"
        "print(json.dumps(timed_path(*json.loads(sys.argv[1]))))"
    )
    settings = json.dumps([path, asdict(config), seeds])
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, settings], env=env, cwd=root, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"--speed: the {path} path failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# The training loop of a reference checkout (``--reference-checkout``), run in a subprocess with
# that checkout first on the path: training/marl/trainer.py's one-episode-at-a-time loop, without
# the vectorized path and without its evaluation. It reads the settings as JSON from argv[1].
CHECKOUT_LOOP = """
import gc, json, random, sys, time
import torch
torch.set_num_threads(1)
gc.set_threshold(*json.loads(sys.argv[2]))
try:
    from envs.option.wrapper import MENU_SIZE, option_env
except ImportError:  # d8996d6 and its time: the option mode in one module
    from envs.option_mode import MENU_SIZE, option_env
from training.marl.credit import CreditContext, get_credit_method
from training.marl.policy import MenuPolicy, play
from training.marl.trainer import MarlConfig, ppo_update
settings = json.loads(sys.argv[1])
config = MarlConfig(method="role", seed=0, hints=False, episodes_per_iteration=settings["episodes"])
env = option_env("hierarchical", hints=False, split="train")
env.reset(options={"question_index": 0})
torch.manual_seed(0)
rng = random.Random(0)
policy = MenuPolicy(MENU_SIZE, config.hidden)
optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
context = CreditContext(env, policy)
method = get_credit_method("role")
started, cpu_started = time.perf_counter(), time.process_time()
for _ in range(settings["iterations"]):
    episodes = [play(env, policy, {"question_index": rng.randrange(len(env.unwrapped.questions))})
                for _ in range(settings["episodes"])]
    ppo_update(policy, optimizer, episodes, method(episodes, context), config)
seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
episodes = settings["iterations"] * settings["episodes"]
print(json.dumps({"episodes": episodes, "seconds": seconds, "episodes_per_s": episodes / seconds,
                  "cpu_seconds": cpu_seconds, "episodes_per_cpu_s": episodes / cpu_seconds}))
"""


def checkout_training(checkout: Path, iterations: int, episodes: int) -> dict:
    """Episodes per second of an older checkout's loop on ``synthwiki_v1``'s setting (its default)."""
    settings = json.dumps({"iterations": iterations, "episodes": episodes})
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve()), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHECKOUT_LOOP, settings, json.dumps(GC_THRESHOLDS)],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def speed(args: argparse.Namespace, command: str) -> dict:
    """Training episodes per second of each path, each in a fresh process: the reference path (no
    transition cache, so every seed costs the same) on seed 0; the vectorized path with text and
    with lean transitions on every seed in turn with one shared transition cache, as in the
    benchmark (seed 0 starts cold); with ``--reference-checkout``, also that checkout's loop.
    Speed-ups are given by the wall clock and by each process's CPU time: on a shared machine the
    wall clock counts other work too, and unevenly between paths timed one after the other."""
    results = {}
    for scenario in args.scenarios:
        config = MarlConfig(
            method="role", scenario=scenario, iterations=args.iterations, episodes_per_iteration=args.episodes, seed=0
        )
        row: dict = {"reference": timed_path_in_subprocess("reference", config, [0])[0]}
        if args.reference_checkout and scenario == "synthwiki_v1":
            row["checkout"] = checkout_training(args.reference_checkout, args.iterations, args.episodes)
        for path in ("vectorized_text", "vectorized_lean"):
            row[path] = timed_path_in_subprocess(path, config, args.seeds)
        for clock in ("seconds", "cpu_seconds"):
            rate = {path: rates(row[path], clock) for path in ("vectorized_text", "vectorized_lean")}
            for path, path_rates in rate.items():
                for baseline in ("reference", "checkout"):
                    if baseline in row:
                        base = row[baseline]["episodes"] / row[baseline][clock]
                        row[f"speedup_{path}_over_{baseline}_{clock}"] = {k: v / base for k, v in path_rates.items()}
            lean, text = rate["vectorized_lean"], rate["vectorized_text"]
            row[f"speedup_lean_over_text_{clock}"] = {key: lean[key] / text[key] for key in lean}
        results[scenario] = row
        print(json.dumps({scenario: {k: v for k, v in row.items() if k.startswith("speedup")}}), flush=True)
    return {
        "command": command,
        "machine": machine(),
        "method": "role",
        "iterations": args.iterations,
        "episodes_per_iteration": args.episodes,
        "seeds": args.seeds,
        "results": results,
        "reference_checkout": str(args.reference_checkout) if args.reference_checkout else None,
    }


def rates(runs: list[dict], clock: str) -> dict[str, float]:
    """Episodes per second of ``clock`` (``seconds``: wall clock, ``cpu_seconds``: the process's CPU
    time, which other work on the machine does not inflate) of a path's first seed (cold caches)
    and over all its seeds."""
    return {
        "cold": runs[0]["episodes"] / runs[0][clock],
        "over_seeds": sum(r["episodes"] for r in runs) / sum(r[clock] for r in runs),
    }


def timed(run, config: MarlConfig) -> dict:
    started, cpu_started = time.perf_counter(), time.process_time()
    episodes = run(config)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    return {
        "seed": config.seed,
        "episodes": episodes,
        "seconds": seconds,
        "episodes_per_s": episodes / seconds,
        "cpu_seconds": cpu_seconds,
        "episodes_per_cpu_s": episodes / cpu_seconds,
    }


def run_scenario(scenario: str, methods: list[str], seeds: list[int], settings: dict, plugins: list[str]) -> dict:
    """Every (method, seed) run of one scenario, in one process: they share its transition cache."""
    torch.set_num_threads(1)
    gc.set_threshold(*GC_THRESHOLDS)
    load_plugins([Path(path) for path in plugins])
    runs: dict[str, list[dict]] = {}
    for method in methods:
        for seed in seeds:
            config = MarlConfig(method=method, scenario=scenario, seed=seed, **settings)
            started = time.perf_counter()
            _, metrics = train(config, progress=False)
            metrics["seconds"] = time.perf_counter() - started
            runs.setdefault(method, []).append({"config": asdict(config), **metrics})
            print(
                json.dumps(
                    {
                        "scenario": scenario,
                        "method": method,
                        "seed": seed,
                        **{k: round(metrics[k], 4) for k in (*COLUMNS, "seconds")},
                    }
                ),
                flush=True,
            )
    return runs


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", nargs="+", default=sorted(SCENARIOS))
    parser.add_argument("--methods", nargs="+", default=None, help="default: every registered method")
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--episodes", type=int, default=32, help="episodes per PPO iteration")
    parser.add_argument("--eval-questions", type=int, default=200)
    parser.add_argument("--window", type=int, default=10, help="iterations compared for the search change")
    parser.add_argument("--plugin", type=Path, action="append", default=[], help="a file that registers methods")
    parser.add_argument("--speed", action="store_true", help="measure episodes/s of the training paths instead")
    parser.add_argument("--workers", type=int, default=2, help="processes, one scenario each")
    parser.add_argument(
        "--reference-checkout",
        type=Path,
        help="--speed: also time the one-episode-at-a-time training loop of this checkout (a "
        "worktree whose training/marl/trainer.py has no vectorized path), on synthwiki_v1, its only setting",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/credit_assignment"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    command = "python benchmarks/credit_assignment.py " + " ".join(argv if argv is not None else sys.argv[1:])
    for name in args.scenarios:
        if name not in SCENARIOS:
            parser.error(f"unknown scenario {name!r}; choose from {sorted(SCENARIOS)}")
    plugins = load_plugins(args.plugin)
    methods = args.methods or sorted(CREDIT_METHODS)
    unknown = set(methods) - set(CREDIT_METHODS)
    if unknown:
        parser.error(
            f"unknown methods {sorted(unknown)}; choose from {sorted(CREDIT_METHODS)} or add one with --plugin"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    if args.speed:
        summary = speed(args, command)
        write_json(args.out / "speed.json", summary, indent=2)
        return summary

    started_all = time.perf_counter()
    settings = {
        "iterations": args.iterations,
        "teacher_iterations": args.iterations,
        "episodes_per_iteration": args.episodes,
        "eval_questions": args.eval_questions,
    }
    jobs = [(scenario, methods, args.seeds, settings, [str(p) for p in args.plugin]) for scenario in args.scenarios]
    if args.workers > 1:
        with multiprocessing.get_context("spawn").Pool(min(args.workers, len(jobs))) as pool:
            outcomes = pool.starmap(run_scenario, jobs)
    else:
        outcomes = [run_scenario(*job) for job in jobs]
    runs = dict(zip(args.scenarios, outcomes))
    total = time.perf_counter() - started_all

    report = [
        f"# Credit assignment on the option mode\n\nCommand: `{command}`\n",
        (
            f"{len(methods)} methods × {len(args.seeds)} seeds × {len(args.scenarios)} scenarios, "
            f"{args.iterations} PPO iterations × {args.episodes} episodes each (the OPD Teacher: as many on the "
            f"cascade), greedy evaluation on {args.eval_questions} dev questions; total {total / 60:.1f} min on "
            f"{machine()['cpus']} CPUs. Intervals: 95% percentile bootstrap over seeds.\n"
        ),
    ]
    differences = {}
    for scenario, by_method in runs.items():
        plot_curves(scenario, by_method, args.out / f"curves_{scenario}.png")
        differences[scenario] = paired_differences(by_method)
        report += [
            f"## {scenario}\n",
            table(by_method, args.window),
            "",
            f"![learning curves](curves_{scenario}.png)\n",
            "Paired differences of final EM (a − b, by seed):\n",
            "| a | b | mean | 95% CI | excludes 0 |",
            "|---|---|---|---|---|",
        ]
        report += [
            f"| {d['a']} | {d['b']} | {d['mean']:+.3f} | [{d['low']:+.3f}, {d['high']:+.3f}] | "
            f"{'yes' if d['excludes_zero'] else 'no'} |"
            for d in differences[scenario]
        ]
        report.append("")
    summary = {
        "command": command,
        "machine": machine(),
        "total_seconds": total,
        "plugins": plugins,
        "scenarios": {name: get_scenario(name).card() for name in args.scenarios},
        "methods": methods,
        "seeds": args.seeds,
        "runs": runs,
        "paired_differences": differences,
    }
    write_json(args.out / "results.json", summary, indent=2)
    (args.out / "results.md").write_text("\n".join(report))
    print("\n".join(report))
    return summary


if __name__ == "__main__":
    main()
