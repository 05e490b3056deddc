"""How a run's evaluated systems search: share of workflows without a search, near misses, search rates.

Reads a main-job run directory (``maopd train``, ``maopd experiment table3``) and prints, per
evaluated method:

- ``searches RECORDS``: the share of workflows without a search, the share answering "unknown",
  and the exact-match rate of the workflows that did search;
- ``near-misses RECORDS``: 1-hop workflows, correct ones, and wrong answers within edit distance 2
  of the gold answer, i.e. corrupted copies such as 1904 -> 1804;
- ``variants RUN_DIR``: mean search actions per test workflow and workflows without a search, then
  for each Stage II run the mean training ``workflow/search_actions`` of its first and last 5 steps.

    python benchmarks/search_behaviour.py searches runs/main/eval/records.jsonl
    python benchmarks/search_behaviour.py near-misses runs/main/eval/records.jsonl
    python benchmarks/search_behaviour.py variants runs/main

RECORDS is an evaluation's ``records.jsonl`` (docs/evaluation.md). Output goes to stdout.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from maopd.base.json_files import iter_json_lines
from maopd.evaluation.records import RecordError
from maopd.training.run_logging import read_metrics


def edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ca != cb))
    return row[-1]


def searches(records: list[dict]) -> list[str]:
    lines = []
    for method in dict.fromkeys(r["method"] for r in records):
        rows = [r for r in records if r["method"] == method]
        searched = [r for r in rows if r["search_actions"] > 0]
        without = 1 - len(searched) / len(rows)
        unknown = sum((r["strict_answer"] or "").lower() == "unknown" for r in rows) / len(rows)
        em = sum(r["score"] for r in searched) / max(1, len(searched))
        lines.append(
            f"{method}: {len(rows)} workflows; without a search {without:.1%}; answer 'unknown' {unknown:.1%}; "
            f"EM of workflows with a search {em:.1%} ({len(searched)})"
        )
    return lines


def near_misses(records: list[dict], max_distance: int = 2, examples_shown: int = 6) -> list[str]:
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    examples: dict[str, list[str]] = collections.defaultdict(list)
    for record in records:
        if record["dataset"] != "1-hop":
            continue
        method, answer = record["method"], (record["strict_answer"] or "").strip().lower()
        golds = [g.lower() for g in record["golden_answers"]]
        counts[method]["workflows"] += 1
        if record["score"]:
            counts[method]["correct"] += 1
        elif answer and min(edit_distance(answer, g) for g in golds) <= max_distance:
            counts[method]["near_miss"] += 1
            examples[method].append(f"{record['golden_answers'][0]} -> {record['strict_answer']}")
    return [
        f"{method}: {c['workflows']} workflows, {c['correct']} correct, {c['near_miss']} near misses; "
        f"e.g. {', '.join(examples[method][:examples_shown])}"
        for method, c in sorted(counts.items())
    ]


def variants(run_dir: Path, steps: int = 5) -> list[str]:
    per_method: dict[str, list[int]] = collections.defaultdict(list)
    for _, record in iter_json_lines(run_dir / "eval" / "records.jsonl", RecordError, "record file"):
        per_method[record["method"]].append(record["search_actions"])
    lines = [
        f"{method}: {sum(counts) / len(counts):.2f} search actions per test workflow, "
        f"{sum(c == 0 for c in counts)} / {len(counts)} workflows without a search"
        for method, counts in sorted(per_method.items())
    ]
    for metrics in sorted(run_dir.glob("stage2_*/metrics.jsonl")):
        rows = read_metrics(metrics.parent)
        first = sum(r["workflow/search_actions"] for r in rows[:steps]) / steps
        last = sum(r["workflow/search_actions"] for r in rows[-steps:]) / steps
        lines.append(
            f"{metrics.parent.name}: training search actions {first:.2f} (first {steps} steps) -> "
            f"{last:.2f} (last {steps})"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("searches", help="searching, giving up and EM per method").add_argument("records", type=Path)
    commands.add_parser("near-misses", help="1-hop answers within edit distance 2 of the gold").add_argument(
        "records", type=Path
    )
    commands.add_parser("variants", help="test and training search actions per Stage II variant").add_argument(
        "run_dir", type=Path
    )
    args = parser.parse_args(argv)
    if args.command in ("searches", "near-misses"):
        records = [record for _, record in iter_json_lines(args.records, RecordError, "record file")]
        lines = searches(records) if args.command == "searches" else near_misses(records)
    else:
        lines = variants(args.run_dir)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
