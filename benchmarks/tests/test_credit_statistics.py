"""The credit-assignment report's statistics, on made-up runs (no training): rliable's own estimates,
the seed count beside every interval, the search-change window, marl-eval's loader on
``marl_eval.json``, and ``--report-from``."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest
from marl_eval.utils.data_processing_utils import create_matrices_for_rliable, data_process_pipeline
from rliable import library as rly
from rliable import metrics

from benchmarks import marl_statistics
from benchmarks.credit_assignment import (
    ALL_SCENARIOS,
    main,
    plot_performance_profiles,
    search_window,
    table,
)
from benchmarks.marl_statistics import (
    BOOTSTRAP_SEED,
    MARL_EVAL_ENVIRONMENT,
    final_scores,
    improvement,
    interval,
    iqm_over_runs,
    performance_profiles,
)
from tests.maopd.test_figure_readability import check_readable

METHODS = ("alpha", "beta", "gamma")
SCENARIOS = ("easy_v0", "hard_v0")
SEEDS = (0, 1, 2, 3, 4, 5)
ITERATIONS = 10
EPISODES = 4


def made_up_results() -> dict:
    """A results.json as the benchmark writes it, for 3 methods × 6 seeds × 2 scenarios of 10
    iterations. Searches per workflow are 1 in the first half of every run and 3 in the second, so
    the search change is 2 between disjoint windows and 0 between windows that are the whole run."""
    rng = np.random.default_rng(7)
    runs = {}
    for s, scenario in enumerate(SCENARIOS):
        runs[scenario] = {}
        for m, method in enumerate(METHODS):
            runs[scenario][method] = [
                {
                    "config": {
                        "method": method,
                        "scenario": scenario,
                        "seed": seed,
                        "iterations": ITERATIONS,
                        "episodes_per_iteration": EPISODES,
                        "eval_questions": 8,
                    },
                    "em": float(0.2 * m + 0.1 * s + 0.3 * rng.random()),
                    "searches_per_workflow": float(3 * rng.random()),
                    "no_search_workflows": float(rng.random()),
                    "seconds": 1.0,
                    "curve": [
                        {
                            "iteration": i + 1,
                            "em": float(rng.random()),
                            "searches_per_workflow": 1.0 if i < ITERATIONS // 2 else 3.0,
                            "no_search_workflows": float(rng.random()),
                        }
                        for i in range(ITERATIONS)
                    ],
                }
                for seed in SEEDS
            ]
    return {
        "command": "python benchmarks/credit_assignment.py --iterations 10 (made up)",
        "machine": {"cpus": 2},
        "total_seconds": 60.0,
        "plugins": [],
        "scenarios": {scenario: {} for scenario in SCENARIOS},
        "methods": list(METHODS),
        "seeds": list(SEEDS),
        "evaluation_split": "dev",
        "runs": runs,
    }


@pytest.fixture(scope="module", autouse=True)
def few_resamples():
    """Fewer resamples than the report's: these tests compare estimates, not their precision."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(marl_statistics, "BOOTSTRAP_REPS", 100)
        yield


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report rebuilt by ``--report-from`` from the made-up results, with the default window."""
    root = tmp_path_factory.mktemp("credit_report")
    results = made_up_results()
    (root / "results.json").write_text(json.dumps(results))
    out = root / "out"
    main(["--report-from", str(root / "results.json"), "--out", str(out)])
    saved = json.loads((out / "results.json").read_text())
    return {"input": results, "saved": saved, "markdown": (out / "results.md").read_text(), "out": out}


def rliable_estimate(scores, aggregate, reps):
    """rliable's own point estimate and interval, with its global generator seeded as the report seeds it."""
    np.random.seed(BOOTSTRAP_SEED)
    points, intervals = rly.get_interval_estimates({"key": scores}, aggregate, reps=reps)
    return [points["key"][0], *intervals["key"][:, 0]]


