"""Human-facing outputs of a summary: Markdown/CSV tables, the cost-accuracy plot, a viewer.

Tables mirror the paper: the main table (avg@k per dataset and macro), Table 4 (avg@k, pass@k,
k/k), costs (Figure 4's quantities), completion and flexible extraction (Table 6), and paired
differences with the format-failure upper bound (Tables 5 and 7). Markdown rounds for reading;
CSV keeps the unrounded values with their intervals in separate columns.
"""

from __future__ import annotations

import csv
import html
import io
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from maopd.base.atomic import write_path_atomically, write_text_atomically
from maopd.envs.records import WorkflowRecord
from maopd.evaluation.extraction import FAILURE_KINDS
from maopd.evaluation.records import COST_FIELDS, EvalRecord

# A cell is text, a number, or a (value, ci_low, ci_high) estimate.
Cell = str | float | int | tuple[float, float, float]


def _markdown_text(value: object) -> str:
    """``value`` as the text of one Markdown table cell: a method or dataset name from the records
    can neither end its cell (``|``), nor its row (a line break), nor become HTML."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return text.replace("\\", "\\\\").replace("|", "\\|")


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[Cell]]
    scale: float = 1.0  # 100 for rates shown as percentages
    digits: int = 2

    def _markdown_cell(self, cell: Cell) -> str:
        if isinstance(cell, tuple):
            value, low, high = (x * self.scale for x in cell)
            return f"{value:.{self.digits}f} [{low:.{self.digits}f}, {high:.{self.digits}f}]"
        if isinstance(cell, float):
            return f"{cell * self.scale:.{self.digits}f}"
        return _markdown_text(cell)

    def markdown(self) -> str:
        headers = [_markdown_text(name) for name in self.headers]
        lines = [f"### {self.title}", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(self._markdown_cell(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines) + "\n"

    def write_csv(self, path: Path) -> None:
        headers: list[str] = []
        for index, name in enumerate(self.headers):
            is_estimate = any(isinstance(row[index], tuple) for row in self.rows)
            headers += [name, f"{name} ci_low", f"{name} ci_high"] if is_estimate else [name]
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        writer.writerow([spreadsheet_safe(name) for name in headers])
        for row in self.rows:
            cells = [x for cell in row for x in (cell if isinstance(cell, tuple) else (cell,))]
            writer.writerow([spreadsheet_safe(cell) for cell in cells])
        write_text_atomically(path, text.getvalue())


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as the start of a formula


def spreadsheet_safe(cell: object) -> object:
    """A text cell that a spreadsheet would run as a formula (a method named ``=HYPERLINK(...)``),
    quoted with a leading apostrophe so it is shown as text; numbers are kept as they are."""
    if isinstance(cell, str) and cell.startswith(FORMULA_STARTS):
        return "'" + cell
    return cell


def _estimate(entry: dict, dataset: str | None = None) -> tuple[float, float, float]:
    if dataset is None:
        return (entry["macro"], *entry["ci"])
    return (entry["per_dataset"][dataset], *entry["per_dataset_ci"][dataset])


def _metrics(k: int) -> tuple[str, str, str, str]:
    """avg@k, pass@k, k/k and flexible avg@k for one method's k."""
    return f"avg@{k}", f"pass@{k}", f"{k}/{k}", f"flexible_avg@{k}"


def _shared_k(summary: dict) -> int | None:
    """The one k every method has, or None when methods differ (each is then shown with its own)."""
    ks = {m["k"] for m in summary["methods"].values()}
    return ks.pop() if len(ks) == 1 else None


