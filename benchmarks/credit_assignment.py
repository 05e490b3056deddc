"""Credit-assignment benchmark on the option mode: methods × seeds × scenarios, with paired CIs.

Each run trains the shared ``MenuPolicy`` (training/marl) with PPO and one credit-assignment
method on one scenario (``envs/option/scenarios.py``) for a fixed budget of iterations × episodes,
then plays the first ``--eval-questions`` dev questions greedily (``maopd.training.marl.trainer.evaluate``;
the test split stays sealed for the reported figures). The report (``write_report``; statistics
from rliable, ``benchmarks/marl_statistics.py``) gives, with the number of seeds beside every interval:

* per scenario, a table of final EM, searches per workflow and workflows without a search (mean
  and 95% stratified-bootstrap CI over seeds), and the change in searches per workflow from the
  first to the last ``--window`` training iterations (the paper's search-collapse indicator; a
  window over half the run is shrunk to half, and the report says so);
* per scenario and over all scenarios together, the IQM of final EM with its CI and the
  probability of improvement of every ordered pair of methods, and performance profiles of final
  EM (``performance_profiles.png``);
* paired differences of final EM between every two methods (paired by seed, bootstrap CI);
* learning curves (training EM, searches per workflow, workflows without search) with 95%
  t-intervals across seeds, one figure per scenario;
* every run again in marl-eval's JSON layout (``marl_eval.json``).

``--report-from DIR/results.json`` rebuilds all of it from a saved run, without training.

A method from your own file is registered before the runs: ``--plugin my_method.py`` runs the file,
whose ``@register("name")`` adds to ``maopd.training.marl.credit.CREDIT_METHODS``; the file's path and
SHA-256 are saved with the results. ``--speed`` instead measures training episodes per second, in
one run, of the fast option mode (``maopd.envs.option.fast``, what the benchmark trains with), of the
vectorized path over text environments with its transition cache (``maopd.envs.option.vector``), of the
one-episode-at-a-time reference path and, with ``--reference-checkout``, of an older checkout's
loop; each path in a fresh process, so that none inherits another's caches. It also times the
loop's floor, ``transitions_cached``: each seed's run again on a transition cache that an untimed
run of the same seed filled, so that every transition is a look-up and what remains is the
policy, the credit method and the PPO update.

Every run is saved to ``--out``/runs/ as it finishes; the same command run again (after a crash,
or on another machine with those files) trains only the runs still missing, and refuses files
written with another config.

    python -m benchmarks.credit_assignment --out runs/benchmarks/credit_assignment
    python -m benchmarks.credit_assignment --speed --iterations 10 --seeds 0 1 2 \
        --out runs/benchmarks/credit_assignment_speed
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import multiprocessing
import os
import random
import runpy
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from benchmarks import marl_statistics
from benchmarks.marl_statistics import (
    TAUS,
    Estimate,
    final_scores,
    improvement_probabilities,
    interval,
    iqm_over_runs,
    marl_eval_json,
    mean_over_runs,
    performance_profiles,
)
from maopd.base.arguments import positive_int, repeated, seed_int
from maopd.base.atomic import write_path_atomically, write_text_atomically
from maopd.base.errors import UserError, failed_in
from maopd.base.json_files import read_json_file, write_json
from maopd.base.machine import machine as base_machine
from maopd.envs.option.menus import MENU_SIZE
from maopd.envs.option.scenarios import SCENARIOS, get_scenario
from maopd.evaluation.provenance import git_commit
from maopd.evaluation.student_t import t_half_width
from maopd.training.marl.credit import CREDIT_METHODS, CreditContext, get_credit_method
from maopd.training.marl.policy import MenuPolicy, play, play_batch
from maopd.training.marl.trainer import MarlConfig, ppo_update, train, vector_env

COLUMNS = ("em", "searches_per_workflow", "no_search_workflows")
ALL_SCENARIOS = "all scenarios"  # the key and title of the statistics over every scenario's runs together
# One line style per method besides its colour, so that methods stay apart in grey print.
LINE_STYLES = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]
# A training process keeps many small objects alive (transition, menu and parse caches): with
# CPython's default thresholds the cyclic collector rescans them every few thousand allocations, a
# large share of the loop's time (the loop's speed: benchmarks/results/credit_assignment/README.md).
# Every loop run or timed here collects less often (it still collects).
GC_THRESHOLDS = (50_000, 20, 20)


def seeds_label(seeds: int, scenarios: int = 1) -> str:
    label = f"n={seeds} seed{'' if seeds == 1 else 's'}"
    return label if scenarios == 1 else f"{label} × {scenarios} scenarios"


def estimate_text(estimate: Estimate, digits: int = 3) -> str:
    point, low, high = estimate
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def cell(scores: list[float] | np.ndarray, aggregate=mean_over_runs) -> str:
    """``aggregate`` of one value per seed (or of a seeds × scenarios matrix), its 95% interval and
    the seeds behind it."""
    matrix = np.asarray(scores, dtype=float).reshape(len(scores), -1)
    estimate = interval(matrix, aggregate)
    if estimate is None:
        return f"{aggregate(matrix)[0]:.3f} (1 seed)"
    return f"{estimate_text(estimate)} ({seeds_label(*matrix.shape)})"


def search_window(requested: int, iterations: int) -> tuple[int, str | None]:
    """The window of the first-vs-last search change, and a note when it had to shrink: windows
    longer than half the run overlap, and one as long as the run compares the run with itself."""
    window = min(requested, iterations // 2)
    if window == requested:
        return window, None
    if window == 0:
        return 0, f"A run of {iterations} iteration has no two disjoint windows, so the search change is not reported."
    return window, (
        f"`--window {requested}` is more than half of the {iterations} iterations, so the first and last "
        f"windows would overlap: the search change uses the first and last {window} iterations instead."
    )


def search_change(run: dict, window: int) -> float:
    """Searches per workflow over the last ``window`` training iterations minus the first ``window``."""
    searches = [row["searches_per_workflow"] for row in run["curve"]]
    return float(np.mean(searches[-window:]) - np.mean(searches[:window]))


def table(runs_by_method: dict[str, list[dict]], window: int) -> str:
    change_header = f"Δ searches, last {window} − first {window} iterations" if window else "Δ searches"
    header = f"| method | final EM | searches / workflow | workflows without search | {change_header} | seconds / run |"
    lines = [header, "|---|---|---|---|---|---|"]
    for method, runs in runs_by_method.items():
        cells = [cell([run[column] for run in runs]) for column in COLUMNS]
        has_curve = window and runs[0].get("curve")
        change = cell([search_change(run, window) for run in runs]) if has_curve else "—"
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
            estimate = interval(differences)
            if estimate is not None:
                mean, low, high = estimate
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


def final_em_statistics(runs: dict[str, dict[str, list[dict]]]) -> dict:
    """Over ``runs[scenario][method]``, per method: the IQM of final EM with its interval and the
    probability that its final EM is above each other method's."""
    scores = final_scores(runs)
    pairs = improvement_probabilities(scores)
    statistics = {}
    for x, matrix in scores.items():
        estimate = interval(matrix, iqm_over_runs)
        point, low, high = estimate if estimate else (float(iqm_over_runs(matrix)[0]), None, None)
        statistics[x] = {
            "seeds": matrix.shape[0],
            "scenarios": matrix.shape[1],
            "iqm": {"point": point, "low": low, "high": high},
            "probability_of_improvement": {
                y: dict(zip(("point", "low", "high"), pairs[x, y])) for y in scores if y != x
            },
        }
    return statistics