def test_iqm_and_probabilities_of_improvement_are_rliables_own(report):
    runs = report["input"]["runs"]
    statistics = report["saved"]["final_em_statistics"]
    reps = marl_statistics.BOOTSTRAP_REPS
    assert set(statistics) == {*SCENARIOS, ALL_SCENARIOS}
    for block, block_runs in [(SCENARIOS[1], {SCENARIOS[1]: runs[SCENARIOS[1]]}), (ALL_SCENARIOS, runs)]:
        scores = final_scores(block_runs)
        for method in METHODS:
            saved = statistics[block][method]["iqm"]
            expected = rliable_estimate(scores[method], lambda x: np.array([metrics.aggregate_iqm(x)]), reps)
            assert [saved["point"], saved["low"], saved["high"]] == pytest.approx(expected)
    # over both scenarios, rliable's metric (one Mann–Whitney test per scenario and resample)
    scores = final_scores(runs)
    improvement = rliable_estimate(
        [scores["alpha"], scores["beta"]], lambda x, y: np.array([metrics.probability_of_improvement(x, y)]), reps
    )
    forward = statistics[ALL_SCENARIOS]["alpha"]["probability_of_improvement"]["beta"]
    backward = statistics[ALL_SCENARIOS]["beta"]["probability_of_improvement"]["alpha"]
    assert [forward["point"], forward["low"], forward["high"]] == pytest.approx(improvement)
    assert [backward["point"], backward["low"], backward["high"]] == pytest.approx(
        [1 - improvement[0], 1 - improvement[2], 1 - improvement[1]]
    )
    # over both scenarios, the IQM is taken over every run of both: the middle half of 12 values
    everything = np.sort([run["em"] for scenario in SCENARIOS for run in runs[scenario]["gamma"]])
    assert statistics[ALL_SCENARIOS]["gamma"]["iqm"]["point"] == pytest.approx(everything[3:9].mean())
    assert statistics[ALL_SCENARIOS]["gamma"]["seeds"] == 6 and statistics[ALL_SCENARIOS]["gamma"]["scenarios"] == 2


def test_probability_of_improvement_counts_ties_half_as_rliable_does():
    x = np.array([[0.5, 0.1], [0.2, 0.1], [0.9, 0.3]])
    y = np.array([[0.5, 0.1], [0.4, 0.1], [0.1, 0.1], [0.2, 0.0]])
    assert improvement(x, y)[0] == pytest.approx(metrics.probability_of_improvement(x, y))
    assert improvement(x, x)[0] == pytest.approx(0.5)


def test_performance_profiles_are_rliables_own():
    scores = final_scores(made_up_results()["runs"])
    profile, band = performance_profiles({"beta": scores["beta"]})["beta"]
    np.random.seed(BOOTSTRAP_SEED)
    profiles, bands = rly.create_performance_profile(
        {"beta": scores["beta"]}, marl_statistics.TAUS, reps=marl_statistics.BOOTSTRAP_REPS
    )
    np.testing.assert_allclose(profile, profiles["beta"])
    np.testing.assert_allclose(band, bands["beta"])
    assert profile[0] == 1.0 and profile[-1] == 0.0  # every made-up EM is above 0 and below 1


def test_an_estimate_leaves_numpys_global_generator_as_it_was():
    np.random.seed(3)
    expected = np.random.random()
    np.random.seed(3)
    assert interval([0.1, 0.4, 0.2], iqm_over_runs) is not None and interval([0.5]) is None
    assert np.random.random() == expected


def test_every_interval_in_the_report_shows_its_seed_count(report):
    rows = [line for line in report["markdown"].splitlines() if line.startswith("|") and "[" in line]
    assert len(rows) == (
        len(SCENARIOS) * len(METHODS)  # the table of means
        + (len(SCENARIOS) + 1) * len(METHODS)  # IQM and P(X > Y), per scenario and over both
        + len(SCENARIOS) * 3  # paired differences
    )
    for row in rows:
        assert "n=6 seeds" in row, row
    over_both = report["markdown"].split(f"## Final EM over all {len(SCENARIOS)} scenarios")[1].split("## ")[0]
    assert over_both.count("(n=6 seeds × 2 scenarios)") == len(METHODS)


