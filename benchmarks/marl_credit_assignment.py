"""Credit-assignment benchmark on the option mode: every method × seed, one table with 95% CIs.

Each run trains the shared ``MenuPolicy`` (training/marl) with PPO and one credit-assignment
method on SynthWiki's hierarchical workflow, then plays the test split greedily. The table reports
accuracy (EM), searches per workflow and collapse indicators (workflows without any search,
Searcher assignments that report without searching, "unknown" answers), as mean ± t-based 95% CI
over seeds. Add a method in ``training/marl/credit.py`` (see docs/marl.md) and pass its name.

    python benchmarks/marl_credit_assignment.py --seeds 0 1 2 --out runs/benchmarks/marl_credit_assignment
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from training.marl.credit import CREDIT_METHODS
from training.marl.trainer import MarlConfig, train

# Two-sided 95% Student-t quantiles by degrees of freedom (normal beyond the table).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
COLUMNS = ("em", "searches_per_workflow", "no_search_workflows", "searcher_calls_without_search", "unknown_answers")


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the t-based 95% confidence interval (0 for a single value)."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return float(x.mean()), 0.0
    return float(x.mean()), T95.get(x.size - 1, 1.96) * float(x.std(ddof=1)) / np.sqrt(x.size)


def table(results: dict[str, list[dict]]) -> str:
    lines = ["| method | " + " | ".join(COLUMNS) + " | seconds/run |", "|---" * (len(COLUMNS) + 2) + "|"]
    for method, runs in results.items():
        cells = []
        for column in COLUMNS:
            mean, half = mean_ci([run[column] for run in runs])
            # One seed has no interval: print the value alone, not a misleading "± 0.000".
            cells.append(f"{mean:.3f} ± {half:.3f}" if len(runs) > 1 else f"{mean:.3f}")
        seconds = np.mean([run["seconds"] for run in runs])
        name = method if len(runs) > 1 else f"{method} (1 seed, no CI)"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {seconds:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=sorted(CREDIT_METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=32, help="episodes per PPO iteration")
    parser.add_argument("--eval-questions", type=int, default=100)
    parser.add_argument("--hints", action="store_true", help="keep the expert-hint feature (an easy setting)")
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/marl_credit_assignment"))
    args = parser.parse_args(argv)
    unknown = set(args.methods) - set(CREDIT_METHODS)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}; choose from {sorted(CREDIT_METHODS)}")

    torch.set_num_threads(1)
    results: dict[str, list[dict]] = {}
    for method in args.methods:
        for seed in args.seeds:
            config = MarlConfig(method=method, seed=seed, iterations=args.iterations, teacher_iterations=args.iterations,
                                episodes_per_iteration=args.episodes, eval_questions=args.eval_questions, hints=args.hints)
            started = time.perf_counter()
            _, metrics = train(config)
            metrics["seconds"] = time.perf_counter() - started
            results.setdefault(method, []).append({"config": asdict(config), **metrics})
            print(json.dumps({"method": method, "seed": seed, **{k: metrics[k] for k in (*COLUMNS, "seconds")}}))

    command = "python benchmarks/marl_credit_assignment.py " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"command": command, "results": results}
    (args.out / "results.json").write_text(json.dumps(summary, indent=2))
    setting = "with" if args.hints else "without"
    markdown = (
        f"Credit assignment on the option mode, SynthWiki hierarchical workflow (12 steps, 3 Searchers), "
        f"{setting} the expert-hint feature; shared MenuPolicy, PPO, {args.iterations} iterations × "
        f"{args.episodes} episodes, greedy EM on {args.eval_questions} test questions; mean ± 95% t-CI over "
        f"seeds {args.seeds}.\n\nCommand: `{command}`\n\n{table(results)}\n"
    )
    (args.out / "results.md").write_text(markdown)
    print(markdown)
    return summary


if __name__ == "__main__":
    main()
