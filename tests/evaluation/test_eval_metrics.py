"""avg@k, pass@k, k/k, costs, and the question bootstrap, pinned on hand-computed cases."""

import numpy as np
import pytest

from maopd.evaluation.metrics import (
    arrange,
    bootstrap_indices,
    correct_count_distribution,
    estimate,
)
from maopd.evaluation.records import EvalRecord, scored
from maopd.evaluation.summary import summarize

RIGHT, WRONG = "<answer>yes</answer>", "<answer>no</answer>"


def make_records(method, table, outputs=None, costs=None):
    """``table``: {dataset: [[1, 0, ...] per question]} of correct (1) or wrong (0) attempts."""
    records = []
    for dataset, rows in table.items():
        for q, row in enumerate(rows):
            for attempt, correct in enumerate(row):
                output = (outputs or {}).get((dataset, q, attempt), RIGHT if correct else WRONG)
                counters = (costs or {}).get((dataset, q, attempt), {})
                records.append(
                    scored(EvalRecord(method, dataset, f"q{q}", attempt, ["yes"], output, counters=dict(counters)))
                )
    return records


TABLE = {
    "a": [[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]],
    "b": [[1, 1, 1, 1]],
}


def test_avg_pass_and_all_correct_per_dataset_and_macro():
    summary = summarize(make_records("m", TABLE), draws=50)
    accuracy = summary["methods"]["m"]["accuracy"]
    # dataset a: n_i = 1, 4, 0 -> avg@4 = (1/4 + 1 + 0)/3, pass@4 = 2/3, 4/4 = 1/3; dataset b: all 1
    assert accuracy["avg@4"]["per_dataset"] == pytest.approx({"a": 1.25 / 3, "b": 1.0})
    assert accuracy["avg@4"]["macro"] == pytest.approx((1.25 / 3 + 1.0) / 2)
    assert accuracy["pass@4"]["per_dataset"] == pytest.approx({"a": 2 / 3, "b": 1.0})
    assert accuracy["4/4"]["per_dataset"] == pytest.approx({"a": 1 / 3, "b": 1.0})
    assert accuracy["4/4"]["macro"] == pytest.approx((1 / 3 + 1) / 2)
    distribution = summary["methods"]["m"]["correct_count_distribution"]
    assert distribution["a"] == pytest.approx([1 / 3, 1 / 3, 0, 0, 1 / 3])
    assert distribution["macro"] == pytest.approx([1 / 6, 1 / 6, 0, 0, 2 / 3])


def test_correct_count_distribution_sums_to_one():
    scores = np.array([[1, 0], [0, 0], [1, 1], [0, 1]], dtype=float)
    assert correct_count_distribution(scores) == [0.25, 0.5, 0.25]


def test_costs_average_attempts_then_questions_then_datasets():
    # dataset a: q0 attempts 2 and 4 (mean 3), q1 attempts 10 and 10 (mean 10) -> 6.5; dataset b: 1
    costs = {
        ("a", 0, 0): {"search_actions": 2},
        ("a", 0, 1): {"search_actions": 4},
        ("a", 1, 0): {"search_actions": 10},
        ("a", 1, 1): {"search_actions": 10},
        ("b", 0, 0): {"search_actions": 1},
        ("b", 0, 1): {"search_actions": 1},
    }
    records = make_records("m", {"a": [[1, 0], [0, 0]], "b": [[1, 1]]}, costs=costs)
    method = summarize(records, draws=20)["methods"]["m"]
    assert method["costs"]["search_actions"]["per_dataset"] == pytest.approx({"a": 6.5, "b": 1.0})
    assert method["costs"]["search_actions"]["macro"] == pytest.approx(3.75)
    assert method["pooled_costs"]["search_actions"] == pytest.approx(28 / 6)
    assert "input_tokens" not in method["costs"]  # not recorded: left out rather than zero


def test_unequal_attempt_counts_are_an_error():
    records = make_records("m", {"a": [[1, 0], [1]]})
    with pytest.raises(ValueError, match="same number of attempts.*a/q1"):
        arrange(records)


