"""The question bootstrap and the seed-level t-interval of a score matrix, side by side, and the verdict."""

import json
import math

import numpy as np
import pytest

from maopd.cli import main
from maopd.evaluation.score_matrix import ScoreMatrix, matrix_from_records, write_matrix
from maopd.evaluation.seed_report import pooled
from maopd.evaluation.seed_statistics import question_bootstrap, seed_interval, side_by_side, verdict
from maopd.evaluation.student_t import t_half_width, t_quantile
from maopd.evaluation.summary import summarize
from tests.evaluation.test_score_matrix import records


def matrix(a: np.ndarray, b: np.ndarray, datasets: list[str] | None = None) -> ScoreMatrix:
    """Systems A and B from (questions × attempts × seeds) score arrays."""
    questions = len(a)
    datasets = datasets or ["1-hop"] * questions
    ids = tuple((d, f"q{i:03d}") for i, d in enumerate(datasets))
    seeds = tuple(f"seed_{s}" for s in range(a.shape[2]))
    return ScoreMatrix(ids, seeds, ("A", "B"), np.stack([a, b], axis=-1).astype(float))


def test_t_quantiles_are_the_known_ones():
    assert t_quantile(2) == 4.303
    assert (t_quantile(1), t_quantile(4), t_quantile(10), t_quantile(13), t_quantile(30)) == (
        12.706,
        2.776,
        2.228,
        2.160,
        2.042,
    )
    assert t_quantile(60) == pytest.approx(2.000, abs=5e-4) and t_quantile(120) == pytest.approx(1.980, abs=5e-4)
    assert t_quantile(10**6) == pytest.approx(1.95996, abs=1e-4)
    with pytest.raises(ValueError, match="at least 1 degree"):
        t_quantile(0)


def test_t_quantiles_match_scipy_wherever_the_table_or_the_expansion_answers():
    stats = pytest.importorskip("scipy.stats")
    for dof in range(1, 400):
        assert t_quantile(dof) == pytest.approx(stats.t.ppf(0.975, dof), abs=5e-4), dof


def test_t_half_width_is_the_textbook_formula_and_needs_two_values():
    values = np.array([0.1, 0.2, 0.6])
    assert float(t_half_width(values)) == pytest.approx(4.303 * math.sqrt(0.07) / math.sqrt(3))
    assert t_half_width(np.array([[1.0, 5.0], [3.0, 5.0]])).tolist() == pytest.approx([12.706, 0.0])
    with pytest.raises(ValueError, match="at least 2 values"):
        t_half_width(np.array([0.5]))


def test_identical_systems_give_exactly_zero_intervals():
    rng = np.random.default_rng(0)
    scores = (rng.random((40, 4, 3)) < 0.5).astype(float)
    result = side_by_side(matrix(scores, scores.copy()), "A", "B", expect="higher")
    assert result["question_bootstrap"]["macro"] == 0.0 and result["question_bootstrap"]["ci"] == [0.0, 0.0]
    assert result["seed_interval"]["mean"] == 0.0 and result["seed_interval"]["ci"] == [0.0, 0.0]
    assert result["verdict"] == "inconclusive"


def test_a_constant_gap_gives_that_gap_in_both_intervals_and_a_verdict_each_way():
    a = np.ones((30, 2, 3))
    b = np.zeros((30, 2, 3))
    b[:, 0, :] = 1.0  # B right on one attempt of two, everywhere: a gap of 0.5 on every question and seed
    m = matrix(a, b, ["1-hop"] * 10 + ["2-hop"] * 20)
    result = side_by_side(m, "A", "B", expect="higher")
    assert result["question_bootstrap"]["ci"] == [0.5, 0.5] and result["seed_interval"]["ci"] == [0.5, 0.5]
    assert result["seed_interval"]["per_seed"] == {"seed_0": 0.5, "seed_1": 0.5, "seed_2": 0.5}
    assert result["verdict"] == "reproduces"
    assert side_by_side(m, "A", "B", expect="lower")["verdict"] == "contradicts"
    assert side_by_side(m, "A", "B", expect="higher", tested=False)["verdict"] == "not tested"
    assert "verdict" not in side_by_side(m, "A", "B")


