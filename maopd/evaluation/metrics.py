"""Metrics from scored records, with the paper's question-bootstrap intervals (Appendix A).

For question i of a dataset with k attempts scored c_i1..c_ik, n_i = Σ_k c_ik and

* avg@k = mean_i n_i / k        (mean exact match over all workflows)
* pass@k = mean_i 1{n_i ≥ 1}    (at least one of the k attempts is correct)
* k/k   = mean_i 1{n_i = k}     (all k attempts are correct); the full distribution of n_i is kept.

Every metric is a mean of a *per-question* value, computed per dataset and macro-averaged with
datasets weighted equally. Costs follow the same order: attempts within a question, questions
within a dataset, then datasets equally.

Bootstrap: for each of ``draws`` draws (seed 20260912), questions are resampled with
replacement within each dataset, each keeping all its attempts; the macro mean of each draw is
computed and the interval is the 2.5th–97.5th percentile. Methods evaluated on the same
questions get the *same* resampled questions, so paired differences use paired samples.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from maopd.evaluation.records import COST_FIELDS, EvalRecord

BOOTSTRAP_DRAWS = 4000
BOOTSTRAP_SEED = 20260912
CONFIDENCE = 0.95


@dataclass
class MethodScores:
    """One method's records arranged per dataset as (questions × attempts) arrays.

    ``question_ids[d]`` is sorted, so two methods on the same questions share row order.
    ``attempt_values[d][field]`` holds an array of shape (questions, k) per recorded field.
    """

    method: str
    k: int
    question_ids: dict[str, list[str]]
    attempt_values: dict[str, dict[str, np.ndarray]]
    failures: dict[str, np.ndarray]  # per dataset, (questions, k) array of failure kinds or ""
    flexible_rules: dict[str, np.ndarray]  # per dataset, (questions, k) array of rule numbers


def arrange(records: Iterable[EvalRecord]) -> dict[str, MethodScores]:
    """Group records by method and dataset; every question of a method needs the same k."""
    grouped: dict[str, dict[str, dict[str, list[EvalRecord]]]] = defaultdict(lambda: defaultdict(dict))
    for record in records:
        grouped[record.method][record.dataset].setdefault(record.question_id, []).append(record)
    methods = {}
    for method, datasets in sorted(grouped.items()):
        counts = {
            (dataset, qid): len(attempts)
            for dataset, questions in datasets.items()
            for qid, attempts in questions.items()
        }
        k = max(counts.values())
        short = [f"{d}/{q} ({n})" for (d, q), n in counts.items() if n != k]
        if short:
            raise ValueError(
                f"method {method!r}: every question needs the same number of attempts ({k}); "
                f"these have fewer: {', '.join(short[:5])}{' …' if len(short) > 5 else ''}"
            )
        question_ids, values, failures, rules = {}, {}, {}, {}
        for dataset, questions in sorted(datasets.items()):
            ids = sorted(questions)
            rows = [sorted(questions[qid], key=lambda r: r.attempt) for qid in ids]
            question_ids[dataset] = ids
            fields = {
                "score": [[r.score for r in row] for row in rows],
                "flexible_score": [[r.flexible_score for r in row] for row in rows],
                "format_failure": [[float(r.failure is not None) for r in row] for row in rows],
            }
            for name in COST_FIELDS:
                if all(name in r.counters for row in rows for r in row):
                    fields[name] = [[r.counters[name] for r in row] for row in rows]
            values[dataset] = {name: np.asarray(table, dtype=float) for name, table in fields.items()}
            failures[dataset] = np.asarray([[r.failure or "" for r in row] for row in rows], dtype=object)
            rules[dataset] = np.asarray([[r.flexible_rule for r in row] for row in rows], dtype=int)
        methods[method] = MethodScores(method, k, question_ids, values, failures, rules)
    return methods


# Per-question values: each maps a (questions × k) array to a (questions,) vector.


def avg_per_question(scores: np.ndarray) -> np.ndarray:
    return scores.mean(axis=1)


def pass_per_question(scores: np.ndarray) -> np.ndarray:
    return (scores.sum(axis=1) >= 1).astype(float)


def all_correct_per_question(scores: np.ndarray) -> np.ndarray:
    return (scores.sum(axis=1) == scores.shape[1]).astype(float)


def correct_count_distribution(scores: np.ndarray) -> list[float]:
    """Fraction of questions with n_i = 0, 1, …, k correct attempts."""
    k = scores.shape[1]
    counts = np.bincount(scores.sum(axis=1).round().astype(int), minlength=k + 1)
    return (counts / len(scores)).tolist()


def bootstrap_indices(
    sizes: Mapping[str, int], draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED
) -> dict[str, np.ndarray]:
    """Resampled question rows, (draws × questions) per dataset, datasets in sorted order."""
    rng = np.random.default_rng(seed)
    return {dataset: rng.integers(0, sizes[dataset], size=(draws, sizes[dataset])) for dataset in sorted(sizes)}


@dataclass
class Estimate:
    """A macro mean with its bootstrap interval, and the per-dataset means with theirs."""

    macro: float
    ci: tuple[float, float]
    per_dataset: dict[str, float]
    per_dataset_ci: dict[str, tuple[float, float]]

    def to_dict(self) -> dict:
        return {
            "macro": self.macro,
            "ci": list(self.ci),
            "per_dataset": self.per_dataset,
            "per_dataset_ci": {d: list(ci) for d, ci in self.per_dataset_ci.items()},
        }


def percentile_interval(samples: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def macro_mean(per_question: Mapping[str, np.ndarray]) -> float:
    """The mean of per-question values within each dataset, then over datasets weighted equally."""
    return float(np.mean([float(v.mean()) for _, v in sorted(per_question.items())]))


def estimate(per_question: Mapping[str, np.ndarray], indices: Mapping[str, np.ndarray]) -> Estimate:
    """Macro mean of per-question values (datasets weighted equally) with bootstrap intervals."""
    per_dataset = {d: float(v.mean()) for d, v in sorted(per_question.items())}
    draws = {d: per_question[d][indices[d]].mean(axis=1) for d in per_dataset}
    macro_draws = np.mean([draws[d] for d in per_dataset], axis=0)
    return Estimate(
        macro=macro_mean(per_question),
        ci=percentile_interval(macro_draws),
        per_dataset=per_dataset,
        per_dataset_ci={d: percentile_interval(draws[d]) for d in per_dataset},
    )


def metric_names(k: int) -> dict[str, str]:
    """JSON and table names of the accuracy metrics for k attempts."""
    return {"avg": f"avg@{k}", "pass": f"pass@{k}", "all": f"{k}/{k}", "flexible": f"flexible_avg@{k}"}


def per_question_values(scores: MethodScores) -> dict[str, dict[str, np.ndarray]]:
    """Every per-question quantity of one method: metric or cost name -> dataset -> vector."""
    names = metric_names(scores.k)
    out: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    for dataset, fields in scores.attempt_values.items():
        out[names["avg"]][dataset] = avg_per_question(fields["score"])
        out[names["pass"]][dataset] = pass_per_question(fields["score"])
        out[names["all"]][dataset] = all_correct_per_question(fields["score"])
        out[names["flexible"]][dataset] = avg_per_question(fields["flexible_score"])
        out["format_failure_rate"][dataset] = avg_per_question(fields["format_failure"])
        # The upper bound "if every format failure were correct": a failure always scores 0.
        out["score_if_failures_correct"][dataset] = avg_per_question(fields["score"] + fields["format_failure"])
        for name in COST_FIELDS:
            if name in fields:
                out[name][dataset] = avg_per_question(fields[name])
    return out
