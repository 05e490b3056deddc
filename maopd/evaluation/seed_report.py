"""The main job's report over several training seeds: Table 1 and Table 3 pooled, searches over
training, the Teacher–student divergence and the Prompted Critic's judge.

Input: the run directories of one pipeline config trained with different seeds (``maopd experiment
NAME --seeds 0 1 2`` writes ``<run_dir>/seed_<s>``), each with its evaluation records
(``eval/records.jsonl``) and its stages' ``metrics.jsonl``. Output (``out``):

* ``pooled/``: every method scored on the records of all seeds at once. Seed s's attempt a
  becomes attempt ``s_index·k + a``, so a question keeps its ``seeds × k`` workflows; the
  question bootstrap then resamples questions with all of them, and the paired differences are
  paired CIs pooled over the seeds. The pooled avg is the mean over seeds of each
  seed's avg@k; the pooled pass and k/k are over ``seeds × k`` attempts, not the paper's k.
* ``per_seed.json``: each seed's macro avg@k per method, from that seed's own records.
* ``score_matrix.json``: every score, question × attempt × seed × method
  (``maopd.evaluation.score_matrix``), from which ``maopd eval matrix`` recomputes both intervals.
* ``report.json["accuracy"]`` and each of ``report.json["comparisons"]``: beside the pooled
  question bootstrap, the seed-level t-interval over the seeds' macro avg@k
  (``maopd.evaluation.seed_statistics``); a pair with an expected direction also gets the verdict
  (reproduces, contradicts, inconclusive, or not tested when the gates failed).
* ``searches_over_training.png`` and ``report.json["searches"]``: search actions per workflow at
  each training step of every stage run (Stage I, each Stage II variant, the single agent), mean
  over seeds with the min–max band; for each run the change from the first to the last ``window``
  steps, with a bootstrap CI that resamples steps within each window and seed (is the
  search rate over the last 10 training steps below the first 10?). Below it, and in
  ``report.json["no_search"]``, the same for the share of workflows without a search.
* ``training_em_over_training.png`` and ``report.json["training_em"]``: the same for the team
  outcome R_EM of the training rollouts (the learning curves).
* ``report.json["divergence"]``: the Teacher–student figures Stage II logs
  (``maopd.training.divergence``), mean over the first and last ``window`` steps, per seed.
* ``report.json["judge"]``: the Prompted Critic's judge figures (``maopd.training.critic``), mean over
  its steps, per seed; ``judge_over_training.png`` the same figures at each step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from maopd.base.atomic import write_path_atomically, write_text_atomically
from maopd.base.json_files import write_json
from maopd.evaluation.metrics import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, percentile_interval
from maopd.evaluation.records import EvalRecord, load_records
from maopd.evaluation.score_matrix import matrix_from_records, write_matrix
from maopd.evaluation.scoring import score_records
from maopd.evaluation.seed_statistics import percent_interval, side_by_side
from maopd.evaluation.summary import summarize
from maopd.training.plot import smooth, stage_dirs
from maopd.training.run_logging import read_metrics

SEARCHES = "workflow/search_actions"
TRAINING_EM = "reward/em"
DIVERGENCE = ("teacher/searcher_kl_k1", "teacher/searcher_kl_k3", "teacher/decision_log_ratio")
JUDGE = ("critic/format_rate", "critic/agreement", "critic/gold_rate", "critic/judge_rate")
JUDGE_LABELS = {  # maopd.training.critic's figures
    "critic/format_rate": "judge calls with a parseable verdict",
    "critic/agreement": "parseable verdicts that agree with gold correctness",
    "critic/gold_rate": "judged reports that are gold-correct",
    "critic/judge_rate": "judged reports the judge calls useful",
}
NO_SEARCH = "workflow/no_search"
RECORDS = Path("eval") / "records.jsonl"
SAVED_RECORDS = Path("eval") / "records.jsonl.gz"  # the records a saved run keeps (``maopd report save``)


def records_file(run: Path) -> Path | None:
    """A run directory's evaluation records: the pipeline's, or those a saved run keeps."""
    return next((run / name for name in (RECORDS, SAVED_RECORDS) if (run / name).is_file()), None)


def seed_records(run_dirs: Sequence[Path]) -> list[list[EvalRecord]]:
    """Each run directory's evaluation records; a missing file is named in the error."""
    missing = [str(run / RECORDS) for run in run_dirs if records_file(run) is None]
    if missing:
        raise FileNotFoundError(f"no evaluation records in {', '.join(missing)}: run the pipeline there first")
    return [load_records([records_file(run)]) for run in run_dirs]