def _saved_estimate(saved: dict) -> Estimate:
    return saved["point"], saved["low"], saved["high"]


def final_em_table(statistics: dict) -> str:
    """``final_em_statistics`` as a table: a row per method X, its IQM and P(X > Y) for each Y."""
    methods = list(statistics)
    lines = [
        "| method | IQM of final EM | " + " | ".join(f"P(> {y})" for y in methods) + " |",
        "|---" * (len(methods) + 2) + "|",
    ]
    for x, row in statistics.items():
        iqm = row["iqm"]
        iqm_text = f"{iqm['point']:.3f}" if iqm["low"] is None else estimate_text(_saved_estimate(iqm))
        improvement = row["probability_of_improvement"]
        pairs = ["—" if y == x else estimate_text(_saved_estimate(improvement[y]), digits=2) for y in methods]
        label = seeds_label(row["seeds"], row["scenarios"])
        lines.append(f"| {x} ({label}) | {iqm_text} | " + " | ".join(pairs) + " |")
    return "\n".join(lines)


def method_styles(methods: list[str]) -> dict[str, dict]:
    """A colour and a line style per method, the same in every figure of the report."""
    import matplotlib.pyplot as plt

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {
        method: {"color": colors[i % len(colors)], "linestyle": LINE_STYLES[i % len(LINE_STYLES)]}
        for i, method in enumerate(methods)
    }


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
    styles = method_styles(list(runs_by_method))
    for (key, label), ax in zip(panels, axes):
        for method, runs in runs_by_method.items():
            values = np.array([[row[key] for row in run["curve"]] for run in runs])
            steps = np.arange(1, values.shape[1] + 1)
            mean = values.mean(axis=0)
            ax.plot(steps, mean, label=method, **styles[method])
            if len(runs) > 1:
                half = t_half_width(values)
                high = mean + half if key == "searches_per_workflow" else np.minimum(mean + half, 1.0)
                ax.fill_between(steps, np.maximum(mean - half, 0.0), high, color=styles[method]["color"], alpha=0.15)
        ax.set_xlabel("PPO iteration")
        ax.set_ylabel(label)
        ax.xaxis.get_major_locator().set_params(integer=True)
    seeds = len(next(iter(runs_by_method.values())))
    fig.suptitle(f"{scenario}: mean over {seeds} seeds, 95% t-interval bands")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    write_path_atomically(path, lambda temporary: fig.savefig(temporary, dpi=110))
    plt.close(fig)


