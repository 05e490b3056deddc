"""Search collapse counted per run, and whether one credit method collapses more often than others.

Reads the ``results.json`` of a credit-assignment benchmark run (``benchmarks/credit_assignment.py``).
A run *collapses* when at least ``--threshold`` of its greedy dev workflows end without a search
(its final ``no_search_workflows``). For one scenario it counts, per method, the runs and the
collapsed runs (with their seeds), and tests whether ``--method`` collapses in a larger share of
its runs than the ``--against`` methods: a one-sided Fisher's exact test (scipy's) of ``--method``
against them pooled, and against each alone. It prints the result and writes ``collapse.json`` to
``--out``, with the command.

    python benchmarks/search_collapse.py \
        --results benchmarks/results/credit_assignment/search_collapse_confirmation/results.json \
        --scenario lazy_searcher_v1 --method team --against opd role --out runs/search_collapse
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scipy.stats import fisher_exact

from maopd.base.arguments import repeated
from maopd.base.json_files import read_json_file, write_json


def collapse_counts(runs: list[dict], threshold: float) -> dict:
    """The number of runs, of collapsed runs, and the collapsed runs' seeds."""
    collapsed = [run["config"]["seed"] for run in runs if run["no_search_workflows"] >= threshold]
    return {"runs": len(runs), "collapsed": len(collapsed), "collapsed_seeds": collapsed}


def more_collapse_p(method: dict, others: list[dict]) -> float:
    """One-sided Fisher's exact p-value that ``method`` collapses in a larger share of its runs than
    ``others`` pooled."""
    collapsed = sum(other["collapsed"] for other in others)
    runs = sum(other["runs"] for other in others)
    table = [[method["collapsed"], method["runs"] - method["collapsed"]], [collapsed, runs - collapsed]]
    return float(fisher_exact(table, alternative="greater").pvalue)


def analyse(results: dict, scenario: str, method: str, against: list[str], threshold: float) -> dict:
    by_method = results["runs"][scenario]
    counts = {name: collapse_counts(by_method[name], threshold) for name in [method, *against]}
    return {
        "scenario": scenario,
        "threshold": threshold,
        "counts": counts,
        "p_pooled": more_collapse_p(counts[method], [counts[name] for name in against]),
        "p_each": {name: more_collapse_p(counts[method], [counts[name]]) for name in against},
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, required=True, help="a results.json the credit benchmark wrote")
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--method", required=True, help="the method expected to collapse more often")
    parser.add_argument("--against", nargs="+", required=True, help="the methods expected to keep searching")
    parser.add_argument("--threshold", type=float, default=0.25, help="share of workflows without a search")
    parser.add_argument("--out", type=Path, default=Path("runs/search_collapse"))
    args = parser.parse_args(argv)
    if not 0 < args.threshold <= 1:
        parser.error(f"--threshold must be in (0, 1], got {args.threshold}")
    if twice := repeated([args.method, *args.against]):
        parser.error(f"--method and --against name {', '.join(twice)} more than once; give each method once")
    try:
        results = read_json_file(args.results, ValueError, "benchmark results")
    except ValueError as exc:
        parser.error(str(exc))
    runs = results.get("runs", {}) if isinstance(results, dict) else {}
    if args.scenario not in runs:
        parser.error(f"{args.results} has no runs of scenario {args.scenario!r}; it has {sorted(runs)}")
    missing = sorted({args.method, *args.against} - set(runs[args.scenario]))
    if missing:
        parser.error(
            f"{args.results} has no runs of {missing} on {args.scenario}; it has {sorted(runs[args.scenario])}"
        )
    try:
        analysis = analyse(results, args.scenario, args.method, args.against, args.threshold)
    except (KeyError, TypeError) as exc:
        parser.error(f"{args.results}: a run lacks {exc}; pass a results.json that the credit benchmark wrote")
    summary = {
        "command": "python benchmarks/search_collapse.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        **analysis,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "collapse.json", summary, indent=2)
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