def test_the_seed_interval_is_the_hand_computed_t_interval_over_three_seeds():
    # 10 questions, 1 attempt; B never right, A right on 1, 2 and 6 questions in seeds 0, 1 and 2.
    a = np.zeros((10, 1, 3))
    for seed, right in enumerate((1, 2, 6)):
        a[:right, 0, seed] = 1.0
    interval = seed_interval(matrix(a, np.zeros_like(a)), "A", "B")
    assert interval.per_seed == pytest.approx({"seed_0": 0.1, "seed_1": 0.2, "seed_2": 0.6})
    half = 4.303 * math.sqrt(((0.1 - 0.3) ** 2 + (0.2 - 0.3) ** 2 + (0.6 - 0.3) ** 2) / 2) / math.sqrt(3)
    assert interval.mean == pytest.approx(0.3)
    assert interval.ci == pytest.approx((0.3 - half, 0.3 + half))
    assert seed_interval(matrix(a, np.zeros_like(a)), "A").to_dict()["ci"] == pytest.approx([0.3 - half, 0.3 + half])


def test_per_seed_figures_are_dataset_macro_means():
    # seed 0: 1-hop 1 of 2 right, 2-hop 1 of 4 right -> macro (0.5 + 0.25) / 2, not the pooled 2/6
    a = np.zeros((6, 1, 2))
    a[[0, 2], 0, 0] = 1.0
    interval = seed_interval(matrix(a, np.zeros_like(a), ["1-hop"] * 2 + ["2-hop"] * 4), "A")
    assert interval.per_seed["seed_0"] == pytest.approx(0.375) and interval.per_seed["seed_1"] == 0.0


def test_one_seed_says_the_seed_interval_cannot_be_computed():
    a = np.ones((10, 4, 1))
    result = side_by_side(matrix(a, np.zeros_like(a)), "A", "B", expect="higher")
    assert result["seed_interval"]["ci"] is None and result["seed_interval"]["seeds"] == 1
    assert "cannot be computed from 1 seed" in result["seed_interval"]["note"]
    assert result["question_bootstrap"]["ci"] == [1.0, 1.0]
    assert result["verdict"] == "inconclusive"  # one interval alone never decides


@pytest.mark.parametrize(
    ("question_ci", "seed_ci", "expect", "tested", "expected"),
    [
        ((0.01, 0.05), (0.002, 0.09), "higher", True, "reproduces"),
        ((-0.05, -0.01), (-0.09, -0.002), "lower", True, "reproduces"),
        ((-0.05, -0.01), (-0.09, -0.002), "higher", True, "contradicts"),
        ((0.01, 0.05), (0.002, 0.09), "lower", True, "contradicts"),
        ((0.01, 0.05), (-0.01, 0.09), "higher", True, "inconclusive"),  # the seeds do not exclude zero
        ((-0.01, 0.05), (0.01, 0.09), "higher", True, "inconclusive"),  # the questions do not
        ((0.01, 0.05), (-0.09, -0.01), "higher", True, "inconclusive"),  # the two disagree
        ((0.0, 0.05), (0.01, 0.09), "higher", True, "inconclusive"),  # touching zero is not excluding it
        ((0.01, 0.05), None, "higher", True, "inconclusive"),
        ((0.01, 0.05), (0.002, 0.09), "higher", False, "not tested"),
    ],
)
def test_the_verdict_rule(question_ci, seed_ci, expect, tested, expected):
    assert verdict(question_ci, seed_ci, expect, tested) == expected


def test_a_bad_direction_or_a_direction_for_one_system_is_refused():
    with pytest.raises(ValueError, match="higher, lower"):
        verdict((0.1, 0.2), (0.1, 0.2), "A>B")
    a = np.ones((4, 1, 2))
    with pytest.raises(ValueError, match="needs a pair"):
        side_by_side(matrix(a, a), "A", expect="higher")


def test_the_matrix_bootstrap_is_the_records_question_bootstrap_pooled_over_seeds():
    rng = np.random.default_rng(3)
    questions = [("1-hop", f"q{i}") for i in range(12)] + [("2-hop", f"r{i}") for i in range(7)]
    per_seed = {
        f"seed_{s}": records("A", {q: list(rng.random(3) < 0.7) for q in questions})
        + records("B", {q: list(rng.random(3) < 0.4) for q in questions})
        for s in range(3)
    }
    summary = summarize(pooled(list(per_seed.values())), [("A", "B")], draws=500)
    m = matrix_from_records(per_seed)
    assert question_bootstrap(m, "A", "B", draws=500).to_dict() == summary["comparisons"][0]["differences"]["avg@9"]
    assert question_bootstrap(m, "A", draws=500).to_dict() == summary["methods"]["A"]["accuracy"]["avg@9"]
    per_seed_avg = {s: summarize(r, draws=1)["methods"]["A"]["accuracy"]["avg@3"]["macro"] for s, r in per_seed.items()}
    assert seed_interval(m, "A").per_seed == pytest.approx(per_seed_avg)