def build_tables(summary: dict) -> dict[str, Table]:
    """The tables; when methods ran different attempt counts, each row uses its method's own k
    (a ``k`` column says which) and the headers read avg@k, pass@k, k/k."""
    methods = summary["methods"]
    shared = _shared_k(summary)
    avg, passk, allk, flexible = (
        _metrics(shared) if shared is not None else ("avg@k", "pass@k", "k/k", "flexible_avg@k")
    )
    k_column = [] if shared is not None else ["k"]

    def own(m: dict) -> list:
        return [] if shared is not None else [m["k"]]

    datasets = sorted({d for m in methods.values() for d in m["num_questions"]})
    tables = {
        "main": Table(
            f"Exact match {avg} (%) per dataset; macro with 95% bootstrap CI",
            ["method", *k_column, *datasets, "macro"],
            [
                [
                    name,
                    *own(m),
                    *(m["accuracy"][_metrics(m["k"])[0]]["per_dataset"].get(d, float("nan")) for d in datasets),
                    _estimate(m["accuracy"][_metrics(m["k"])[0]]),
                ]
                for name, m in methods.items()
            ],
            scale=100,
        ),
        "table4": Table(
            "Macro accuracy (%) with 95% bootstrap CI",
            ["method", *k_column, avg, passk, allk],
            [
                [name, *own(m), *(_estimate(m["accuracy"][metric]) for metric in _metrics(m["k"])[:3])]
                for name, m in methods.items()
            ],
            scale=100,
        ),
        "costs": Table(
            "Workload per workflow (dataset-macro; 95% bootstrap CI)",
            ["method", *COST_FIELDS],
            [
                [name, *(_estimate(m["costs"][c]) if c in m["costs"] else "n/a" for c in COST_FIELDS)]
                for name, m in methods.items()
            ],
        ),
        "completion": Table(
            "Completion and flexible extraction (rates in %, counts are workflows)",
            ["method", *k_column, "format failure rate", *FAILURE_KINDS, flexible, "rescued"],
            [
                [
                    name,
                    *own(m),
                    _estimate(m["failures"]["rate"]),
                    *(str(m["failures"]["counts"][kind]) for kind in FAILURE_KINDS),
                    _estimate(m["accuracy"][_metrics(m["k"])[3]]),
                    str(m["extraction"]["rescued"]),
                ]
                for name, m in methods.items()
            ],
            scale=100,
        ),
    }
    if summary["comparisons"]:
        tables["paired"] = Table(
            "Paired differences A − B (percentage points, 95% paired bootstrap CI)",
            ["A", "B", avg, passk, allk, "A − (B if its format failures were correct)"],
            [
                [
                    c["a"],
                    c["b"],
                    *(_estimate(c["differences"][metric]) for metric in _metrics(methods[c["a"]]["k"])[:3]),
                    _estimate(c["a_minus_b_if_failures_correct"]),
                ]
                for c in summary["comparisons"]
            ],
            scale=100,
        )
    return tables


TABLES_FILE = "tables.md"


