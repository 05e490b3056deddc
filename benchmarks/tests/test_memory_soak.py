"""The memory soak's figure: one unit per axis, readable."""

import argparse

from benchmarks.memory_soak import plot
from tests.maopd.test_figure_readability import check_readable, figures  # noqa: F401  (figures: a fixture)


def test_memory_soak_plot_keeps_one_unit_per_axis(tmp_path, figures):  # noqa: F811  (the imported fixture)
    samples = [
        {
            "step": s,
            "rss_mb": 500 + s,
            "checkpoints_mb": 3.0 * min(s, 2),
            "metrics_kb": 2.0 * s,
            "tensorboard_kb": 4.0 * s,
            "samples_files": min(s, 5),
            "checkpoint_dirs": 2,
        }
        for s in range(1, 12)
    ]
    args = argparse.Namespace(warmup=3, steps=10, batch_size=2, group_size=2)
    plot(samples, tmp_path / "soak.png", args)
    (figure,) = figures()
    check_readable(figure)
    units = [a.get_ylabel() for a in figure.axes]
    assert all(a.get_yscale() == "linear" for a in figure.axes)
    assert sum("MiB" in u for u in units) == 2 and sum("KiB" in u for u in units) == 0