def plot_performance_profiles(runs_by_panel: dict[str, dict[str, dict[str, list[dict]]]], path: Path) -> None:
    """One panel per entry of ``runs_by_panel`` (a title → ``runs[scenario][method]``): for each
    method the fraction of its runs whose final EM exceeds τ, with rliable's 95% bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    # at least 8 inches wide: one panel alone would cut the title and the legend of six methods
    width = max(4.6 * len(runs_by_panel), 8.0)
    fig, axes = plt.subplots(1, len(runs_by_panel), figsize=(width, 4.2), squeeze=False)
    for (title, runs), ax in zip(runs_by_panel.items(), axes[0]):
        scores = final_scores(runs)
        profiles = performance_profiles(scores)
        styles = method_styles(list(profiles))
        plot_utils.plot_performance_profiles(
            {method: profile for method, (profile, _) in profiles.items()},
            TAUS,
            performance_profile_cis={method: band for method, (_, band) in profiles.items()},
            ax=ax,
            colors={method: style["color"] for method, style in styles.items()},
            linestyles={method: style["linestyle"] for method, style in styles.items()},
            xlabel="τ, final greedy EM (fraction of questions right)",
            ylabel="fraction of runs with final EM > τ",
            labelsize="medium",
            ticklabelsize="medium",
        )
        ax.set_title(f"{title} ({seeds_label(*next(iter(scores.values())).shape)})")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.suptitle("Performance profiles of final EM, 95% stratified-bootstrap bands")
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    write_path_atomically(path, lambda temporary: fig.savefig(temporary, dpi=110))
    plt.close(fig)


_LOADED_PLUGINS: dict[Path, list[str]] = {}  # per process: a spawned worker loads them again


def load_plugins(paths: list[Path]) -> list[dict]:
    """Run each plugin file once per process (its ``@register`` calls add methods); describe it.
    A file that is missing or fails to run is a ``ValueError`` naming it (and the failing line)."""
    described = []
    for path in paths:
        if not path.is_file():
            problem = "is a directory" if path.is_dir() else "does not exist"
            raise ValueError(f"--plugin {path} {problem}; give the Python file that registers your method")
        key = path.resolve()
        if key not in _LOADED_PLUGINS:
            before = set(CREDIT_METHODS)
            try:
                runpy.run_path(str(path), run_name="credit_plugin")
            except Exception as exc:  # the user's code: one line with where it failed, not a trace
                raise ValueError(f"--plugin {path} failed{failed_in(exc, path)}") from None
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
        **base_machine(),
        "torch_threads": torch.get_num_threads(),
        "load_average_at_end": list(os.getloadavg()),
    }


def reference_training(config: MarlConfig) -> tuple[int, int]:
    """The one-episode-at-a-time path: ``play`` on a plain option env, one policy call per decision.
    Returns the numbers of episodes and decisions played."""
    method = get_credit_method(config.method)
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    env = get_scenario(config.scenario).make_env("train", retriever=None)
    policy = MenuPolicy(MENU_SIZE, config.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    context = CreditContext(vector_env(config, "train"), policy)
    decisions = 0
    for _ in range(config.iterations):
        episodes = [
            play(env, policy, {"question_index": rng.randrange(len(env.unwrapped.questions))})
            for _ in range(config.episodes_per_iteration)
        ]
        ppo_update(policy, optimizer, episodes, method(episodes, context), config)
        decisions += sum(len(episode.decisions) for episode in episodes)
    return config.iterations * config.episodes_per_iteration, decisions


def vectorized_training(config: MarlConfig) -> tuple[int, int]:
    """The trainer's loop (``maopd.training.marl.trainer.train`` without the evaluation), with the
    config's transitions (fast or text). Returns the numbers of episodes and decisions played."""
    method = get_credit_method(config.method)
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    venv = vector_env(config, "train")
    policy = MenuPolicy(MENU_SIZE, config.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    context = CreditContext(vector_env(config, "train"), policy)
    decisions = 0
    for _ in range(config.iterations):
        episodes = play_batch(
            venv, policy, [rng.randrange(len(venv.questions)) for _ in range(config.episodes_per_iteration)]
        )
        ppo_update(policy, optimizer, episodes, method(episodes, context), config)
        decisions += sum(len(episode.decisions) for episode in episodes)
    return config.iterations * config.episodes_per_iteration, decisions


# The paths ``--speed`` times: the one-episode-at-a-time ``play`` loop, the vectorized loop over
# text environments behind a transition cache, the fast option mode (the trainer's default), and
# the loop's floor: the vectorized loop with every transition already in its cache.
SPEED_PATHS = {
    "reference": (reference_training, "text"),
    "vectorized_text": (vectorized_training, "text"),
    "fast": (vectorized_training, "fast"),
    "transitions_cached": (vectorized_training, "text"),
}
VECTORIZED_PATHS = ("vectorized_text", "fast", "transitions_cached")  # timed on every seed; same decisions


def timed_path(path: str, config: dict, seeds: list[int]) -> list[dict]:
    """``path`` trained on each of ``seeds`` in turn, in this process (seeds after the first share
    its caches, as in the benchmark); the world (BM25 index, closed book) is built before the clock
    starts. ``transitions_cached`` first plays each seed's run untimed: a run is a deterministic
    function of its config, so the timed run finds every transition in the cache (its
    ``transition_misses``, 0, says so)."""
    torch.set_num_threads(1)
    gc.set_threshold(*GC_THRESHOLDS)
    run, transitions = SPEED_PATHS[path]
    config = MarlConfig(**{**config, "transitions": transitions})
    get_scenario(config.scenario).make_env("train")
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # torch imports its compiler on a first optimizer (seconds)
    if path != "transitions_cached":
        return [timed(run, replace(config, seed=seed)) for seed in seeds]
    cache = vector_env(config, "train").cache  # the one every seed's runs share
    runs = []
    for seed in seeds:
        seeded = replace(config, seed=seed)
        run(seeded)  # fills the cache with every transition of the timed run below
        misses = cache.misses
        runs.append({**timed(run, seeded), "transition_misses": cache.misses - misses})
    return runs


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
# the vectorized path and without its evaluation. It reads the settings as JSON from argv[1]. The
# checkouts it times predate the one import root, so their modules are imported by their top-level
# names (envs, training), as those checkouts named them.
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
decisions = 0
for _ in range(settings["iterations"]):
    episodes = [play(env, policy, {"question_index": rng.randrange(len(env.unwrapped.questions))})
                for _ in range(settings["episodes"])]
    ppo_update(policy, optimizer, episodes, method(episodes, context), config)
    decisions += sum(len(episode.decisions) for episode in episodes)
seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
episodes = settings["iterations"] * settings["episodes"]
print(json.dumps({"episodes": episodes, "decisions": decisions, "seconds": seconds,
                  "episodes_per_s": episodes / seconds, "cpu_seconds": cpu_seconds,
                  "episodes_per_cpu_s": episodes / cpu_seconds}))
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
    transition cache, so every seed costs the same) on seed 0; the vectorized text path and the
    fast option mode on every seed in turn, sharing their caches or tables across seeds as the
    benchmark does (seed 0 starts cold); with ``--reference-checkout``, also that checkout's loop.
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
        for path in VECTORIZED_PATHS:
            row[path] = timed_path_in_subprocess(path, config, args.seeds)
        played = {path: [run["decisions"] for run in row[path]] for path in VECTORIZED_PATHS}
        if len({tuple(counts) for counts in played.values()}) > 1:
            raise RuntimeError(f"--speed: the paths played different decisions on {scenario}: {played}")
        for clock in ("seconds", "cpu_seconds"):
            rate = {path: rates(row[path], clock) for path in VECTORIZED_PATHS}
            for path, path_rates in rate.items():
                for baseline in ("reference", "checkout"):
                    if baseline in row:
                        base = row[baseline]["episodes"] / row[baseline][clock]
                        row[f"speedup_{path}_over_{baseline}_{clock}"] = {k: v / base for k, v in path_rates.items()}
            fast, text = rate["fast"], rate["vectorized_text"]
            row[f"speedup_fast_over_vectorized_text_{clock}"] = {key: fast[key] / text[key] for key in fast}
        row["transition_microseconds_per_decision"] = {
            path: transition_microseconds(row[path], row["transitions_cached"]) for path in ("vectorized_text", "fast")
        }
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