def write_tables(tables: dict[str, Table], out_dir: Path) -> Path:
    """Write ``tables.md`` and one CSV per table; returns the Markdown path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        table.write_csv(out_dir / f"{name}.csv")
    path = out_dir / TABLES_FILE
    write_text_atomically(path, "\n".join(t.markdown() for t in tables.values()))
    return path


PLOT_COSTS = ("search_actions", "input_tokens", "output_tokens")


def plot_cost_accuracy(summary: dict, path: Path) -> Path | None:
    """Figure 4: search actions, input and output tokens against macro EM, with bootstrap bars.

    Returns None when no method recorded these costs.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = {n: m for n, m in summary["methods"].items() if all(c in m["costs"] for c in PLOT_COSTS)}
    if not methods:
        return None
    figure, axes = plt.subplots(
        1, len(PLOT_COSTS), figsize=(4.2 * len(PLOT_COSTS), 3.8), sharey=True, constrained_layout=True
    )
    markers = "osD^vP*Xh<>"
    for axis, cost in zip(axes, PLOT_COSTS):
        for index, (name, m) in enumerate(methods.items()):
            x, x_low, x_high = _estimate(m["costs"][cost])
            y, y_low, y_high = (100 * v for v in _estimate(m["accuracy"][f"avg@{m['k']}"]))
            # Methods are told apart by colour and marker in one legend below the panels, not by
            # text next to the points, which ran outside the axes and overlapped where points
            # coincide. Hollow markers, larger for earlier methods, keep coinciding points visible.
            axis.errorbar(
                x,
                y,
                xerr=[[x - x_low], [x_high - x]],
                yerr=[[y - y_low], [y_high - y]],
                fmt=markers[index % len(markers)],
                color=f"C{index % 10}",
                capsize=3,
                markersize=min(5 + 3 * (len(methods) - 1 - index), 17),
                markerfacecolor="none",
                markeredgewidth=1.6,
                elinewidth=1.0,
                alpha=0.9,
                label=f"{name} (k={m['k']})",
            )
        axis.set_xlabel(f"{cost.replace('_', ' ')} per workflow (count)")
        axis.margins(x=0.15, y=0.1)
        axis.grid(alpha=0.3)
    shared = _shared_k(summary)
    for axis in axes:
        axis.set_ylabel(f"macro EM avg@{shared if shared is not None else 'k'} (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4), fontsize=8)
    figure.suptitle("Cost versus accuracy (dataset-macro means, 95% bootstrap CI)")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_path_atomically(path, lambda temporary: figure.savefig(temporary, dpi=120))
    plt.close(figure)
    return path


def _html(template: str, *values: object) -> str:
    """``template`` with each ``{}`` filled by a value as HTML text. Every value a record gives goes
    through here, escaped, so no record text becomes markup in the viewer."""
    return template.format(*(html.escape(str(value)) for value in values))


def _attempt_html(record: EvalRecord) -> str:
    parts = [
        _html(
            "<p><b>attempt {}</b>: score {}, strict {}, flexible {} (rule {})",
            record.attempt,
            f"{record.score:g}",
            repr(record.strict_answer),
            repr(record.flexible_answer),
            record.flexible_rule,
        )
        + (_html(", failure <i>{}</i>", record.failure) if record.failure else "")
        + "</p>"
    ]
    trajectory = record.trajectory or WorkflowRecord()
    for subtask in trajectory.subtasks:
        parts.append(_html("<div class=sub>wave {} → {}: {}</div>", subtask.wave, subtask.agent, subtask.task))
    for search in trajectory.searches:
        parts.append(
            _html(
                "<div class=search>{} searched <code>{}</code> ({} passages)</div>",
                search.agent,
                search.query,
                len(search.passages),
            )
        )
    for report in trajectory.reports:
        parts.append(_html("<div class=report>report {} ({}): {}</div>", report.number, report.agent, report.text))
    parts.append(_html("<pre>{}</pre>", _final_output_text(record.final_output)))
    if record.failure:
        parts.append(_failed_outputs_html(trajectory))
    return "\n".join(parts)


def _final_output_text(output: str | None) -> str:
    if output is None:
        return "(no Answerer candidate: the workflow ended without an answer)"
    return output if output.strip() else f"(empty output: {output!r})"


SHOWN_OUTPUT_CHARS = 2000  # of each failed call's last output: a runaway output would swamp the page


def _failed_outputs_html(trajectory: WorkflowRecord) -> str:
    """What the model wrote in a failed workflow: every format error (step, agent, what was wrong)
    and the last output of every call, which is where a workflow without a candidate stopped (the
    Leader's failed selection, a Searcher that never reported)."""
    parts = ["<div class=failed><b>failed outputs</b>"]
    for error in trajectory.format_errors:
        parts.append(_html("<div>step {}, {}: {}</div>", error.env_step, error.agent, error.error))
    for call in trajectory.calls:
        outputs = call.outputs
        if outputs:
            last = outputs[-1]
            # the length the model wrote: the record keeps an over-long output cut (output_chars)
            written = call.output_chars[-1] if call.output_chars else len(last)
            shown = last[:SHOWN_OUTPUT_CHARS]
            if written > len(shown):
                shown += f"… ({written - len(shown)} more characters)"
            parts.append(
                _html(
                    "<div>{}'s last output ({} outputs):</div><pre>{}</pre>",
                    call.call_id or call.agent,
                    len(outputs),
                    shown if shown.strip() else f"(empty output: {last!r})",
                )
            )
    parts.append("</div>")
    return "\n".join(parts)


def write_viewer(records: Sequence[EvalRecord], path: Path, questions: Sequence[str] = (), limit: int = 50) -> Path:
    """An HTML page per question with every method side by side, attempt by attempt.

    ``questions`` selects ``dataset/question_id`` keys; otherwise the ``limit`` questions on
    which the methods disagree most (spread of correct attempts) come first. Every text from the
    records is HTML-escaped (``_html``).
    """
    by_question: dict[tuple[str, str], dict[str, list[EvalRecord]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        by_question[record.question_key][record.method].append(record)
    methods = sorted({r.method for r in records})
    if questions:
        wanted = [tuple(q.split("/", 1)) for q in questions]
        keys = [key for key in wanted if key in by_question]
    else:

        def spread(key: tuple[str, str]) -> float:
            correct = [sum(r.score for r in by_question[key][m]) for m in methods if m in by_question[key]]
            return max(correct) - min(correct)

        keys = sorted(by_question, key=lambda key: (-spread(key), key))[:limit]
    sections = []
    for key in keys:
        first = next(iter(by_question[key].values()))[0]
        cells = []
        for method in methods:
            attempts = sorted(by_question[key].get(method, []), key=lambda r: r.attempt)
            correct = sum(r.score for r in attempts)
            cells.append(
                _html("<td><h4>{}: {}/{} correct</h4>", method, f"{correct:g}", len(attempts))
                + "\n".join(_attempt_html(r) for r in attempts)
                + "</td>"
            )
        sections.append(
            _html("<h3>{}/{}: {}</h3><p>gold: {}</p>", *key, first.question, " | ".join(first.golden_answers))
            + f"<table><tr>{''.join(cells)}</tr></table>"
        )
    style = (
        "body{font-family:sans-serif} td{vertical-align:top;border:1px solid #ccc;padding:6px;width:"
        f"{100 // max(len(methods), 1)}%}} pre{{white-space:pre-wrap;background:#f6f6f6}} "
        ".sub{color:#045} .search{color:#555} .report{margin:4px 0;color:#333} .failed{color:#700}"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(
        path,
        f"<!doctype html><meta charset=utf-8><title>trajectories</title><style>{style}</style>" + "\n".join(sections),
    )
    return path