def pooled(per_seed: Sequence[Sequence[EvalRecord]]) -> list[EvalRecord]:
    """All seeds' records as one evaluation whose attempts are the seeds' attempts side by side."""
    out = []
    for index, records in enumerate(per_seed):
        k = 1 + max(r.attempt for r in records)
        out += [replace(record, attempt=index * k + record.attempt) for record in records]
    return out


def metric_series(rows: Sequence[dict], key: str) -> np.ndarray:
    """``key`` at each logged step of a stage's metrics ``rows`` (NaN where a step did not log it)."""
    return np.array([row.get(key, np.nan) for row in rows], dtype=float)


def _nanmean(values: np.ndarray) -> float | None:
    return float(np.nanmean(values)) if np.isfinite(values).any() else None


def window_draws(
    series: Sequence[np.ndarray], window: int, rng: np.random.Generator, draws: int = BOOTSTRAP_DRAWS
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per seed, the mean of the first and of the last ``window`` logged steps, and ``draws``
    bootstrap draws of the change (last − first) averaged over seeds, resampling steps within each
    window and seed; None when a seed has no step logged in a window."""
    firsts = [s[:window][~np.isnan(s[:window])] for s in series]
    lasts = [s[-window:][~np.isnan(s[-window:])] for s in series]
    if any(len(f) == 0 or len(x) == 0 for f, x in zip(firsts, lasts)):
        return None
    samples = np.mean(
        [
            x[rng.integers(0, len(x), (draws, len(x)))].mean(axis=1)
            - f[rng.integers(0, len(f), (draws, len(f)))].mean(axis=1)
            for f, x in zip(firsts, lasts)
        ],
        axis=0,
    )
    return np.array([f.mean() for f in firsts]), np.array([x.mean() for x in lasts]), samples


def window_change(
    series: Sequence[np.ndarray], window: int, draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED
) -> dict:
    """Mean of the last ``window`` steps minus the first ``window``, pooled over seeds (each seed's
    series weighted equally), with a bootstrap CI resampling steps within each window and seed."""
    drawn = window_draws(series, window, np.random.default_rng(seed), draws)
    if drawn is None:
        return {}
    firsts, lasts, samples = drawn
    return {
        "first": float(firsts.mean()),
        "last": float(lasts.mean()),
        "change": float((lasts - firsts).mean()),
        "ci": list(percentile_interval(samples)),
        "window": window,
    }


def plot_over_training(
    panels: Sequence[tuple[dict[str, list[np.ndarray]], str, float]], path: Path, labels: dict[str, str], title: str
) -> Path | None:
    """One panel per (curves, y label, scale), stacked over one training-step axis; in each, one
    line per curve (a stage run, or a figure): the mean over seeds of a metric (times ``scale``),
    each seed's series smoothed as ``maopd plot`` smooths (a centred moving average over a tenth of
    the run), with the seeds' min–max band. A curve no run logged is left out, and so is a panel
    left empty; with no panel left, no plot (None)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logged = [
        ({name: c for name, c in curves.items() if any(np.isfinite(s).any() for s in c)}, ylabel, scale)
        for curves, ylabel, scale in panels
    ]
    panels = [panel for panel in logged if panel[0]]
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 4.5 * len(panels)), sharex=True, squeeze=False)
    styles = ("-", "--", "-.", ":", (0, (5, 1, 1, 1)), (0, (3, 1, 1, 1, 1, 1)))
    for ax, (curves, ylabel, scale) in zip(axes[:, 0], panels):
        for (name, series), style in zip(sorted(curves.items()), styles * 3):
            length = min(len(s) for s in series)
            window = max(1, length // 10)
            values = scale * np.stack([smooth(s[:length], window) for s in series])
            steps = np.arange(1, length + 1)
            seeds = f"{len(series)} seed{'s' if len(series) > 1 else ''}"
            label = f"{labels.get(name, name)} ({seeds})"
            (line,) = ax.plot(steps, np.nanmean(values, axis=0), linestyle=style, linewidth=2, label=label)
            band = (np.nanmin(values, axis=0), np.nanmax(values, axis=0))
            ax.fill_between(steps, *band, color=line.get_color(), alpha=0.15)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    axes[-1, 0].set_xlabel("training step")
    axes[0, 0].set_title(f"{title} (mean over seeds, smoothed; band: min–max over seeds)")
    write_path_atomically(path, lambda temporary: fig.savefig(temporary, dpi=120, bbox_inches="tight"))
    plt.close(fig)
    return path


def _window_means(series: np.ndarray, window: int) -> dict:
    return {"first": _nanmean(series[:window]), "last": _nanmean(series[-window:])}


def markdown(report: dict, pooled_summary: dict, per_seed: dict) -> str:
    """``report.md``: the pooled accuracy per method with its seed-level interval and each seed's,
    the paired differences with both intervals (and the verdicts), the searches over training, the
    divergence and the judge."""

    def pct(v):
        return f"{100 * v:.2f}"

    seeds = list(per_seed)
    lines = [
        "## Accuracy (macro over question types, %)",
        "",
        f"| method | pooled mean over {len(seeds)} seeds [95% question-bootstrap CI] | "
        "mean over seeds [95% t-interval over seeds] | " + " | ".join(seeds) + " |",
        "|---|---|---|" + "---|" * len(seeds),
    ]
    for method, summary in sorted(pooled_summary["methods"].items()):
        avg = next(v for k, v in summary["accuracy"].items() if k.startswith("avg@"))
        seed_level = (
            percent_interval(report["accuracy"][method]["seed_interval"]) if method in report["accuracy"] else "–"
        )
        cells = []
        for seed in seeds:
            values = per_seed[seed].get(method, {})
            cells.append(next((pct(v) for k, v in values.items() if k.startswith("avg@")), "–"))
        lines.append(f"| {method} | {percent_interval(avg)} | {seed_level} | " + " | ".join(cells) + " |")
    verdicts = any("verdict" in c for c in report["comparisons"])
    lines += [
        "",
        "## Paired differences A − B (percentage points, 95% CI)",
        "",
        "Question bootstrap: questions resampled with every seed's attempts, the trained models held "
        "fixed. Seed-level: each seed's macro difference, t-interval over the seeds."
        + (
            " Verdict: both exclude zero in the expected direction (reproduces), both the other way "
            "(contradicts), otherwise inconclusive; not tested when the gates failed."
            if verdicts
            else ""
        ),
        "",
        "| A | B | question bootstrap | seed-level t-interval |" + (" expected | verdict |" if verdicts else ""),
        "|---|---|---|---|" + ("---|---|" if verdicts else ""),
    ]
    for c in report["comparisons"]:
        intervals = (percent_interval(c["question_bootstrap"]), percent_interval(c["seed_interval"]))
        row = f"| {c['a']} | {c['b']} | " + " | ".join(intervals) + " |"
        if verdicts:
            row += f" A {c['expect']} | {c['verdict']} |" if "verdict" in c else " – | – |"
        lines.append(row)
    for key, title, scale in (
        ("searches", "Search actions per workflow", 1.0),
        ("training_em", "Team outcome of the training rollouts (EM, %)", 100.0),
    ):
        lines += [
            "",
            f"## {title}, first vs last training steps (mean over seeds)",
            "",
            "| run | first | last | change [95% CI] |",
            "|---|---|---|---|",
        ]
        for name, change in report[key].items():
            if change:
                first, last, diff = (scale * change[k] for k in ("first", "last", "change"))
                low, high = (scale * bound for bound in change["ci"])
                lines.append(
                    f"| {report['labels'].get(name, name)} | {first:.2f} | {last:.2f} | "
                    f"{diff:+.2f} [{low:+.2f}, {high:+.2f}] |"
                )
    for title, figures in (
        ("Teacher–student divergence on Searcher tokens (Stage II, first / last steps)", report["divergence"]),
        ("The Prompted Critic's judge (mean over its steps)", report["judge"]),
    ):
        if not figures:
            continue
        keys = list(next(iter(figures.values())))
        lines += ["", f"## {title}", "", "| seed | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
        for seed, values in figures.items():
            cells = [
                (
                    f"{v['first']:.4f} / {v['last']:.4f}"
                    if isinstance(v, dict) and v["first"] is not None
                    else f"{v:.3f}"
                    if isinstance(v, float)
                    else "–"
                )
                for v in values.values()
            ]
            lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def stage_metrics(run_dirs: Sequence[Path]) -> dict[str, dict[str, list[dict]]]:
    """Per stage run (``stage1``, ``stage2_<variant>``, ``single``), per seed's run directory, the
    training metrics it logged (rows of failed steps left out); stages that logged none are absent."""
    out: dict[str, dict[str, list[dict]]] = {}
    for run in run_dirs:
        for stage in stage_dirs(run):
            rows = [row for row in read_metrics(stage) if "error" not in row]
            if rows:
                out.setdefault(stage.name, {})[run.name] = rows
    return out


def write_report(
    run_dirs: Sequence[str | Path],
    comparisons: Sequence[tuple[str, str]],
    out: str | Path,
    labels: dict[str, str] | None = None,
    window: int = 10,
    expected: Mapping[tuple[str, str], str] | None = None,
    gates_met: bool = True,
) -> dict:
    """Write the report (module docstring) to ``out`` and return ``report.json``'s content.
    ``labels`` names the stage runs (``stage1``, ``stage2_<variant>``) in the plot and tables.
    ``expected`` gives pairs (A, B) an expected direction of A − B (``higher`` or ``lower``), for
    the verdict; ``gates_met=False`` makes every verdict "not tested"."""
    labels = labels or {}
    run_dirs = [Path(r) for r in run_dirs]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    per_seed = seed_records(run_dirs)
    methods = set.intersection(*({r.method for r in records} for records in per_seed))
    comparisons = [pair for pair in comparisons if all(m in methods for m in pair)]
    summary = score_records(pooled(per_seed), comparisons, out / "pooled")
    seed_scores = {}
    for run, records in zip(run_dirs, per_seed):
        methods_of_seed = summarize(records, draws=1)["methods"]  # the point estimates only
        seed_scores[run.name] = {
            m: {name: a["macro"] for name, a in s["accuracy"].items()} for m, s in methods_of_seed.items()
        }
    write_json(out / "per_seed.json", seed_scores, indent=2)
    matrix = matrix_from_records({run.name: records for run, records in zip(run_dirs, per_seed)}, sorted(methods))
    write_matrix(matrix, out / "score_matrix.json")
    expected = expected or {}

    logged = stage_metrics(run_dirs)

    def series(key: str) -> dict[str, list[np.ndarray]]:
        return {stage: [metric_series(rows, key) for rows in by_seed.values()] for stage, by_seed in logged.items()}

    searches, no_search, training_em = series(SEARCHES), series(NO_SEARCH), series(TRAINING_EM)
    divergence = {
        seed: {key: _window_means(metric_series(rows, key), window) for key in DIVERGENCE}
        for seed, rows in logged.get("stage2_full", {}).items()
    }
    critic = logged.get("stage2_prompted_critic", {})
    judge = {seed: {key: _nanmean(metric_series(rows, key)) for key in JUDGE} for seed, rows in critic.items()}
    judge_curves = {key: [metric_series(rows, key) for rows in critic.values()] for key in JUDGE} if critic else {}
    plots = []
    if searches:
        panels = [(searches, "search actions per workflow (count)", 1.0)]
        panels.append((no_search, "workflows without a search (%)", 100.0))
        title = "Searches per workflow and workflows without a search over training"
        plots.append(plot_over_training(panels, out / "searches_over_training.png", labels, title))
        panels = [(training_em, "team outcome R_EM of the training rollouts (%)", 100.0)]
        plots.append(plot_over_training(panels, out / "training_em_over_training.png", labels, "Training exact match"))
    if judge_curves:
        panels = [(judge_curves, "share (%)", 100.0)]
        title = "The Prompted Critic's judge over Stage II"
        plots.append(plot_over_training(panels, out / "judge_over_training.png", JUDGE_LABELS, title))
    report = {
        "run_dirs": [str(r) for r in run_dirs],
        "labels": labels,
        # each method's mean accuracy: the pooled question bootstrap and the seed-level interval
        "accuracy": {
            m: {k: v for k, v in side_by_side(matrix, m).items() if k not in ("a", "b")} for m in matrix.systems
        },
        # the pooled paired differences of the mean accuracy (the pooled avg over seeds × attempts),
        # then both intervals from the score matrix (its question bootstrap is the same figure)
        "comparisons": [
            {
                "a": c["a"],
                "b": c["b"],
                **{k: c["differences"][k] for k in c["differences"] if k.startswith("avg@")},
                **side_by_side(matrix, c["a"], c["b"], expected.get((c["a"], c["b"])), gates_met),
            }
            for c in summary["comparisons"]
        ],
        "searches": {name: window_change(series, window) for name, series in sorted(searches.items())},
        "no_search": {name: window_change(series, window) for name, series in sorted(no_search.items())},
        "training_em": {name: window_change(series, window) for name, series in sorted(training_em.items())},
        "divergence": divergence,
        "judge": judge,
        "plots": [plot.name for plot in plots if plot is not None],  # beside report.json
    }
    write_json(out / "report.json", report, indent=2)
    write_text_atomically(out / "report.md", markdown(report, summary, seed_scores))
    return report