def transition_microseconds(runs: list[dict], cached: list[dict]) -> dict[str, float]:
    """Wall-clock microseconds per decision a path spends on its transitions: its time less the
    floor's (``transitions_cached``) on the same seeds, which play the same decisions; of the
    first seed (cold caches) and over all seeds."""

    def per_decision(count: int) -> float:
        spent = sum(r["seconds"] for r in runs[:count]) - sum(r["seconds"] for r in cached[:count])
        return spent / sum(r["decisions"] for r in runs[:count]) * 1e6

    return {"cold": per_decision(1), "over_seeds": per_decision(len(runs))}


def timed(run, config: MarlConfig) -> dict:
    started, cpu_started = time.perf_counter(), time.process_time()
    episodes, decisions = run(config)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    return {
        "seed": config.seed,
        "episodes": episodes,
        "decisions": decisions,
        "seconds": seconds,
        "episodes_per_s": episodes / seconds,
        "cpu_seconds": cpu_seconds,
        "episodes_per_cpu_s": episodes / cpu_seconds,
    }


def run_file(out: Path, scenario: str, method: str, seed: int) -> Path:
    """Where one run's result is saved as soon as it finishes, so that a stopped benchmark resumes."""
    return out / "runs" / f"{scenario}__{method}__seed{seed}.json"


