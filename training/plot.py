"""Learning curves of a run from its ``metrics.jsonl``, drawn to PNG (``maopd plot RUN_DIR``).

Four panels against the training step: reward per role and the team EM, exact match (with the
EM over every dynamic-sampling round, since the trained groups are the informative ones), search
actions per workflow, and the policy entropy per role. A metric a run does not log (e.g. the
Leader in Stage I) is left out of its panel; a panel with none says so.
"""

from __future__ import annotations

from pathlib import Path

from envs.actions import ROLES
from training.run_logging import read_metrics

PANELS = (
    ("Reward per role", [("reward/em", "team EM (R_EM)")]
     + [(f"reward/{role}", role) for role in ROLES] + [("reward/searcher_critic", "searcher (critic)")]),
    ("Exact match", [("reward/em", "team (max over candidates)"), ("em/answerer_candidates", "Answerer candidates"),
                     ("rollout/em_all_rounds", "team, all sampling rounds")]),
    ("Search actions per workflow", [("workflow/search_actions", "search actions"),
                                     ("workflow/searches_with_passages", "with passages")]),
    ("Entropy", [(f"{role}/entropy", role) for role in ROLES]),
)


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw the learning curves of ``run_dir``; returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = [row for row in read_metrics(run_dir) if "error" not in row]
    if not rows:
        raise FileNotFoundError(f"{run_dir}: no metrics to plot (metrics.jsonl is missing or empty)")
    out = Path(out) if out is not None else run_dir / "plots" / "learning_curves.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for axis, (title, series) in zip(axes.flat, PANELS):
        for key, label in series:
            points = [(row["step"], row[key]) for row in rows if key in row]
            if points:
                steps, values = zip(*points)
                axis.plot(steps, values, marker="o" if len(points) < 30 else None, label=label)
        axis.set_title(title)
        axis.set_xlabel("training step")
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)
        else:
            axis.text(0.5, 0.5, "not logged in this run", ha="center", va="center", transform=axis.transAxes)
    figure.suptitle(str(run_dir))
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out
