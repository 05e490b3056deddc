"""Score records end to end: the JSON summary, the tables, the cost plot and the trajectory viewer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from maopd.base.json_files import write_json
from maopd.evaluation.metrics import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED
from maopd.evaluation.records import EvalRecord
from maopd.evaluation.report import TABLES_FILE, build_tables, plot_cost_accuracy, write_tables, write_viewer
from maopd.evaluation.summary import summarize

SUMMARY_FILE, PLOT_FILE, VIEWER_FILE = "summary.json", "cost_accuracy.png", "viewer.html"
# what ``score_records`` writes under fixed names (the tables' CSVs are named after the tables)
OUTPUT_FILES = (SUMMARY_FILE, TABLES_FILE, PLOT_FILE, VIEWER_FILE)


def score_records(
    records: Sequence[EvalRecord],
    comparisons: Sequence[tuple[str, str]],
    out: Path,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
    viewer_questions: int = 50,
) -> dict:
    """Write ``summary.json``, ``tables.md`` + CSVs, ``cost_accuracy.png`` and ``viewer.html`` to ``out``;
    print the tables; return the summary."""
    summary = summarize(records, comparisons, draws, seed)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / SUMMARY_FILE, summary, indent=2)
    tables = build_tables(summary)
    markdown = write_tables(tables, out)
    print("\n".join(t.markdown() for t in tables.values()))
    plot = plot_cost_accuracy(summary, out / PLOT_FILE)
    viewer = write_viewer(records, out / VIEWER_FILE, limit=viewer_questions)
    print(f"wrote {out / SUMMARY_FILE}, {markdown}, {plot or '(no cost counters: no plot)'}, {viewer}")
    return summary
