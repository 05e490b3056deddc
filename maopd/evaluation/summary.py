"""The JSON summary of ``maopd eval score``: every metric, cost and comparison, unrounded.

Keys are documented in docs/evaluation.md. Paired comparisons need both methods to cover the
same questions, because a bootstrap draw resamples *questions* and keeps every method's attempts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from maopd.evaluation.extraction import FAILURE_KINDS
from maopd.evaluation.metrics import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    MethodScores,
    arrange,
    bootstrap_indices,
    correct_count_distribution,
    estimate,
    metric_names,
    per_question_values,
)
from maopd.evaluation.records import COST_FIELDS, EvalRecord


def _complete(values: dict[str, dict[str, np.ndarray]], datasets: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """Keep only quantities recorded for every dataset (a cost missing somewhere is left out)."""
    return {name: per_ds for name, per_ds in values.items() if set(per_ds) == set(datasets)}


def method_summary(scores: MethodScores, draws: int, seed: int) -> dict:
    datasets = sorted(scores.question_ids)
    indices = bootstrap_indices({d: len(scores.question_ids[d]) for d in datasets}, draws, seed)
    values = _complete(per_question_values(scores), datasets)
    names = metric_names(scores.k)
    accuracy = {name: estimate(values[name], indices).to_dict() for name in names.values()}
    distribution = {d: correct_count_distribution(scores.attempt_values[d]["score"]) for d in datasets}
    distribution["macro"] = np.mean([distribution[d] for d in datasets], axis=0).tolist()

    failures = Counter(kind for d in datasets for kind in scores.failures[d].ravel() if kind)
    rules = Counter(int(rule) for d in datasets for rule in scores.flexible_rules[d].ravel())
    rescued = sum(
        int(((fields["flexible_score"] == 1) & (fields["score"] == 0)).sum())
        for fields in scores.attempt_values.values()
    )
    return {
        "k": scores.k,
        "num_records": sum(len(ids) * scores.k for ids in scores.question_ids.values()),
        "num_questions": {d: len(scores.question_ids[d]) for d in datasets},
        "accuracy": accuracy,
        "correct_count_distribution": distribution,
        "costs": {name: estimate(values[name], indices).to_dict() for name in COST_FIELDS if name in values},
        "pooled_costs": {
            name: float(np.mean(np.concatenate([scores.attempt_values[d][name].ravel() for d in datasets])))
            for name in COST_FIELDS
            if name in values
        },
        "extraction": {
            "rescued": rescued,
            "flexible_rule_counts": {str(rule): rules.get(rule, 0) for rule in range(1, 7)},
        },
        "failures": {
            "counts": {kind: failures.get(kind, 0) for kind in FAILURE_KINDS},
            "rate": estimate(values["format_failure_rate"], indices).to_dict(),
        },
    }


def compare(a: MethodScores, b: MethodScores, draws: int, seed: int) -> dict:
    """Paired differences A − B on the same resampled questions, and the format-failure bound."""
    if a.question_ids != b.question_ids:
        missing = sorted(
            f"{d}/{q}"
            for d in set(a.question_ids) | set(b.question_ids)
            for q in set(a.question_ids.get(d, [])) ^ set(b.question_ids.get(d, []))
        )
        raise ValueError(
            f"cannot pair {a.method!r} and {b.method!r}: they differ on {len(missing)} question(s), "
            f"e.g. {', '.join(missing[:5])}"
        )
    if a.k != b.k:
        raise ValueError(f"cannot pair {a.method!r} (k={a.k}) and {b.method!r} (k={b.k})")
    datasets = sorted(a.question_ids)
    indices = bootstrap_indices({d: len(a.question_ids[d]) for d in datasets}, draws, seed)
    values_a = _complete(per_question_values(a), datasets)
    values_b = _complete(per_question_values(b), datasets)
    shared = [name for name in values_a if name in values_b]

    def difference(name_a: str, name_b: str) -> dict:
        diff = {d: values_a[name_a][d] - values_b[name_b][d] for d in datasets}
        return estimate(diff, indices).to_dict()

    return {
        "a": a.method,
        "b": b.method,
        "differences": {name: difference(name, name) for name in shared},
        # A's unchanged score minus B's score if every format failure of B were correct.
        "a_minus_b_if_failures_correct": difference(metric_names(a.k)["avg"], "score_if_failures_correct"),
    }


def summarize(
    records: Iterable[EvalRecord],
    comparisons: Sequence[tuple[str, str]] = (),
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
) -> dict:
    methods = arrange(records)
    for pair in comparisons:
        for name in pair:
            if name not in methods:
                raise ValueError(f"--compare: no records for method {name!r}; methods: {sorted(methods)}")
    return {
        "protocol": {"bootstrap_draws": draws, "bootstrap_seed": seed, "confidence": CONFIDENCE},
        "methods": {name: method_summary(scores, draws, seed) for name, scores in methods.items()},
        "comparisons": [compare(methods[a], methods[b], draws, seed) for a, b in comparisons],
    }
