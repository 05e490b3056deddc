"""Numbers and files out of bounds are one-line errors of ``maopd``, exit status 2, in process."""

from __future__ import annotations

import json

import pytest

from maopd.cli import main
from maopd.evaluation.records import MINIMAL_RECORD

RECORD = MINIMAL_RECORD


@pytest.mark.parametrize(
    "argv, named",
    [
        (["play", "--seed", "-1"], "--seed"),
        (["play", "--seed", "4294967296"], "--seed"),
        (["world", "build", "--seed", "-3", "--out", "w"], "--seed"),
        (["world", "demos", "--limit", "-1", "--out", "d.jsonl"], "--limit"),  # it meant "all but one"
        (["world", "demos", "--noise", "5", "--out", "d.jsonl"], "--noise"),
        (["world", "demos", "--noise", "nan", "--out", "d.jsonl"], "--noise"),
        (["train", "--seeds", "0", "-2"], "--seeds"),
        (["eval", "run", "--seed", "-1", "--manifest", "m.jsonl", "--out", "r.jsonl"], "--seed"),
    ],
)
def test_an_out_of_range_number_is_a_usage_error(tmp_path, monkeypatch, capsys, argv, named):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and named in err and "out of range" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "line, message",
    [
        (json.dumps(RECORD)[:-1] + ', "input_tokens": 1' + "0" * 400 + "}", "field 'input_tokens' must be a number"),
        (json.dumps(dict(RECORD, trajectory={"subtasks": 5})), "field 'trajectory.subtasks' must be a list"),
        ("[" * 200_000 + "]" * 200_000, "nested more than 64 levels deep"),
    ],
    ids=["huge counter", "malformed trajectory", "deep nesting"],
)
def test_eval_score_refuses_a_bad_record_in_one_line(tmp_path, capsys, line, message):
    records = tmp_path / "r.jsonl"
    records.write_text(line + "\n")
    assert main(["eval", "score", str(records), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"maopd eval score: {records}:1: {message}") and err.count("\n") == 1


def test_play_refuses_a_question_index_out_of_range(capsys):
    assert main(["play", "--question-index", "99999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("maopd play: options['question_index']=99999 is invalid") and err.count("\n") == 1
