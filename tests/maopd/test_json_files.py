"""JSON and JSONL files: every reader of the project is bounded (line size, nesting, lone
surrogates, UTF-8) and accepts a byte order mark; every writer writes NaN and infinities as null."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import maopd.base.json_files as json_files
from maopd.base.errors import UserError
from maopd.base.json_files import iter_json_lines, json_text, read_json_file, write_json
from maopd.envs.datasets import load_questions
from maopd.envs.retrieval.corpus import load_corpus
from maopd.evaluation.converters import convert
from maopd.evaluation.manifest import load_manifest
from maopd.evaluation.records import iter_records
from maopd.evaluation.runner import finished_keys
from maopd.training.ptx import read_rows
from maopd.training.run_logging import read_metrics, truncate_metrics

DEEP = "[" * 200_000 + "]" * 200_000
QUESTION = {"id": "q1", "question": "Who?", "golden_answers": ["Ann"]}

# Every JSONL reader of the project, as (name, file name, read(path)): each must go through
# ``iter_json_lines`` (or ``parse_json``) and so raise its own one-line error on bad input.
READERS = [
    ("questions", "q.jsonl", load_questions),
    ("corpus", "c.jsonl", load_corpus),
    ("manifest", "m.jsonl", load_manifest),
    ("records", "r.jsonl", lambda path: list(iter_records(path))),
    ("eval resume", "r.jsonl", lambda path: finished_keys(path, "m")),
    ("converter", "d.jsonl", lambda path: list(convert(path, "flashrag"))),
    ("metrics", "metrics.jsonl", lambda path: read_metrics(path.parent)),
    ("metrics truncation", "metrics.jsonl", lambda path: truncate_metrics(path.parent, 1)),
    ("ptx data", "p.jsonl", read_rows),
]
IDS = [name for name, _, _ in READERS]


@pytest.mark.parametrize("name, file_name, read", READERS, ids=IDS)
def test_a_line_nested_200k_deep_is_one_user_error_in_every_reader(tmp_path, name, file_name, read):
    path = tmp_path / file_name
    path.write_text(DEEP + "\n")
    with pytest.raises(UserError, match=rf"{file_name}:1: nested more than 64 levels deep$"):
        read(path)


@pytest.mark.parametrize("name, file_name, read", READERS, ids=IDS)
def test_a_line_over_the_bound_is_refused_without_reading_it_whole(tmp_path, monkeypatch, name, file_name, read):
    monkeypatch.setattr(json_files, "MAX_LINE_CHARS", 1000)
    path = tmp_path / file_name
    path.write_text('{"id": "' + "x" * 5000 + '"}\n')
    with pytest.raises(UserError, match=rf"{file_name}:1: a line longer than 1,000 characters"):
        read(path)


def test_nesting_within_the_bound_is_read():
    nested = "[" * 64 + "]" * 64
    assert json_files.parse_json(nested, "x", ValueError) is not None
    with pytest.raises(ValueError, match="nested more than 64 levels deep"):
        json_files.parse_json("[" + nested + "]", "x", ValueError)


@pytest.mark.parametrize(
    "read, row",
    [
        (load_corpus, {"id": "d1", "contents": '"T"\nabc \ud800 def'}),
        (load_manifest, {**QUESTION, "dataset": "x", "question": "Who \udc00?"}),
    ],
    ids=["corpus", "manifest"],
)
def test_a_lone_surrogate_is_one_line_naming_the_line(tmp_path, read, row):
    path = tmp_path / "f.jsonl"
    path.write_text(json.dumps(row) + "\n")  # ensure_ascii: the surrogate is written as its escape
    with pytest.raises(UserError, match=r"f.jsonl:1: holds a lone surrogate"):
        read(path)


def test_corpus_and_manifest_files_with_a_byte_order_mark_are_read(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "d1", "contents": '"T"\nsome text'}).encode() + b"\n")
    assert [doc.id for doc in load_corpus(corpus).documents] == ["d1"]
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(b"\xef\xbb\xbf" + json.dumps({**QUESTION, "dataset": "x"}).encode() + b"\n")
    assert [entry.question.id for entry in load_manifest(manifest)] == ["q1"]


def test_a_json_document_is_bounded_too(tmp_path):
    path = tmp_path / "doc.json"
    path.write_text(DEEP)
    with pytest.raises(ValueError, match="doc.json: nested more than 64 levels deep"):
        read_json_file(path, ValueError, "file")
    path.write_bytes(b"\xef\xbb\xbf[1, 2]")
    assert read_json_file(path, ValueError, "file") == [1, 2]
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="not UTF-8"):
        read_json_file(path, ValueError, "file")


def test_a_directory_or_a_binary_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="corpus file .* is a directory"):
        list(iter_json_lines(tmp_path, ValueError, "corpus file"))
    (tmp_path / "b.jsonl").write_bytes(b'{"a": 1}\n\x00\xff\n')
    with pytest.raises(ValueError, match=r"b.jsonl:2: not UTF-8 text"):
        list(iter_json_lines(tmp_path / "b.jsonl", ValueError, "file"))


def test_non_finite_numbers_are_written_as_null_with_a_warning_naming_the_field(tmp_path, caplog):
    value = {"cost": {"mean": float("inf"), "ci": [float("nan"), 1.5]}, "n": 3}
    with caplog.at_level(logging.WARNING):
        text = json_text(value, "summary.json")
    assert json.loads(text) == {"cost": {"mean": None, "ci": [None, 1.5]}, "n": 3}
    assert "summary.json: cost.mean is inf" in caplog.text and "summary.json: cost.ci[0] is nan" in caplog.text
    path = write_json(tmp_path / "out.json", [float("-inf")], indent=2)
    assert path.read_text() == "[\n  null\n]\n"


def test_a_finite_value_is_written_as_json_dumps_writes_it():
    value = {"b": [1, 2.5, "é"], "a": None}
    assert json_text(value, "x", indent=1, sort_keys=True, ensure_ascii=False) == json.dumps(
        value, indent=1, sort_keys=True, ensure_ascii=False
    )


def test_the_metrics_logger_writes_no_nan(tmp_path, caplog):
    from maopd.training.run_logging import MetricsLogger

    logger = MetricsLogger(tmp_path, tensorboard=False)
    with caplog.at_level(logging.WARNING):
        logger.log(1, {"loss": float("nan"), "reward": 0.5})
    line = (tmp_path / "metrics.jsonl").read_text()
    assert json.loads(line) == {"step": 1, "loss": None, "reward": 0.5} and "NaN" not in line
    assert "loss is nan" in caplog.text


def test_records_written_by_the_runner_are_read_back_by_the_one_reader(tmp_path: Path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"method": "m", "dataset": "d", "question_id": "q", "attempt": 0}) + "\n" + '{"torn')
    assert finished_keys(path, "m") == {("d", "q", 0)}
    assert path.read_text().endswith("}\n")


@pytest.mark.parametrize("tail", ['{"torn', '{"step": 3, "x": "' + "y" * 200_000])
def test_a_torn_last_line_is_dropped_reading_from_the_end(tmp_path, tail):
    path = tmp_path / "a.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n' + tail)
    assert json_files.drop_torn_last_line(path) == tail[:200]
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'
    assert json_files.drop_torn_last_line(path) is None
    path.write_text(tail)
    assert json_files.drop_torn_last_line(path) == tail[:200] and path.read_text() == ""
    assert json_files.drop_torn_last_line(path) is None


def test_a_gzipped_jsonl_file_is_read_and_a_damaged_one_is_named(tmp_path):
    import gzip

    from maopd.evaluation.records import RecordError

    row = {"method": "m", "dataset": "d", "question_id": "q", "attempt": 0, "golden_answers": ["a"]}
    path = tmp_path / "records.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(json.dumps({**row, "final_output": "a"}) + "\n")
    (record,) = iter_records(path)
    assert record.final_output == "a" and record.question_id == "q"
    path.write_bytes(path.read_bytes()[:-12])  # cut short
    with pytest.raises(RecordError, match="not a readable gzip file"):
        list(iter_records(path))
    (tmp_path / "plain.gz").write_text("{}\n")
    with pytest.raises(RecordError, match="plain.gz:1: not a readable gzip file"):
        list(iter_records(tmp_path / "plain.gz"))