def test_a_window_over_half_the_run_shrinks_to_half_and_the_report_says_so(report):
    assert report["saved"]["search_window"]["iterations"] == ITERATIONS // 2
    markdown = report["markdown"]
    assert "`--window 40` is more than half of the 10 iterations" in markdown
    assert "Δ searches, last 5 − first 5 iterations" in markdown
    # 1 search per workflow in the first half, 3 in the second: the change is 2 for every run
    assert markdown.count("| 2.000 [2.000, 2.000] (n=6 seeds) |") == len(SCENARIOS) * len(METHODS)
    assert search_window(3, 10) == (3, None) and search_window(10, 40) == (10, None)
    assert search_window(21, 40)[0] == 20 and search_window(5, 1)[0] == 0
    runs = report["input"]["runs"][SCENARIOS[0]]
    assert "last 3 − first 3 iterations" in table(runs, 3) and "| 2.000 [2.000, 2.000]" in table(runs, 3)


def test_a_window_below_one_iteration_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--report-from", str(tmp_path / "results.json"), "--window", "0"])
    assert "argument --window: 0 is out of range: must be at least 1" in capsys.readouterr().err


def test_marl_evals_loader_reads_the_runs_back(report):
    raw = json.loads((report["out"] / "marl_eval.json").read_text())
    processed = data_process_pipeline(raw_data=raw, metrics_to_normalize=[])
    # data_process_pipeline returns its input unchanged, with a printed warning, when it cannot read it
    assert processed["extra"]["number_of_runs"] == len(SEEDS)
    assert processed["extra"]["number_of_steps"] == ITERATIONS
    assert processed["extra"]["evaluation_interval"] == {MARL_EVAL_ENVIRONMENT: EPISODES}
    final, curves = create_matrices_for_rliable(processed, MARL_EVAL_ENVIRONMENT, [])
    runs = report["input"]["runs"]
    for key in ("em", "searches_per_workflow"):
        scores = final_scores(runs, key)
        for method in METHODS:
            np.testing.assert_allclose(final[f"mean_{key}"][method], scores[method])
            expected = [[[row[key] for row in run["curve"]] for run in runs[s][method]] for s in SCENARIOS]
            np.testing.assert_allclose(curves[f"mean_{key}"][method], np.transpose(expected, (1, 0, 2)))


def test_report_from_rebuilds_every_output_from_the_saved_runs(report, tmp_path, capsys):
    out = report["out"]
    for name in ("results.md", "results.json", "marl_eval.json", "performance_profiles.png"):
        assert (out / name).stat().st_size > 0
    for scenario in SCENARIOS:
        assert (out / f"curves_{scenario}.png").stat().st_size > 0
    assert report["saved"]["runs"] == report["input"]["runs"]
    assert (
        "Report rebuilt from the saved runs by `python -m benchmarks.credit_assignment --report-from"
        in (report["markdown"])
    )
    assert "greedy evaluation on 8 questions of the dev split" in report["markdown"]
    (tmp_path / "other.json").write_text('{"rows": []}')
    for path, problem in [(tmp_path / "missing.json", "does not exist"), (tmp_path / "other.json", "no 'runs'")]:
        with pytest.raises(SystemExit):
            main(["--report-from", str(path), "--out", str(tmp_path / "out")])
        assert problem in capsys.readouterr().err


def test_performance_profiles_are_readable(tmp_path, monkeypatch):
    monkeypatch.setattr(plt, "close", lambda *args, **kwargs: None)  # keep the figure to inspect it
    runs = made_up_results()["runs"]
    before = set(plt.get_fignums())
    plot_performance_profiles(
        {SCENARIOS[0]: {SCENARIOS[0]: runs[SCENARIOS[0]]}, ALL_SCENARIOS: runs}, tmp_path / "p.png"
    )
    (figure,) = [plt.figure(n) for n in plt.get_fignums() if n not in before]
    check_readable(figure)
    assert [axis.get_title() for axis in figure.axes] == [
        f"{SCENARIOS[0]} (n=6 seeds)",
        "all scenarios (n=6 seeds × 2 scenarios)",
    ]
    assert [text.get_text() for text in figure.legends[0].get_texts()] == list(METHODS)
    assert "(fraction of questions right)" in figure.axes[0].get_xlabel()
    monkeypatch.undo()
    plt.close(figure)
