"""The score matrix: built from several seeds' records, written and read back exactly, bad files refused."""

import json

import numpy as np
import pytest

from maopd.evaluation.records import EvalRecord, scored
from maopd.evaluation.score_matrix import ScoreMatrix, ScoreMatrixError, matrix_from_records, read_matrix, write_matrix


def records(method: str, correct: dict[tuple[str, str], list[int]]) -> list[EvalRecord]:
    """One scored record per (question, attempt); ``correct[(dataset, qid)][a]`` says if attempt a is right."""
    return [
        scored(
            EvalRecord(
                method=method,
                dataset=dataset,
                question_id=qid,
                attempt=a,
                golden_answers=["x"],
                final_output="<answer>x</answer>" if ok else "<answer>y</answer>",
            )
        )
        for (dataset, qid), attempts in correct.items()
        for a, ok in enumerate(attempts)
    ]


def two_seeds() -> dict[str, list[EvalRecord]]:
    return {
        "seed_0": records("A", {("2-hop", "q9"): [1, 0], ("1-hop", "q2"): [0, 0], ("1-hop", "q1"): [1, 1]})
        + records("B", {("1-hop", "q1"): [0, 1], ("1-hop", "q2"): [0, 0], ("2-hop", "q9"): [0, 0]}),
        "seed_1": records("A", {("1-hop", "q1"): [0, 1], ("1-hop", "q2"): [1, 1], ("2-hop", "q9"): [1, 1]})
        + records("B", {("1-hop", "q1"): [1, 1], ("1-hop", "q2"): [0, 1], ("2-hop", "q9"): [1, 0]}),
    }


def test_matrix_from_records_puts_each_score_on_its_question_attempt_seed_and_system():
    matrix = matrix_from_records(two_seeds())
    assert matrix.questions == (("1-hop", "q1"), ("1-hop", "q2"), ("2-hop", "q9"))
    assert (matrix.seeds, matrix.systems, matrix.attempts) == (("seed_0", "seed_1"), ("A", "B"), 2)
    assert matrix.scores.shape == (3, 2, 2, 2)
    assert matrix.scores[2, :, 0, 0].tolist() == [1.0, 0.0]  # 2-hop/q9, seed_0, A
    assert matrix.scores[0, :, 1, 1].tolist() == [1.0, 1.0]  # 1-hop/q1, seed_1, B
    assert matrix.system("B")[1, :, 1].tolist() == [0.0, 1.0]
    assert {d: v.tolist() for d, v in matrix.by_dataset(np.array([1.0, 2.0, 3.0])).items()} == {
        "1-hop": [1.0, 2.0],
        "2-hop": [3.0],
    }


def test_matrix_round_trips_exactly_through_its_file(tmp_path):
    matrix = matrix_from_records(two_seeds())
    path = write_matrix(matrix, tmp_path / "score_matrix.json")
    assert read_matrix(path) == matrix
    data = json.loads(path.read_text())
    assert data["axes"] == ["question", "attempt", "seed", "system"] and data["questions"][2] == ["2-hop", "q9"]
    assert len(path.read_text().splitlines()) > len(matrix.questions) * 2  # one line per question, not one blob
    fractional = ScoreMatrix(matrix.questions, matrix.seeds, matrix.systems, matrix.scores / 3)
    assert read_matrix(write_matrix(fractional, tmp_path / "thirds.json")) == fractional
    assert read_matrix(path) != fractional


def test_a_missing_cell_is_refused_by_name():
    seeds = two_seeds()
    seeds["seed_1"] = [r for r in seeds["seed_1"] if r.method == "A"]
    with pytest.raises(ScoreMatrixError, match="system 'B' has no records in seed 'seed_1'"):
        matrix_from_records(seeds)
    assert matrix_from_records(seeds, systems=["A"]).systems == ("A",)
    seeds = two_seeds()
    seeds["seed_1"] = [r for r in seeds["seed_1"] if r.question_id != "q2" or r.method == "B"]
    with pytest.raises(ScoreMatrixError, match="differ on 1 question.*1-hop/q2"):
        matrix_from_records(seeds)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(format="other"), "not a score matrix"),
        (lambda d: d.update(version=9), "version 9"),
        (lambda d: d.pop("scores"), "lacks scores"),
        (lambda d: d["scores"].pop(), r"shape \(3, 2, 2, 2\)"),
        (lambda d: d["scores"][0][0][0].__setitem__(0, "1"), "nested lists of numbers"),
        (lambda d: d["scores"][0][0][0].__setitem__(0, 2), "between 0 and 1"),
        (lambda d: d.update(systems=["A", "A"]), "systems repeat a name: A"),
        (lambda d: d["questions"].reverse(), "sorted"),
    ],
)
def test_a_bad_file_is_one_line_naming_it(tmp_path, edit, message):
    path = write_matrix(matrix_from_records(two_seeds()), tmp_path / "m.json")
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ScoreMatrixError, match=message) as error:
        read_matrix(path)
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)


def test_a_file_that_is_not_json_or_missing_is_one_line(tmp_path):
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ScoreMatrixError, match="broken.json: invalid JSON .*seed report writes"):
        read_matrix(tmp_path / "broken.json")
    with pytest.raises(ScoreMatrixError, match="absent.json does not exist"):
        read_matrix(tmp_path / "absent.json")


def test_an_unknown_system_names_the_known_ones():
    with pytest.raises(ScoreMatrixError, match="no system 'C'.*A, B"):
        matrix_from_records(two_seeds()).system("C")
