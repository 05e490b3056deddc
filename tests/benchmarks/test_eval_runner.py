"""The runner resumes without rerunning or losing records; ``maopd eval`` end to end on real data."""

import json
import re
from pathlib import Path

import pytest

from benchmarks.eval.manifest import ManifestEntry, question_hash
from benchmarks.eval.records import load_records
from benchmarks.eval.runner import EvalSettings, attempt_seed, run_attempts
from envs.datasets import Question
from maopd.cli import main

REAL = Path("/work/shared/data/real")
if not REAL.is_dir():
    REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "real"


def manifest(n):
    return [
        ManifestEntry("d", q, question_hash(q.question))
        for q in (Question(f"q{i}", f"question {i}?", (f"a{i}",)) for i in range(n))
    ]


class EchoSolver:
    """Answers question i correctly on even seeds; can be told to crash after some calls."""

    def __init__(self, crash_after=None):
        self.calls, self.solved, self.crash_after = 0, [], crash_after

    def __call__(self, questions, seeds):
        if self.crash_after is not None and self.calls >= self.crash_after:
            raise RuntimeError("simulated crash")
        self.calls += 1
        self.solved += [(q.id, s) for q, s in zip(questions, seeds)]
        return [
            {
                "question_id": q.id,
                "question": q.question,
                "golden_answers": list(q.golden_answers),
                "candidates": [f"<answer>{q.golden_answers[0] if s % 2 == 0 else 'x'}</answer>"],
                "counters": {"search_actions": 1},
                "duration_s": 0.1,
            }
            for q, s in zip(questions, seeds)
        ]


def test_resume_never_reruns_or_loses_records(tmp_path):
    out = tmp_path / "records.jsonl"
    settings = EvalSettings(attempts=3, batch_size=4, seed=1)
    crashing = EchoSolver(crash_after=2)
    with pytest.raises(RuntimeError):
        run_attempts(crashing, manifest(5), out, "m", settings)
    assert len(out.read_text().splitlines()) == 8  # two whole batches were saved
    with out.open("a") as handle:
        handle.write('{"method": "m", "dataset": "d", "quest')  # a write cut short by a crash

    resumed = EchoSolver()
    assert run_attempts(resumed, manifest(5), out, "m", settings) == 7
    assert not set(resumed.solved) & set(crashing.solved)
    records = load_records([out])
    assert sorted((r.question_id, r.attempt) for r in records) == sorted(
        (f"q{i}", a) for i in range(5) for a in range(3)
    )
    for record in records:
        assert record.seed == attempt_seed(1, "d", record.question_id, record.attempt)
        assert record.score == float(record.seed % 2 == 0)
    assert run_attempts(EchoSolver(crash_after=0), manifest(5), out, "m", settings) == 0
    # Another method in the same file is a separate run.
    assert run_attempts(EchoSolver(), manifest(5), out, "other", settings) == 15


def test_solve_must_answer_the_questions_it_was_given(tmp_path):
    def wrong(questions, seeds):
        return [{"question_id": "nope", "golden_answers": ["a"], "candidates": []} for _ in questions]

    with pytest.raises(ValueError, match="'nope' where 'q0' was expected"):
        run_attempts(wrong, manifest(2), tmp_path / "r.jsonl", "m")


@pytest.mark.slow
@pytest.mark.skipif(not REAL.is_dir(), reason="shared/data/real is not available")
def test_cli_end_to_end_on_real_data(tmp_path, capsys):
    corpus, manifest_path, records = tmp_path / "corpus.jsonl", tmp_path / "manifest.jsonl", tmp_path / "records.jsonl"
    assert (
        main(
            [
                "eval",
                "corpus",
                f"{REAL}/hotpotqa_distractor_dev300.jsonl:hotpotqa",
                f"{REAL}/musique_ans_dev200_paragraphs.jsonl:musique",
                "--out",
                str(corpus),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "eval",
                "manifest",
                "--dataset",
                f"hotpotqa={REAL}/hotpotqa_distractor_dev300.jsonl:hotpotqa",
                "--dataset",
                f"musique={REAL}/musique_ans_dev200_paragraphs.jsonl:musique",
                "--count",
                "hotpotqa=4",
                "--count",
                "musique=3",
                "--out",
                str(manifest_path),
            ]
        )
        == 0
    )
    for workflow in ("hierarchical", "cascade"):
        assert (
            main(
                [
                    "eval",
                    "run",
                    "--manifest",
                    str(manifest_path),
                    "--corpus",
                    str(corpus),
                    "--workflow",
                    workflow,
                    "--attempts",
                    "2",
                    "--out",
                    str(records),
                ]
            )
            == 0
        )
    assert len(records.read_text().splitlines()) == 2 * 7 * 2
    out = tmp_path / "report"
    assert (
        main(
            [
                "eval",
                "score",
                str(records),
                "--compare",
                "scripted-hierarchical",
                "scripted-cascade",
                "--draws",
                "200",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| scripted-cascade |" in printed and "pass@2" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["scripted-cascade"]["num_questions"] == {"hotpotqa": 4, "musique": 3}
    assert summary["methods"]["scripted-cascade"]["costs"]["task_assignments"]["macro"] == 0.0
    for name in (
        "tables.md",
        "main.csv",
        "table4.csv",
        "costs.csv",
        "completion.csv",
        "paired.csv",
        "cost_accuracy.png",
        "viewer.html",
    ):
        assert (out / name).stat().st_size > 0, name
    assert "scripted-hierarchical" in (out / "viewer.html").read_text()


def test_cli_reports_bad_records_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"method": "m"}\n')
    assert main(["eval", "score", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert re.fullmatch(r"maopd eval score: .*bad.jsonl:1: missing field.*\n", capsys.readouterr().err)
