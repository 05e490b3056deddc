"""Converters for the raw real-data formats, the manifest builder, and the record format."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from maopd.envs.datasets import DatasetError, Question
from maopd.envs.records import WorkflowRecord
from maopd.evaluation.converters import CONVERTERS, convert, pool_corpus
from maopd.evaluation.manifest import (
    build_manifest,
    load_manifest,
    normalize_question,
    question_hash,
    write_manifest,
)
from maopd.evaluation.records import (
    MINIMAL_RECORD,
    RecordError,
    from_workflow,
    iter_records,
    load_records,
    record_line,
)
from tests.real_data import REAL, needs_real


@needs_real
@pytest.mark.parametrize(
    "name, fmt, count, first_answer",
    [
        ("hotpotqa_distractor_dev300.jsonl", "hotpotqa", 300, "Tulsa"),
        ("2wiki_dev200_context.jsonl", "2wiki", 200, "Free Guy"),
        ("musique_ans_dev200_paragraphs.jsonl", "musique", 200, "Stanley"),
        ("popqa1000_paragraphs.json", "popqa", 1000, "politician"),
        ("bamboogle_decomposed.json", "bamboogle-decomposed", 125, "james madison"),
        ("dpr_nq_dev_sample.json", "dpr-nq", 5, "Linda Davis"),
        ("bamboogle_test_flashrag.jsonl", "flashrag", 125, "james madison"),
        ("nq_test_sample_flashrag.jsonl", "flashrag", 17, "Wilhelm Conrad Röntgen"),
    ],
)
def test_real_files_convert(name, fmt, count, first_answer):
    examples = convert(REAL / name, fmt)
    assert len(examples) == count
    assert examples[0].question.golden_answers[0] == first_answer
    assert len({e.question.id for e in examples}) == count


@needs_real
def test_popqa_answers_and_pooled_corpus():
    examples = convert(REAL / "popqa1000_paragraphs.json", "popqa")
    assert examples[0].question.golden_answers == (
        "politician",
        "political leader",
        "political figure",
        "polit.",
        "pol",
    )
    corpus = pool_corpus(examples[:3] + examples[:3])  # repeated paragraphs are kept once
    assert len(corpus) == len({p for e in examples[:3] for p in e.paragraphs})


@pytest.mark.parametrize("fmt", sorted(CONVERTERS))
def test_bad_lines_name_file_and_line(tmp_path, fmt):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "1", "question": "q?", "golden_answers": ["a"]}\n{broken\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad.jsonl:[12]"):
        convert(path, fmt)


def test_missing_field_in_a_json_array_names_the_item(tmp_path):
    path = tmp_path / "pop.json"
    path.write_text(json.dumps([{"id": 1, "question": "q?", "possible_answers": '["a"]'}, {"id": 2}]))
    with pytest.raises(DatasetError, match=r"pop.json: item 2: missing field"):
        convert(path, "popqa")


def test_question_normalization():
    assert normalize_question("  Ｗho   wrote “Hamlet”?\n") == "who wrote hamlet"  # NFKC folds the wide W
    assert normalize_question("Who's the author of the book?") == "whos the author of the book"  # articles kept
    assert question_hash("Who wrote Hamlet?") == question_hash("who wrote  HAMLET")


def pool(prefix, n):
    return [Question(f"{prefix}{i}", f"{prefix} question number {i}?", ("a",)) for i in range(n)]


def test_manifest_removes_training_overlaps_and_samples_deterministically(tmp_path):
    pools = {"nq": pool("nq", 30), "hotpotqa": pool("hp", 10)}
    training = ["NQ question number 3", "nq  Question Number 7?!", "nq question-number 8", "unrelated"]
    manifest = build_manifest(pools, {"nq": 20, "hotpotqa": 5}, seed=5, training_questions=training)
    ids = [e.question.id for e in manifest.entries]
    assert len(ids) == 25 and "nq3" not in ids and "nq7" not in ids
    # A removed hyphen joins the words ("questionnumber"), so question 8 does not match.
    assert manifest.report["removed_per_dataset"] == {"nq": 2, "hotpotqa": 0}
    assert sorted(r["id"] for r in manifest.report["removed"]) == ["nq3", "nq7"]
    assert [e.question.id for e in build_manifest(pools, {"nq": 20, "hotpotqa": 5}, 5, training).entries] == ids
    assert [e.question.id for e in build_manifest(pools, {"nq": 20, "hotpotqa": 5}, 6, training).entries] != ids
    # Resizing one dataset leaves the other's sample unchanged.
    resized = build_manifest(pools, {"nq": 20, "hotpotqa": 8}, 5, training)
    assert [e.question.id for e in resized.entries if e.dataset == "nq"] == ids[:20]

    path = tmp_path / "manifest.jsonl"
    digest = write_manifest(manifest, path)
    report = json.loads(Path(f"{path}.report.json").read_text())
    assert report["manifest_sha256"] == digest and report["total"] == 25
    loaded = load_manifest(path)
    assert [(e.dataset, e.question.id, e.hash) for e in loaded] == [
        (e.dataset, e.question.id, e.hash) for e in manifest.entries
    ]


def test_manifest_too_small_pool_names_the_dataset():
    with pytest.raises(ValueError, match="'nq': asked for 5 questions but only 3 remain"):
        build_manifest({"nq": pool("nq", 3)}, {"nq": 5})


# a partial JSON form, as another system may write it: the fields left out take their defaults
WORKFLOW = WorkflowRecord.from_json(
    {
        "workflow": "hierarchical",
        "question_id": "q1",
        "question": "Who?",
        "golden_answers": ["Ann"],
        "subtasks": [{"wave": 0, "agent": "searcher_0", "task": "Who?"}],
        "reports": [],
        "candidates": ["<answer>Bob</answer>", "Final answer: Ann"],
        "counters": {
            "search_actions": 2,
            "searches_with_passages": 1,
            "reports": 1,
            "task_assignments": 1,
            "input_tokens": 100,
            "output_tokens": 20,
            "env_steps": 5,
        },
        "duration_s": 0.5,
    }
)


def test_workflow_record_to_eval_record_and_back(tmp_path):
    record = from_workflow(WORKFLOW, "opd", "nq", attempt=2, seed=9)
    # The last Answerer output is the one scored: no strict tag, flexible rule 4 finds the right answer.
    assert (record.final_output, record.strict_answer, record.score) == ("Final answer: Ann", None, 0.0)
    assert (record.flexible_answer, record.flexible_rule, record.flexible_score) == ("Ann", 4, 1.0)
    assert record.failure == "no_valid_tag"
    row = record.to_dict()
    assert row["search_actions"] == 2 and row["duration_s"] == 0.5 and "env_steps" not in row
    path = tmp_path / "r.jsonl"
    path.write_text(record_line(record))
    [loaded] = list(iter_records(path))
    assert loaded == record
    assert from_workflow(replace(WORKFLOW, candidates=[]), "opd", "nq", 0).failure == "no_candidate"


def test_record_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / "r.jsonl"
    good = {
        "method": "m",
        "dataset": "d",
        "question_id": "q",
        "attempt": 0,
        "golden_answers": ["a"],
        "final_output": "x",
    }
    path.write_text(json.dumps(good) + "\n" + json.dumps(dict(good, attempt=-1)) + "\n")
    with pytest.raises(RecordError, match=r"r.jsonl:2: field 'attempt'"):
        list(iter_records(path))
    path.write_text(json.dumps(good) + "\n" + json.dumps({k: v for k, v in good.items() if k != "final_output"}) + "\n")
    with pytest.raises(RecordError, match=r"r.jsonl:2: missing field 'final_output'"):
        list(iter_records(path))
    path.write_text(json.dumps(good) + "\n" + json.dumps(dict(good, search_actions="many")) + "\n")
    with pytest.raises(RecordError, match=r"r.jsonl:2: field 'search_actions' must be a number"):
        list(iter_records(path))
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(RecordError, match="repeats"):
        load_records([path])


def test_a_stored_score_is_recomputed_from_the_output(tmp_path):
    path = tmp_path / "r.jsonl"
    row = {
        "method": "m",
        "dataset": "d",
        "question_id": "q",
        "attempt": 0,
        "golden_answers": ["a"],
        "final_output": "<answer>b</answer>",
        "score": 1,
    }
    path.write_text(json.dumps(row) + "\n")
    assert next(iter_records(path)).score == 0.0


GOOD_RECORD = MINIMAL_RECORD


@pytest.mark.parametrize("raw", ["1" + "0" * 400, "1e308", "-1", "NaN", "Infinity", "9007199254740993"])
def test_a_counter_outside_0_to_2_53_is_refused_naming_the_field(tmp_path, raw):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(GOOD_RECORD)[:-1] + f', "input_tokens": {raw}}}\n')
    with pytest.raises(RecordError, match=r"r.jsonl:1: field 'input_tokens' must be a number in \[0, 2\*\*53\]") as e:
        list(iter_records(path))
    assert len(str(e.value)) < 200


@pytest.mark.parametrize(
    "trajectory, field",
    [
        ([], "trajectory"),
        ({"subtasks": 5}, "trajectory.subtasks"),
        ({"reports": [1]}, "trajectory.reports"),
        ({"searches": [{"passages": 3}]}, r"trajectory.searches\[0\].passages"),
    ],
)
def test_a_malformed_trajectory_is_refused_naming_the_field(tmp_path, trajectory, field):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(dict(GOOD_RECORD, trajectory=trajectory)) + "\n")
    with pytest.raises(RecordError, match=rf"r.jsonl:1: field '{field}"):
        list(iter_records(path))


def _manifest(path, rows):
    path.write_text("".join(json.dumps({"dataset": "d", "question": "Who?", **row}) + "\n" for row in rows))
    return path


def test_a_manifest_repeating_a_question_id_is_refused(tmp_path):
    rows = [{"id": "q1", "golden_answers": ["a"]}, {"id": "q1", "golden_answers": ["b"]}]
    path = _manifest(tmp_path / "m.jsonl", rows)
    with pytest.raises(DatasetError, match=r"m.jsonl:2: question 'q1' of dataset 'd' repeats line 1"):
        load_manifest(path)


def test_a_question_without_golden_answers_is_refused(tmp_path):
    path = _manifest(tmp_path / "m.jsonl", [{"id": "q1", "golden_answers": []}])
    with pytest.raises(DatasetError, match=r"m.jsonl:1: field 'golden_answers' must be a non-empty list of strings"):
        load_manifest(path)
