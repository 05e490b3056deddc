"""Learning curves of a run from its ``metrics.jsonl``, drawn to PNG (``maopd plot RUN_DIR``).

Panels against the training step: reward per role and the team EM, exact match (with the EM over
every dynamic-sampling round, since the trained groups are the informative ones), search actions
per workflow, and the policy entropy per role. A metric a run does not log (e.g. the Leader in
Stage I) is left out of its panel, and a panel with no metric at all is not drawn.

Each series is drawn as faint raw points (one per step) under a smoothed line (a centred moving
average over about a tenth of the run), with a different line style per series so that lines
that coincide stay visible; legends sit outside the axes. ``RUN_DIR`` may be one stage's run
directory or the directory ``maopd train`` writes, whose stages (``stage1``, ``stage2_*``) are
each plotted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from maopd.base.atomic import write_path_atomically
from maopd.base.run_dir import refuse_symlinks
from maopd.envs.actions import ROLES
from maopd.training.run_logging import METRICS_FILE, read_metrics

# (title, y-axis label with its unit, [(metric key, legend label)])
PANELS = (
    (
        "Reward per role",
        "mean reward per workflow (unitless)",
        [("reward/em", "team EM (R_EM)")]
        + [(f"reward/{role}", role) for role in ROLES]
        + [("reward/searcher_critic", "searcher (critic)")],
    ),
    (
        "Exact match",
        "exact match (fraction of questions)",
        [
            ("reward/em", "team (max over candidates)"),
            ("em/answerer_candidates", "Answerer candidates"),
            ("rollout/em_all_rounds", "team, all sampling rounds"),
        ],
    ),
    (
        "Search actions per workflow",
        "search actions per workflow (count)",
        [("workflow/search_actions", "search actions"), ("workflow/searches_with_passages", "with passages")],
    ),
    ("Policy entropy", "entropy (nats per token)", [(f"{role}/entropy", role) for role in ROLES]),
)
LINE_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1)))


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average; the ends average over the part of the window inside the series."""
    if window <= 1 or len(values) < 3:
        return values
    kernel = np.ones(window)
    return np.convolve(values, kernel, mode="same") / np.convolve(np.ones(len(values)), kernel, mode="same")


def stage_dirs(run_dir: str | Path) -> list[Path]:
    """``run_dir`` itself when it holds metrics, else its stage directories that do, in order."""
    run_dir = Path(run_dir)
    if (run_dir / METRICS_FILE).is_file():
        return [run_dir]
    return sorted(p for p in run_dir.iterdir() if (p / METRICS_FILE).is_file()) if run_dir.is_dir() else []


def plot_runs(run_dir: str | Path, out: str | Path | None = None) -> list[Path]:
    """Plot every stage found under ``run_dir`` (see ``stage_dirs``); returns the PNG paths.

    ``out`` is the PNG for a single stage, or a directory for several (``<out>/<stage>.png``).
    """
    stages = stage_dirs(run_dir)
    if not stages:
        raise ValueError(f"{run_dir}: no {METRICS_FILE} here or in a stage directory below it; nothing to plot")
    if len(stages) == 1:
        return [plot_run(stages[0], out)]
    return [plot_run(stage, Path(out) / f"{stage.name}.png" if out is not None else None) for stage in stages]


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw the learning curves of one stage's ``run_dir``; returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    run_dir = Path(run_dir)
    rows = [row for row in read_metrics(run_dir) if "error" not in row]
    if not rows:
        raise FileNotFoundError(f"{run_dir}: no metrics to plot (metrics.jsonl is missing or empty)")
    if out is None:  # in the run directory: written only where the run's own entries lead
        out = run_dir / "plots" / "learning_curves.png"
        refuse_symlinks(run_dir, out)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    panels = []
    for title, ylabel, series in PANELS:
        present = []
        for key, label in series:
            points = [(row["step"], row[key]) for row in rows if key in row and row[key] is not None]
            if points:
                steps, values = (np.asarray(v, dtype=float) for v in zip(*points))
                present.append((label, steps, values))
        if present:
            panels.append((title, ylabel, present))
    if not panels:
        raise ValueError(f"{run_dir}: metrics.jsonl holds none of the plotted metrics")
    columns = 1 if len(panels) == 1 else 2
    grid_rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(
        grid_rows, columns, figsize=(7.5 * columns, 3.6 * grid_rows), constrained_layout=True, squeeze=False
    )
    for axis in axes.flat[len(panels) :]:
        figure.delaxes(axis)
    for axis, (title, ylabel, present) in zip(axes.flat, panels):
        for index, (label, steps, values) in enumerate(present):
            color = f"C{index}"
            window = max(1, round(len(values) / 10))
            if window > 1:
                axis.plot(steps, values, linestyle="none", marker=".", markersize=4, alpha=0.25, color=color)
                axis.plot(
                    steps,
                    smooth(values, window),
                    color=color,
                    linestyle=LINE_STYLES[index % len(LINE_STYLES)],
                    linewidth=1.6,
                    label=f"{label} (mean of {window} steps)",
                )
            else:
                axis.plot(
                    steps,
                    values,
                    color=color,
                    linestyle=LINE_STYLES[index % len(LINE_STYLES)],
                    marker="o",
                    markersize=3,
                    linewidth=1.4,
                    label=label,
                )
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("training step")
        axis.set_ylabel(ylabel)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    figure.suptitle(
        f"Learning curves: {'/'.join(run_dir.resolve().parts[-2:])} "
        f"(steps {int(rows[0]['step'])}–{int(rows[-1]['step'])})"
    )
    write_path_atomically(out, lambda temporary: figure.savefig(temporary, dpi=110))
    plt.close(figure)
    return out