def train_runs(jobs: list[tuple], workers: int) -> list[dict]:
    """``train_run`` of each job, ``workers`` processes at a time. On the first error the jobs not
    started are cancelled and the running ones finish, so that the workers exit on their own and
    nothing but the error is printed (a terminated worker leaves its semaphores to a warning)."""
    if workers <= 1:
        return [train_run(*job) for job in jobs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as executor:
        futures = [executor.submit(train_run, *job) for job in jobs]
        try:
            return [future.result() for future in futures]
        except BaseException:
            executor.shutdown(wait=True, cancel_futures=True)
            raise


def train_run(scenario: str, method: str, seed: int, settings: dict, plugins: list[str], out: str, commit: str) -> dict:
    """One (scenario, method, seed) run, saved to its ``run_file``; a worker's runs share its world
    tables. ``commit`` is the checkout's when the benchmark started, the code the run executes:
    the checkout may move on while a long benchmark runs."""
    torch.set_num_threads(1)
    gc.set_threshold(*GC_THRESHOLDS)
    load_plugins([Path(path) for path in plugins])
    config = MarlConfig(method=method, scenario=scenario, seed=seed, **settings)
    started = time.perf_counter()
    _, metrics = train(config, progress=False)
    metrics["seconds"] = time.perf_counter() - started
    # the commit and the machine: a run replays bit for bit only on both (docs/findings.md, "Reproducibility")
    run = {"config": asdict(config), "commit": commit, "machine": base_machine(), **metrics}
    path = run_file(Path(out), scenario, method, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, run)
    summary = {k: round(metrics[k], 4) for k in (*COLUMNS, "seconds")}
    print(json.dumps({"scenario": scenario, "method": method, "seed": seed, **summary}), flush=True)
    return run


def saved_run(path: Path, config: MarlConfig) -> dict | None:
    """The run saved at ``path`` if there is one; ValueError when it was trained with another config."""
    if not path.exists():
        return None
    run = read_json_file(path, ValueError, "a saved run")
    if not isinstance(run, dict) or run.get("config") != asdict(config):
        raise ValueError(
            f"{path} holds a run of another config than this command's; pass another --out (a run directory "
            "never mixes two configs) or delete the file"
        )
    return run


def write_report(summary: dict, out: Path, window: int, rebuilt_by: str | None = None) -> dict:
    """The statistics of ``summary`` (what ``main`` saves: ``runs[scenario][method]``, ``methods``,
    ``seeds``, the command and the machine) into ``out``: ``results.md``, ``results.json`` with the
    statistics added, ``marl_eval.json``, learning curves and performance profiles."""
    runs = summary["runs"]
    config = next(iter(next(iter(runs.values())).values()))[0]["config"]
    window, window_note = search_window(window, config["iterations"])
    panels = {scenario: {scenario: by_method} for scenario, by_method in runs.items()}
    if len(runs) > 1:
        panels[ALL_SCENARIOS] = runs
    statistics = {name: final_em_statistics(panel_runs) for name, panel_runs in panels.items()}
    plot_performance_profiles(panels, out / "performance_profiles.png")
    # Results saved before the split was recorded (the committed table) do not name it.
    split = summary.get("evaluation_split")
    of_split = f"the {split} split" if split else "a split the results do not record"
    report = [
        f"# Credit assignment on the option mode\n\nCommand: `{summary['command']}`\n",
        *([f"Report rebuilt from the saved runs by `{rebuilt_by}`\n"] if rebuilt_by else []),
        (
            f"{len(summary['methods'])} methods × {len(summary['seeds'])} seeds × {len(runs)} scenarios, "
            f"{config['iterations']} PPO iterations × {config['episodes_per_iteration']} episodes each (the OPD "
            f"Teacher: as many on the cascade), greedy evaluation on {config['eval_questions']} questions of "
            f"{of_split}; total {summary['total_seconds'] / 60:.1f} min on {summary['machine']['cpus']} CPUs"
            + (f" with {summary['workers']} worker processes" if "workers" in summary else "")
            + (
                f" for the runs trained by this invocation ({summary['resumed_runs']} saved runs of an earlier, "
                "stopped invocation of the same command were reused).\n"
                if summary.get("resumed_runs")
                else ".\n"
            )
        ),
        (
            "Intervals: 95% stratified bootstrap over seeds, computed with rliable (percentile method, "
            f"{marl_statistics.BOOTSTRAP_REPS:,} resamples); n is the number of seeds behind each "
            "interval (over several scenarios, seeds are resampled within each). IQM: the interquartile "
            "mean, the mean of the middle 50% of runs. P(> Y): the probability that a run of the row's "
            "method ends with a higher final EM than a run of method Y (Mann–Whitney), averaged over "
            "scenarios. Learning-curve bands: 95% t-intervals over seeds.\n"
        ),
        *([f"**Search-change window**: {window_note}\n"] if window_note else []),
        "![performance profiles of final EM](performance_profiles.png)\n",
    ]
    if ALL_SCENARIOS in statistics:
        report += [f"## Final EM over all {len(runs)} scenarios\n", final_em_table(statistics[ALL_SCENARIOS]), ""]
    differences = {}
    for scenario, by_method in runs.items():
        plot_curves(scenario, by_method, out / f"curves_{scenario}.png")
        differences[scenario] = paired_differences(by_method)
        report += [
            f"## {scenario}\n",
            table(by_method, window),
            "",
            final_em_table(statistics[scenario]),
            "",
            f"![learning curves](curves_{scenario}.png)\n",
            "Paired differences of final EM (a − b, by seed):\n",
            "| a | b | mean | 95% CI | seeds | excludes 0 |",
            "|---|---|---|---|---|---|",
        ]
        report += [
            f"| {d['a']} | {d['b']} | {d['mean']:+.3f} | [{d['low']:+.3f}, {d['high']:+.3f}] | "
            f"{seeds_label(d['seeds'])} | {'yes' if d['excludes_zero'] else 'no'} |"
            for d in differences[scenario]
        ]
        report.append("")
    summary = {
        **summary,
        "paired_differences": differences,
        "final_em_statistics": statistics,
        "search_window": {"iterations": window, "note": window_note},
    }
    write_json(out / "results.json", summary)  # compact: it holds every run's learning curve
    write_json(out / "marl_eval.json", marl_eval_json(runs, COLUMNS))
    write_text_atomically(out / "results.md", "\n".join(report))
    print("\n".join(report))
    return summary


# A worker's share of memory: its world tables (at most MAX_HISTORY_NODES history nodes per world, up
# to four worlds: two scenarios and their OPD Teachers' cascades) and its runs' batches.
WORKER_MEMORY = 4 << 30


def default_workers() -> int:
    """One worker process per core this process may use, as many as the machine's memory holds."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, min(cores, memory // WORKER_MEMORY))


def output_directory(parser: argparse.ArgumentParser, path: Path) -> None:
    """Create ``--out`` (a usage error, not a trace, when it cannot be)."""
    if path.exists() and not path.is_dir():
        parser.error(f"--out {path} is a file; a directory is needed there: remove the file or choose another path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {path} cannot be created ({exc.strerror}); choose a directory you can write")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", nargs="+", default=sorted(SCENARIOS))
    parser.add_argument("--methods", nargs="+", default=None, help="default: every registered method")
    parser.add_argument("--seeds", nargs="+", type=seed_int, default=list(range(10)))
    parser.add_argument("--iterations", type=positive_int, default=400)
    parser.add_argument("--episodes", type=positive_int, default=32, help="episodes per PPO iteration")
    parser.add_argument("--eval-questions", type=positive_int, default=200)
    parser.add_argument("--window", type=positive_int, default=40, help="iterations compared for the search change")
    parser.add_argument("--plugin", type=Path, action="append", default=[], help="a file that registers methods")
    parser.add_argument("--speed", action="store_true", help="measure episodes/s of the training paths instead")
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="processes, each training one (scenario, method, seed) run at a time (default: one per usable "
        "core, as many as memory holds at 4 GiB each)",
    )
    parser.add_argument(
        "--reference-checkout",
        type=Path,
        help="--speed: also time the one-episode-at-a-time training loop of this checkout (a "
        "worktree whose training/marl/trainer.py has no vectorized path), on synthwiki_v1, its only setting",
    )
    parser.add_argument(
        "--report-from",
        type=Path,
        help="rebuild the report in --out from this results.json of an earlier run, without training "
        "(only --out and --window apply)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/credit_assignment"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    command = "python -m benchmarks.credit_assignment " + " ".join(argv if argv is not None else sys.argv[1:])
    for option, values in (("--scenarios", args.scenarios), ("--methods", args.methods or []), ("--seeds", args.seeds)):
        if twice := repeated(values):
            parser.error(f"{option} lists {', '.join(twice)} more than once; give each once")
    if args.report_from:
        try:
            saved = read_json_file(args.report_from, ValueError, "benchmark results")
        except ValueError as exc:
            parser.error(str(exc))
        if not isinstance(saved, dict) or "runs" not in saved:
            parser.error(f"{args.report_from}: no 'runs'; pass a results.json that this benchmark wrote")
        output_directory(parser, args.out)
        return write_report(saved, args.out, args.window, rebuilt_by=command)
    for name in args.scenarios:
        if name not in SCENARIOS:
            parser.error(f"unknown scenario {name!r}; choose from {sorted(SCENARIOS)}")
    try:
        plugins = load_plugins(args.plugin)
    except ValueError as exc:
        parser.error(str(exc))
    checkout = args.reference_checkout
    if checkout is not None and not (checkout / "training" / "marl" / "trainer.py").is_file():
        parser.error(
            f"--reference-checkout {checkout} is not a checkout of this project (no training/marl/trainer.py); "
            "make one with: git worktree add /tmp/wt-old d8996d6"
        )
    methods = args.methods or sorted(CREDIT_METHODS)
    unknown = set(methods) - set(CREDIT_METHODS)
    if unknown:
        parser.error(
            f"unknown methods {sorted(unknown)}; choose from {sorted(CREDIT_METHODS)} or add one with --plugin"
        )
    output_directory(parser, args.out)
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
    # One job per (scenario, method, seed) not saved yet, longest first, so that the workers stay
    # busy to the end; a run saved by an earlier, stopped invocation of the same command is reused.
    cost = {"opd": 2.0, "difference": 3.0}  # the OPD Teacher's cascade first; counterfactual replays
    runs: dict[str, dict[str, list[dict]]] = {
        scenario: {method: [] for method in methods} for scenario in args.scenarios
    }
    commit = git_commit(short=True)
    jobs = []
    for scenario in args.scenarios:
        for method in methods:
            for seed in args.seeds:
                path = run_file(args.out, scenario, method, seed)
                try:
                    run = saved_run(path, MarlConfig(method=method, scenario=scenario, seed=seed, **settings))
                except ValueError as exc:
                    parser.error(str(exc))
                if run is None:
                    jobs.append(
                        (scenario, method, seed, settings, [str(p) for p in args.plugin], str(args.out), commit)
                    )
                else:
                    runs[scenario][method].append(run)
    earlier = {run.get("commit", "unrecorded") for by in runs.values() for rs in by.values() for run in rs} - {commit}
    if earlier:
        print(
            f"note: {args.out / 'runs'} holds runs trained at commit {', '.join(sorted(earlier))}, not {commit}; "
            "they are reused: if the code changed what a run does since, pass another --out",
            file=sys.stderr,
        )
    jobs.sort(key=lambda job: -cost.get(job[1], 1.0))
    workers = min(args.workers or default_workers(), max(len(jobs), 1))
    failure = None
    try:
        outcomes = train_runs(jobs, workers)
    except UserError as exc:  # a plug-in's bad output (PluginOutputError) names the method: one line
        failure = str(exc)
    if failure is not None:  # outside the handler, whose traceback holds the workers' frames
        parser.error(failure)
    for job, run in zip(jobs, outcomes):
        runs[job[0]][job[1]].append(run)
    for by_method in runs.values():
        for method_runs in by_method.values():
            method_runs.sort(key=lambda run: args.seeds.index(run["config"]["seed"]))
    total = time.perf_counter() - started_all

    summary = {
        "command": command,
        "commit": commit,
        "machine": machine(),
        "total_seconds": total,
        "workers": workers,
        "resumed_runs": sum(len(by) for by_method in runs.values() for by in by_method.values()) - len(jobs),
        "plugins": plugins,
        "scenarios": {name: get_scenario(name).card() for name in args.scenarios},
        "methods": methods,
        "seeds": args.seeds,
        "evaluation_split": "dev",  # maopd.training.marl.trainer.evaluate's: the test split stays sealed
        "runs": runs,
    }
    return write_report(summary, args.out, args.window)


if __name__ == "__main__":
    main()