def test_bootstrap_is_deterministic_under_the_seed_and_matches_a_manual_draw():
    sizes = {"b": 3, "a": 5}
    first, again = bootstrap_indices(sizes, 100, 7), bootstrap_indices(sizes, 100, 7)
    assert all(np.array_equal(first[d], again[d]) for d in sizes)
    assert not np.array_equal(first["a"], bootstrap_indices(sizes, 100, 8)["a"])
    # Datasets are drawn in sorted order from one generator.
    rng = np.random.default_rng(7)
    assert np.array_equal(first["a"], rng.integers(0, 5, size=(100, 5)))
    assert np.array_equal(first["b"], rng.integers(0, 3, size=(100, 3)))

    values = {"a": np.array([0.0, 1, 1, 0, 1]), "b": np.array([1.0, 0, 0])}
    result = estimate(values, first)
    macro_draws = (values["a"][first["a"]].mean(axis=1) + values["b"][first["b"]].mean(axis=1)) / 2
    assert result.macro == pytest.approx((0.6 + 1 / 3) / 2)
    assert result.ci == pytest.approx(tuple(np.percentile(macro_draws, [2.5, 97.5])))


def test_summary_intervals_repeat_exactly_under_the_seed():
    rng = np.random.default_rng(1)
    records = make_records("m", {"a": rng.integers(0, 2, (30, 4)).tolist(), "b": rng.integers(0, 2, (20, 4)).tolist()})
    first, again = summarize(records, draws=300, seed=3), summarize(records, draws=300, seed=3)
    assert first == again
    assert (
        summarize(records, draws=300, seed=4)["methods"]["m"]["accuracy"]["avg@4"]["ci"]
        != first["methods"]["m"]["accuracy"]["avg@4"]["ci"]
    )


def test_paired_differences_use_the_same_resampled_questions():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 2, size=(40, 4)).tolist()
    better = [row[:] for row in base]
    better[0] = [1, 1, 1, 1]  # A differs from B on one question only
    records = make_records("B", {"d": base}) + make_records("A", {"d": better})
    summary = summarize(records, [("A", "B")], draws=500)
    diff = summary["comparisons"][0]["differences"]["avg@4"]
    expected = (4 - sum(base[0])) / 4 / 40
    assert diff["macro"] == pytest.approx(expected)
    # Paired: every draw's difference is (count of question 0 in the draw) * its gap / 40, never negative,
    # and far tighter than the unpaired intervals of the two methods.
    assert diff["ci"][0] >= 0.0

    def width(ci):
        return ci[1] - ci[0]

    assert width(diff["ci"]) < width(summary["methods"]["A"]["accuracy"]["avg@4"]["ci"]) / 2
    # Identical methods differ by exactly zero in every draw.
    same = summarize(make_records("B", {"d": base}) + make_records("C", {"d": base}), [("B", "C")], draws=100)
    assert same["comparisons"][0]["differences"]["pass@4"]["ci"] == [0.0, 0.0]


def test_pairing_needs_the_same_questions():
    records = make_records("A", {"d": [[1], [0]]}) + make_records("B", {"d": [[1]]})
    with pytest.raises(ValueError, match="differ on 1 question"):
        summarize(records, [("A", "B")], draws=10)
    with pytest.raises(ValueError, match="no records for method 'Z'"):
        summarize(records, [("A", "Z")], draws=10)


def test_format_failures_rescue_and_upper_bound():
    # B: q0 attempt 0 is correct; attempt 1 lacks a tag but says "yes" (flexible rule 5 rescues it);
    # q1 has no candidate at all and one empty output.
    outputs = {("d", 0, 1): "yes", ("d", 1, 0): None, ("d", 1, 1): ""}
    b = make_records("B", {"d": [[1, 0], [0, 0]]}, outputs=outputs)
    a = make_records("A", {"d": [[1, 1], [1, 0]]})
    summary = summarize(a + b, [("A", "B")], draws=50)
    method_b = summary["methods"]["B"]
    assert method_b["failures"]["counts"] == {"no_candidate": 1, "empty_candidate": 1, "no_valid_tag": 1}
    assert method_b["failures"]["rate"]["macro"] == pytest.approx(3 / 4)
    assert method_b["extraction"]["rescued"] == 1
    assert method_b["extraction"]["flexible_rule_counts"] == {"1": 1, "2": 0, "3": 0, "4": 0, "5": 1, "6": 2}
    assert method_b["accuracy"]["flexible_avg@2"]["macro"] == pytest.approx(0.5)
    # a_B = 1/4 and f_B = 3/4, so B's bound is 1; A scores 3/4; A - (a_B + f_B) = -1/4
    bound = summary["comparisons"][0]["a_minus_b_if_failures_correct"]
    assert bound["macro"] == pytest.approx(-0.25)
