"""Statistics of the credit-assignment benchmark as the MARL field reports them, computed by rliable.

After Agarwal et al. (2021, "Deep RL at the edge of the statistical precipice", the ``rliable``
library) and the cooperative-MARL protocol of Gorsane et al. (2022, ``marl-eval``). Scores are
arranged as rliable's matrices: per method, runs × scenarios (one row per seed).

* ``interval``: a point estimate and its 95% stratified-bootstrap interval
  (``rly.get_interval_estimates``, percentile method; seeds resampled within each scenario) of
  ``mean_over_runs`` or ``iqm_over_runs`` (interquartile mean: the mean of the middle 50% of runs).
* ``improvement_probabilities``: P(X > Y) for every ordered pair of methods (Mann–Whitney's U
  over seeds, averaged over scenarios; each method's seeds resampled independently).
* ``performance_profiles``: per method, the fraction of runs whose score exceeds τ, for τ in
  ``TAUS``, with 95% bands.
* ``marl_eval_json``: the runs in the JSON layout marl-eval's ``data_process_pipeline`` reads.

Two of rliable's statistics are evaluated here by NumPy equivalents, passed to its bootstrap as
the statistic: its ``metrics.probability_of_improvement`` runs scipy's Mann–Whitney test once per
scenario and resample (minutes for every pair of methods, where the vectorised equivalent takes
seconds), and its score distribution evaluates one τ at a time. The resamples and the intervals
stay rliable's, and benchmarks/tests/test_credit_statistics.py checks both equivalents against
rliable's own functions, estimate for estimate.

rliable draws its resamples from NumPy's global generator (``StratifiedBootstrap.update_indices``
calls ``np.random.choice`` and ignores ``random_state``), so each estimate seeds that generator
with ``BOOTSTRAP_SEED`` and restores it afterwards: the same runs give the same report, and a
method's interval does not depend on which other methods are in the report.
"""

from __future__ import annotations

import numpy as np

try:
    from rliable import library as rly
    from rliable import metrics
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"the credit-assignment report needs rliable ({exc}), a dev dependency; install it with "
        "`bash scripts/setup.sh --dev` (or `.venv/bin/python -m pip install rliable==1.2.0`)",
        name="rliable",
    ) from None

BOOTSTRAP_SEED = 0
# rliable's default for performance profiles and its README's for probabilities of improvement.
BOOTSTRAP_REPS = 2_000
TAUS = np.linspace(0.0, 1.0, 101)  # thresholds of a score that is a fraction (EM)
MARL_EVAL_ENVIRONMENT = "option_mode"

Estimate = tuple[float, float, float]  # point estimate, low and high end of its 95% interval


def mean_over_runs(scores: np.ndarray) -> np.ndarray:
    return np.array([metrics.aggregate_mean(scores)])


def iqm_over_runs(scores: np.ndarray) -> np.ndarray:
    return np.array([metrics.aggregate_iqm(scores)])


def improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> np.ndarray:
    """rliable's ``metrics.probability_of_improvement``: per scenario, the probability that a run of
    X beats a run of Y (a tie counts half, Mann–Whitney's U / (n_x n_y)), averaged over scenarios."""
    x, y = scores_x[:, None, :], scores_y[None, :, :]
    return np.array([np.mean((x > y) + 0.5 * (x == y))])


def score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """rliable's default performance profile: the fraction of runs (of every scenario) above each τ."""
    return np.mean(scores[..., None] > taus, axis=tuple(range(scores.ndim)))


def _seeded(compute, *args, **kwargs):
    state = np.random.get_state()
    np.random.seed(BOOTSTRAP_SEED)
    try:
        return compute(*args, **kwargs)
    finally:
        np.random.set_state(state)


def _estimate(scores: np.ndarray | list[np.ndarray], aggregate, reps: int) -> Estimate:
    points, intervals = _seeded(rly.get_interval_estimates, {"x": scores}, aggregate, reps=reps)
    low, high = intervals["x"][:, 0]
    return float(points["x"][0]), float(low), float(high)


