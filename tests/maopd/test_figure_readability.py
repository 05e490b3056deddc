"""Every figure the project writes is readable: each axis has an x and a y label and data, step
axes have integer ticks, legends cover no data, titles are not raw paths; ``maopd plot`` plots
every stage of the directory ``maopd train`` writes."""

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from tests.evaluation.test_eval_metrics import make_records


def write_stage(directory, roles, steps, seed=0):
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    with (directory / "metrics.jsonl").open("w") as handle:
        for step in range(1, steps + 1):
            row = {
                "step": step,
                "reward/em": float(rng.random()),
                "em/answerer_candidates": float(rng.random()),
                "workflow/search_actions": float(rng.integers(0, 5)),
                "time/step_s": 1.0,
            }
            row.update({f"reward/{r}": float(rng.normal()) for r in roles})
            row.update({f"{r}/entropy": float(rng.random() + 1) for r in roles})
            handle.write(json.dumps(row) + "\n")


@pytest.fixture
def pipeline_run(tmp_path):
    """The layout of ``maopd train``'s run directory: stage directories, no metrics at the top."""
    run = tmp_path / "main"
    write_stage(run / "stage1", ("searcher", "answerer"), 60)
    write_stage(run / "stage2_full", ("leader", "searcher", "answerer"), 3, seed=1)
    (run / "eval").mkdir()
    return run


@pytest.fixture
def figures(monkeypatch):
    """Figures the code under test creates, kept open (plt.close is a no-op) for inspection."""
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda *args, **kwargs: None)
    before = set(plt.get_fignums())
    collected = []

    def new_figures():
        figs = [plt.figure(n) for n in plt.get_fignums() if n not in before and plt.figure(n) not in collected]
        collected.extend(figs)
        return figs

    yield new_figures
    for figure in collected:
        close(figure)


def data_points(figure):
    """Display coordinates of every plotted point in ``figure``."""
    points = []
    for axis in figure.axes:
        for line in axis.lines:
            xy = np.column_stack(line.get_data()).astype(float)
            if len(xy):
                points.append(axis.transData.transform(xy))
        for collection in axis.collections:
            offsets = collection.get_offsets()
            if len(offsets):
                points.append(axis.transData.transform(np.asarray(offsets, dtype=float)))
    return np.concatenate(points) if points else np.empty((0, 2))


def check_readable(figure, forbidden_title_text=""):
    figure.canvas.draw()
    assert figure.axes, "a figure without axes"
    for axis in figure.axes:
        name = axis.get_title() or figure.get_suptitle()
        # An axis sharing its x with a labelled one below it (``sharex``) is labelled by it.
        x_labels = [a.get_xlabel().strip() for a in axis.get_shared_x_axes().get_siblings(axis)]
        assert any(x_labels), f"{name}: no x label"
        assert axis.get_ylabel().strip(), f"{name}: no y label"
        assert axis.lines or axis.collections or axis.patches, f"{name}: an axis without data"
        assert not axis.texts, f"{name}: free text on the axes ({[t.get_text() for t in axis.texts]})"
        if any("step" in label for label in x_labels):
            ticks = [t for t in axis.get_xticks() if axis.get_xlim()[0] <= t <= axis.get_xlim()[1]]
            assert all(float(t).is_integer() for t in ticks), f"{name}: fractional step ticks {ticks}"
    if forbidden_title_text:
        assert forbidden_title_text not in figure.get_suptitle()
    points = data_points(figure)
    legends = [a.get_legend() for a in figure.axes if a.get_legend()] + list(figure.legends)
    for legend in legends:
        box = legend.get_window_extent()
        inside = (points[:, 0] > box.x0) & (points[:, 0] < box.x1) & (points[:, 1] > box.y0) & (points[:, 1] < box.y1)
        assert not inside.any(), f"a legend covers {int(inside.sum())} data points"


@pytest.mark.slow
def test_learning_curves_are_readable_and_cover_every_stage(pipeline_run, figures):
    from maopd.training.plot import plot_runs

    paths = plot_runs(pipeline_run)
    assert paths == [
        pipeline_run / "stage1" / "plots" / "learning_curves.png",
        pipeline_run / "stage2_full" / "plots" / "learning_curves.png",
    ]
    assert all(p.is_file() for p in paths)
    drawn = figures()
    assert len(drawn) == 2
    for figure in drawn:
        check_readable(figure, str(pipeline_run))
    long_run = drawn[0]
    for axis in long_run.axes:  # 60 steps: faint raw points under a smoothed line per series
        alphas = [line.get_alpha() for line in axis.lines]
        assert any(a is not None and a < 0.5 for a in alphas) and any(a is None for a in alphas)
    assert len(long_run.axes) == 4
    titles = {a.get_title() for a in long_run.axes}
    assert "Search actions per workflow" in titles


def test_a_panel_without_metrics_is_not_drawn(tmp_path, figures):
    from maopd.training.plot import plot_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward/em": s / 4}) + "\n" for s in range(1, 5)))
    plot_run(run)
    (figure,) = figures()
    assert len(figure.axes) == 2  # reward and exact match; no empty search or entropy panel
    check_readable(figure)


@pytest.mark.slow
def test_maopd_plot_accepts_the_train_run_directory(pipeline_run, tmp_path, capsys):
    from maopd.cli import main

    assert main(["plot", str(pipeline_run), "--out", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "stage1.png").is_file() and (tmp_path / "plots" / "stage2_full.png").is_file()
    assert main(["plot", str(tmp_path / "plots")]) == 2
    assert "nothing to plot" in capsys.readouterr().err


def test_cost_accuracy_plot_is_readable_with_coinciding_points(tmp_path, figures):
    from maopd.evaluation.report import plot_cost_accuracy
    from maopd.evaluation.summary import summarize

    costs = {
        ("d", q, a): {"search_actions": 2, "input_tokens": 100, "output_tokens": 10} for q in range(3) for a in range(2)
    }
    table = {"d": [[1, 0], [1, 1], [0, 0]]}
    records = [
        r for name in ("alpha", "beta-with-a-long-name", "gamma") for r in make_records(name, table, costs=costs)
    ]  # three methods on one point
    assert plot_cost_accuracy(summarize(records, draws=20), tmp_path / "cost.png").is_file()
    (figure,) = figures()
    check_readable(figure, str(tmp_path))


@pytest.mark.slow
def test_rllib_curve_is_readable(tmp_path, figures):
    pytest.importorskip("ray")
    from maopd.training.rllib.train_ppo import plot

    plot([{"agent_steps": 2000 * i, "dev_em": 0.1 * i} for i in range(5)], tmp_path / "curve.png", "PPO")
    (figure,) = figures()
    check_readable(figure)
