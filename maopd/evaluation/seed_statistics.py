"""Intervals that count the training seeds, beside the question bootstrap, and the verdict rule.

From a score matrix (``score_matrix``), for one system's accuracy or a difference A − B, in one of
the ``METRICS``: avg@k (the mean score of a seed's k attempts), pass@k (one of them correct) or k/k
(all of them correct), always over one seed's k attempts, the paper's k:

* **Paired question bootstrap.** Each question's value is the mean over seeds of its per-seed
  figure (for avg@k, its mean score over every attempt of every seed); the estimate is the
  dataset-macro mean (``metrics.macro_mean``), and each draw
  resamples questions within each dataset with all their attempts and seeds (``metrics``' draws,
  seed and percentile interval), the same questions for A and B. It counts the sampling of
  questions and of workflows, and treats the trained models as fixed.
* **Seed-level interval.** For each training seed s, the macro accuracy of that seed's
  evaluation (of A − B: the difference of the two macro accuracies); over the n seeds the mean d̄
  and the Student-t interval d̄ ± t_{0.975, n−1} · s_d / √n (``student_t``). It counts how much
  training itself varies, and cannot be computed from one seed.
* **Verdict** on an expected direction: *reproduces* when both intervals exclude zero in that
  direction, *contradicts* when both exclude it the other way, *inconclusive* otherwise, *not
  tested* when a precondition of the test (a gate) failed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from maopd.evaluation.metrics import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    Estimate,
    all_correct_per_question,
    avg_per_question,
    bootstrap_indices,
    estimate,
    macro_mean,
    pass_per_question,
)
from maopd.evaluation.score_matrix import ScoreMatrix
from maopd.evaluation.student_t import t_half_width

# The expected direction of A − B: A's accuracy higher or lower than B's.
EXPECTATIONS = {"higher": 1, "lower": -1}
VERDICTS = ("reproduces", "contradicts", "inconclusive", "not tested")
# per question, a figure over one seed's attempts (questions × attempts → questions)
METRICS = {"avg": avg_per_question, "pass": pass_per_question, "all": all_correct_per_question}


@dataclass
class SeedInterval:
    """The mean over seeds of a per-seed macro figure, its t-interval (None with one seed, and
    ``note`` says why) and each seed's figure."""

    mean: float
    ci: tuple[float, float] | None
    per_seed: dict[str, float]
    note: str | None = None

    def to_dict(self) -> dict:
        return {
            "mean": self.mean,
            "ci": None if self.ci is None else list(self.ci),
            "seeds": len(self.per_seed),
            "per_seed": self.per_seed,
            **({"note": self.note} if self.note else {}),
        }


def _per_question(
    matrix: ScoreMatrix, a: str, b: str | None, seed: int | None = None, metric: str = "avg"
) -> np.ndarray:
    """Per question, A's figure (minus B's) over its attempts of one seed, or its mean over seeds."""
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r}: give one of {', '.join(METRICS)}")
    per_seed = METRICS[metric]

    def values(name: str) -> np.ndarray:
        scores = matrix.system(name)  # questions × attempts × seeds
        if seed is not None:
            return per_seed(scores[:, :, seed])
        if metric == "avg":  # every attempt of every seed weighs the same
            return avg_per_question(scores.reshape(len(scores), -1))
        return np.mean([per_seed(scores[:, :, index]) for index in range(scores.shape[2])], axis=0)

    return values(a) if b is None else values(a) - values(b)


def question_bootstrap(
    matrix: ScoreMatrix,
    a: str,
    b: str | None = None,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
    metric: str = "avg",
) -> Estimate:
    """A's macro figure, or the paired difference A − B, pooled over seeds, with the question
    bootstrap's interval."""
    per_dataset = matrix.by_dataset(_per_question(matrix, a, b, metric=metric))
    return estimate(per_dataset, bootstrap_indices({d: len(v) for d, v in per_dataset.items()}, draws, seed))


def seed_interval(matrix: ScoreMatrix, a: str, b: str | None = None, metric: str = "avg") -> SeedInterval:
    """A's macro figure, or the difference A − B, per training seed, with the t-interval over seeds."""
    per_seed = {
        label: macro_mean(matrix.by_dataset(_per_question(matrix, a, b, index, metric)))
        for index, label in enumerate(matrix.seeds)
    }
    return t_interval(per_seed)


def t_interval(per_seed: dict[str, float]) -> SeedInterval:
    """The mean of one figure per training seed and its Student-t interval over the seeds."""
    values = np.array(list(per_seed.values()))
    mean = float(values.mean())
    if len(values) < 2:
        return SeedInterval(mean, None, per_seed, "cannot be computed from 1 seed: a t-interval needs at least 2")
    half = float(t_half_width(values))
    return SeedInterval(mean, (mean - half, mean + half), per_seed)


def side_of_zero(ci: tuple[float, float] | None) -> int:
    """1 when the interval lies above zero, −1 below it, 0 when it holds zero or is missing."""
    if ci is None:
        return 0
    low, high = ci
    return 1 if low > 0 else -1 if high < 0 else 0


def verdict(
    question_ci: tuple[float, float], seed_ci: tuple[float, float] | None, expect: str, tested: bool = True
) -> str:
    """The pre-registered rule for an expected direction of A − B (``EXPECTATIONS``); a seed-level
    interval that cannot be computed excludes nothing, so the verdict is then inconclusive."""
    if expect not in EXPECTATIONS:
        raise ValueError(f"expected direction {expect!r}: give one of {', '.join(EXPECTATIONS)}")
    if not tested:
        return "not tested"
    sides = {side_of_zero(question_ci), side_of_zero(seed_ci)}
    if sides == {EXPECTATIONS[expect]}:
        return "reproduces"
    if sides == {-EXPECTATIONS[expect]}:
        return "contradicts"
    return "inconclusive"


def side_by_side(
    matrix: ScoreMatrix,
    a: str,
    b: str | None = None,
    expect: str | None = None,
    tested: bool = True,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
    metric: str = "avg",
) -> dict:
    """Both intervals of A (or A − B) in ``metric`` and, for a pair with an expected direction, the verdict."""
    if expect is not None and b is None:
        raise ValueError("an expected direction needs a pair of systems A B")
    bootstrap = question_bootstrap(matrix, a, b, draws, seed, metric)
    seeds = seed_interval(matrix, a, b, metric)
    out = {"a": a, "b": b, "question_bootstrap": bootstrap.to_dict(), "seed_interval": seeds.to_dict()}
    if expect is not None:
        out["expect"] = expect
        out["verdict"] = verdict(bootstrap.ci, seeds.ci, expect, tested)
    return out


def percent_interval(figure: dict) -> str:
    """An estimate's or a seed interval's ``to_dict()`` in percent: ``mean [low, high]``."""
    mean = figure["macro"] if "macro" in figure else figure["mean"]
    if figure["ci"] is None:
        return f"{100 * mean:.2f} (no interval from {figure['seeds']} seed)"
    low, high = figure["ci"]
    return f"{100 * mean:.2f} [{100 * low:.2f}, {100 * high:.2f}]"