def test_the_command_recomputes_both_intervals_from_the_matrix_file_alone(tmp_path, capsys):
    a = np.ones((30, 2, 3))
    b = np.zeros((30, 2, 3))
    b[:, 0, :] = 1.0
    path = write_matrix(matrix(a, b), tmp_path / "score_matrix.json")
    out = tmp_path / "intervals.json"
    assert main(["eval", "matrix", str(path), "--compare", "A", "B", "--expect", "higher", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| A − B | 50.00 [50.00, 50.00] | 50.00 [50.00, 50.00] | reproduces |" in printed
    (result,) = json.loads(out.read_text())["results"]
    assert result == side_by_side(matrix(a, b), "A", "B", "higher")
    assert main(["eval", "matrix", str(path)]) == 0  # every system's accuracy
    assert "| A | 100.00 [100.00, 100.00] | 100.00 [100.00, 100.00] |" in capsys.readouterr().out
    assert main(["eval", "matrix", str(path), "--compare", "A", "B", "--expect", "lower", "--gates-failed"]) == 0
    assert "| not tested |" in capsys.readouterr().out
    assert main(["eval", "matrix", str(path), "--compare", "A", "B", "--metric", "pass"]) == 0
    printed = capsys.readouterr().out  # B's first attempt is always right: both pass every question
    assert "macro pass@k" in printed and "| A − B | 0.00 [0.00, 0.00] | 0.00 [0.00, 0.00] |" in printed
    assert main(["eval", "matrix", str(path), "--compare", "A", "B", "--metric", "all"]) == 0
    assert "| A − B | 100.00 [100.00, 100.00] | 100.00 [100.00, 100.00] |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--compare", "A", "C"], "no system 'C' in the score matrix; its systems: A, B"),
        (["--expect", "higher"], "--expect: a direction needs pairs; add --compare A B"),
        (["--compare", "A", "B", "--gates-failed"], "--gates-failed: only verdicts are 'not tested'"),
    ],
)
def test_the_command_refuses_bad_input_in_one_line(tmp_path, capsys, arguments, message):
    a = np.ones((4, 1, 2))
    path = write_matrix(matrix(a, a), tmp_path / "m.json")
    assert main(["eval", "matrix", str(path), *arguments]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1 and "Traceback" not in error


def test_the_command_names_a_file_that_is_no_matrix(tmp_path, capsys):
    (tmp_path / "one.jsonl").write_text('{"method": "A"}\n')
    (tmp_path / "two.jsonl").write_text('{"method": "A"}\n{"method": "B"}\n')
    for name, message in (("one.jsonl", "not a score matrix"), ("two.jsonl", "invalid JSON")):
        assert main(["eval", "matrix", str(tmp_path / name)]) == 2
        error = capsys.readouterr().err
        assert f"{name}: {message}" in error and "seed report writes" in error and error.count("\n") == 1


def test_pass_and_all_count_each_seeds_own_attempts():
    """pass@k and k/k are over one seed's k attempts (the paper's k), pooled as the mean over seeds."""
    a = np.zeros((2, 2, 2))
    a[0, 0, 0] = 1  # question 0: one correct attempt in seed 0, none in seed 1
    a[1, :, :] = 1  # question 1: every attempt correct
    a[1, 1, 1] = 0  # ... but one in seed 1
    m = matrix(a, np.zeros_like(a))
    assert seed_interval(m, "A", metric="pass").per_seed == {"seed_0": 1.0, "seed_1": 0.5}
    assert seed_interval(m, "A", metric="all").per_seed == {"seed_0": 0.5, "seed_1": 0.0}
    assert question_bootstrap(m, "A", metric="pass").macro == pytest.approx((0.5 + 1.0) / 2)
    assert question_bootstrap(m, "A", metric="all").macro == pytest.approx((0.0 + 0.5) / 2)
    assert question_bootstrap(m, "A").macro == pytest.approx((1 / 4 + 3 / 4) / 2)
    with pytest.raises(ValueError, match="metric 'best'"):
        seed_interval(m, "A", metric="best")
