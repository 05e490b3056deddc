"""How many option-mode menus a training run builds, and how many of them a logical-state key would save.

The fast option mode caches a menu per history (the exact messages so far), so a decision builds
its menu only on a history no earlier episode of the process reached. This counts, over
credit-benchmark runs (``MarlConfig`` at the benchmark's budget), a scenario's seeds one after the
other in one process, as the benchmark's workers run them (each later run finds the menus of the
earlier ones cached):

- ``decisions``: menus asked for; ``built``: menus built (history not seen before), all roles;
- ``searcher built``: Searcher menus built, and ``searcher logical``: how many of those had a
  logical state not seen before, keyed by (question, task, allowed action kinds, set of queries
  searched). A redesign that tabulates Searcher menus by that key would build only those;
- ``menu seconds``: time inside ``build_menu``, and its share of the run (the run's seconds
  exclude building the world tables, done once per process, and the counting itself).

The last column bounds what such a redesign could gain: with menus a share f of the run and
Searcher builds cut by r, the run speeds up at most 1 / (1 - f_S + f_S / r), f_S the Searcher
menus' share (other roles' menus kept as they are).

    python benchmarks/menu_states.py --out benchmarks/results/menu_states

Writes ``README.md`` (a table and the command) and ``menu_states.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from maopd.base.arguments import positive_int, seed_int
from maopd.base.atomic import write_text_atomically
from maopd.base.machine import machine
from maopd.envs.actions import action_contents
from maopd.envs.option import fast
from maopd.evaluation.provenance import git_commit
from maopd.training.marl.trainer import MarlConfig, train, vector_env


def census(scenario: str, method: str, seed: int, iterations: int, eval_questions: int, logical_states: set) -> dict:
    """Train one run with ``fast.build_menu`` wrapped by a counter; returns the counts. The
    process's earlier runs have filled its menu cache and ``logical_states``, as in the benchmark."""
    counts = dict.fromkeys(("built", "searcher_built", "searcher_logical"), 0)
    counts |= dict.fromkeys(("menu_seconds", "searcher_seconds", "counting_seconds"), 0.0)
    decisions = [0]
    build_menu, world_menu = fast.build_menu, fast.World.menu

    def counting_build_menu(turn, num_searchers, size, salt, book):
        start = time.perf_counter()
        menu = build_menu(turn, num_searchers, size, salt, book)
        seconds = time.perf_counter() - start
        counts["built"] += 1
        counts["menu_seconds"] += seconds
        if turn.role == "searcher":
            counts["searcher_built"] += 1
            counts["searcher_seconds"] += seconds
            key = (salt, turn.task, turn.allowed, frozenset(action_contents(turn.messages, "search")))
            counts["searcher_logical"] += key not in logical_states
            logical_states.add(key)
        counts["counting_seconds"] += time.perf_counter() - start - seconds
        return menu

    def counting_menu(self, *args):
        decisions[0] += 1
        return world_menu(self, *args)

    config = MarlConfig(
        method=method, scenario=scenario, seed=seed, iterations=iterations, eval_questions=eval_questions
    )
    for split in ("train", "dev"):  # the world tables, built once per process, outside the timed run
        vector_env(config, split)
    fast.build_menu, fast.World.menu = counting_build_menu, counting_menu
    try:
        start = time.perf_counter()
        train(config, progress=False)
        seconds = time.perf_counter() - start - counts.pop("counting_seconds")
    finally:
        fast.build_menu, fast.World.menu = build_menu, world_menu
    ratio = counts["searcher_built"] / max(1, counts["searcher_logical"])
    searcher_share = counts["searcher_seconds"] / seconds
    return {
        "scenario": scenario,
        "seed": seed,
        "decisions": decisions[0],
        **{k: round(v, 2) if isinstance(v, float) else v for k, v in counts.items()},
        "run_seconds": round(seconds, 2),
        "menu_share": round(counts["menu_seconds"] / seconds, 3),
        "searcher_menu_share": round(searcher_share, 3),
        "searcher_builds_per_logical_state": round(ratio, 2),
        "run_speedup_bound": round(1 / (1 - searcher_share + searcher_share / ratio), 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scenarios", nargs="+", default=["lazy_searcher_v1", "synthwiki_v1"])
    parser.add_argument("--method", default="role")
    parser.add_argument("--seeds", type=seed_int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=positive_int, default=400)
    parser.add_argument("--eval-questions", type=positive_int, default=200)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for scenario in args.scenarios:
        logical_states: set = set()
        for seed in args.seeds:
            rows.append(census(scenario, args.method, seed, args.iterations, args.eval_questions, logical_states))
    command = "python benchmarks/menu_states.py " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"command": command, "commit": git_commit(short=True), "machine": machine()}
    result |= {"method": args.method, "seeds": args.seeds, "rows": rows}
    write_text_atomically(args.out / "menu_states.json", json.dumps(result, indent=1) + "\n")
    columns = [
        *("scenario", "seed", "decisions", "built", "searcher_built", "searcher_logical"),
        *("searcher_builds_per_logical_state", "run_seconds", "menu_share", "searcher_menu_share", "run_speedup_bound"),
    ]
    lines = [
        "# Option-mode menus built per run, and the logical states behind them",
        "",
        f"Command: `{command}` on commit {result['commit']} ({args.method} credit, "
        f"{args.iterations} iterations × 32 episodes per run, "
        "the credit benchmark's budget; a scenario's runs one after the other in one process, sharing its "
        "menu cache as the benchmark's runs do); `menu_states.json` adds the machine. "
        "Columns: `benchmarks/menu_states.py`'s docstring.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows),
        "",
    ]
    write_text_atomically(args.out / "README.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