def interval(scores: list[float] | np.ndarray, aggregate=mean_over_runs) -> Estimate | None:
    """``aggregate`` (``mean_over_runs`` or ``iqm_over_runs``) of a runs × scenarios matrix, or of
    one value per seed, with its 95% interval; None for fewer than two runs: nothing to resample."""
    matrix = np.asarray(scores, dtype=float)
    matrix = matrix[:, None] if matrix.ndim == 1 else matrix
    if matrix.shape[0] < 2:
        return None
    return _estimate(matrix, aggregate, BOOTSTRAP_REPS)


def final_scores(runs: dict[str, dict[str, list[dict]]], key: str = "em") -> dict[str, np.ndarray]:
    """Per method, the final ``key`` of every run as a seeds × scenarios matrix (rows in seed
    order), from ``runs[scenario][method]``; every method must have run the same seeds everywhere."""
    scenarios = list(runs)
    matrices = {}
    for method in runs[scenarios[0]]:
        by_scenario = [{run["config"]["seed"]: run[key] for run in runs[s].get(method, [])} for s in scenarios]
        seeds = sorted(by_scenario[0])
        for scenario, values in zip(scenarios, by_scenario):
            if sorted(values) != seeds:
                raise ValueError(
                    f"method {method!r} ran seeds {sorted(values)} on {scenario!r} but {seeds} on "
                    f"{scenarios[0]!r}; a scores matrix needs the same seeds on every scenario"
                )
        matrices[method] = np.array([[values[seed] for values in by_scenario] for seed in seeds])
    return matrices


def improvement_probabilities(scores: dict[str, np.ndarray]) -> dict[tuple[str, str], Estimate]:
    """P(X > Y) with its 95% interval for every ordered pair (X, Y) of methods. Each unordered pair
    is resampled once: Mann–Whitney's U counts a tie as half for each side, so P(Y > X) is
    1 − P(X > Y) in every resample, and its interval is the mirror of P(X > Y)'s."""
    methods = list(scores)
    pairs = {}
    for i, x in enumerate(methods):
        for y in methods[i + 1 :]:
            point, low, high = _estimate([scores[x], scores[y]], improvement, BOOTSTRAP_REPS)
            pairs[x, y] = point, low, high
            pairs[y, x] = 1.0 - point, 1.0 - high, 1.0 - low
    return pairs


def performance_profiles(scores: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per method, the fraction of runs with a score above each τ of ``TAUS`` (rliable's score
    distribution) and its 95% band, an array of shape (2, len(TAUS))."""
    profiles = {}
    for method, matrix in scores.items():
        profile, band = _seeded(
            rly.create_performance_profile,
            {method: matrix},
            TAUS,
            custom_profile_func=score_distribution,
            reps=BOOTSTRAP_REPS,
        )
        profiles[method] = profile[method], band[method]
    return profiles


def marl_eval_json(runs: dict[str, dict[str, list[dict]]], keys: tuple[str, ...]) -> dict:
    """``runs[scenario][method]`` in marl-eval's raw-data layout, as its ``JsonLogger`` writes it:
    environment → task (the scenario) → algorithm (the method) → ``seed_<s>`` → ``step_<i>`` for
    each training iteration ({key: [value], "step_count": training episodes so far}) and
    ``absolute_metrics`` (the final greedy dev metrics). Each list holds one value, the iteration's
    mean over its training episodes or the mean over the evaluation questions: the runs keep no
    per-episode values."""
    return {
        MARL_EVAL_ENVIRONMENT: {
            scenario: {
                method: {f"seed_{run['config']['seed']}": _marl_eval_run(run, keys) for run in method_runs}
                for method, method_runs in by_method.items()
            }
            for scenario, by_method in runs.items()
        }
    }


def _marl_eval_run(run: dict, keys: tuple[str, ...]) -> dict:
    episodes = run["config"]["episodes_per_iteration"]
    steps = {
        f"step_{i}": {"step_count": row["iteration"] * episodes, **{key: [row[key]] for key in keys}}
        for i, row in enumerate(run["curve"])
    }
    return {**steps, "absolute_metrics": {key: [run[key]] for key in keys}}
