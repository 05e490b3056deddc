"""The runner resumes without rerunning or losing records; ``maopd eval`` end to end on real data."""

import json
import re
from pathlib import Path

import pytest

from maopd.cli import main
from maopd.envs.datasets import Question
from maopd.envs.records import Counters, WorkflowRecord
from maopd.evaluation.manifest import ManifestEntry, question_hash
from maopd.evaluation.records import RecordError, load_records
from maopd.evaluation.runner import EvalSettings, attempt_seed, run_attempts, settings_file
from tests.real_data import REAL, needs_real


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
            WorkflowRecord(
                question_id=q.id,
                question=q.question,
                golden_answers=list(q.golden_answers),
                candidates=[f"<answer>{q.golden_answers[0] if s % 2 == 0 else 'x'}</answer>"],
                counters=Counters(search_actions=1),
                duration_s=0.1,
            )
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
        return [WorkflowRecord(question_id="nope", golden_answers=["a"]) for _ in questions]

    with pytest.raises(ValueError, match="'nope' where 'q0' was expected"):
        run_attempts(wrong, manifest(2), tmp_path / "r.jsonl", "m")

    def untyped(questions, seeds):
        return [{"question_id": q.id, "golden_answers": ["a"], "candidates": []} for q in questions]

    with pytest.raises(ValueError, match="solve returned a dict where a WorkflowRecord"):
        run_attempts(untyped, manifest(2), tmp_path / "r.jsonl", "m")


@pytest.mark.slow
@needs_real
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
    for workflow in ("hierarchical", "cascade", "orchestra"):
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
    assert len(records.read_text().splitlines()) == 3 * 7 * 2
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
    assert summary["methods"]["scripted-orchestra"]["num_questions"] == {"hotpotqa": 4, "musique": 3}


def test_cli_reports_bad_records_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"method": "m"}\n')
    assert main(["eval", "score", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert re.fullmatch(r"maopd eval score: .*bad.jsonl:1: missing field.*\n", capsys.readouterr().err)


@pytest.mark.parametrize(
    "change, named",
    [
        ({"seed": 1}, "seed: 0 -> 1"),
        ({"made_with": {"temperature": 0.9, "corpus": "/c.jsonl"}}, "temperature: 0.6 -> 0.9"),
        ({"made_with": {"temperature": 0.6, "corpus": "/other.jsonl"}}, "corpus: '/c.jsonl' -> '/other.jsonl'"),
    ],
    ids=["seed", "temperature", "corpus"],
)
def test_a_resume_under_other_settings_is_refused_naming_them(tmp_path, change, named):
    out = tmp_path / "records.jsonl"
    made_with = {"temperature": 0.6, "corpus": "/c.jsonl"}
    assert run_attempts(EchoSolver(), manifest(3), out, "m", EvalSettings(attempts=1), made_with) == 3
    settings = EvalSettings(attempts=2, seed=change.get("seed", 0))
    with pytest.raises(RecordError, match=f"records of method 'm' were made with other settings \\({named}"):
        run_attempts(EchoSolver(), manifest(3), out, "m", settings, change.get("made_with", made_with))
    # more attempts under the same settings resume; another method is another run
    assert run_attempts(EchoSolver(), manifest(3), out, "m", EvalSettings(attempts=2), made_with) == 3
    assert run_attempts(EchoSolver(), manifest(3), out, "n", settings, change.get("made_with", made_with)) == 6


def test_records_whose_settings_are_unknown_are_not_resumed(tmp_path):
    out = tmp_path / "records.jsonl"
    run_attempts(EchoSolver(), manifest(2), out, "m", EvalSettings(attempts=1))
    settings_file(out).unlink()
    with pytest.raises(RecordError, match="does not say what made them"):
        run_attempts(EchoSolver(), manifest(2), out, "m", EvalSettings(attempts=2))


@pytest.fixture
def world_manifest(tmp_path):
    from maopd.envs.synthwiki import load_default_world

    path = tmp_path / "manifest.jsonl"
    questions = load_default_world().splits["test"][:2]
    path.write_text(
        "".join(json.dumps(ManifestEntry("w", q, question_hash(q.question)).to_dict()) + "\n" for q in questions)
    )
    return path


@pytest.mark.slow
def test_one_method_name_never_mixes_two_workflows(tmp_path, world_manifest, capsys):
    out = tmp_path / "records.jsonl"
    run = ["eval", "run", "--manifest", str(world_manifest), "--attempts", "1", "--method", "m", "--out", str(out)]
    assert main([*run, "--workflow", "cascade"]) == 0
    capsys.readouterr()
    assert main([*run, "--workflow", "hierarchical"]) == 2
    err = capsys.readouterr().err
    assert "workflow: 'cascade' -> 'hierarchical'" in err and err.count("\n") == 1
    assert {r.method for r in load_records([out])} == {"m"} and len(load_records([out])) == 2


def test_eval_manifest_never_writes_over_its_own_dataset(tmp_path, capsys):
    pool = tmp_path / "pool.jsonl"
    pool.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"q {i}?", "golden_answers": ["a"]}) + "\n" for i in range(5))
    )
    before = pool.read_text()
    assert main(["eval", "manifest", "--dataset", f"d={pool}", "--count", "d=2", "--out", str(pool)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"maopd eval manifest: --out {pool} is --dataset {pool}: the command would write over its own input; "
        "choose another --out\n"
    )
    assert pool.read_text() == before and not Path(f"{pool}.report.json").exists()


def test_a_corpus_rewritten_in_place_between_resumes_is_refused_naming_it(tmp_path, world_manifest, capsys):
    """`--attempts 2`, the corpus rewritten in place, then `--attempts 3`: the third attempt would run
    on the new corpus and be pooled with the first two."""
    from maopd.envs.synthwiki import load_default_world

    corpus = tmp_path / "c.jsonl"
    load_default_world().corpus.write_jsonl(corpus)
    out = tmp_path / "records.jsonl"
    run = ["eval", "run", "--manifest", str(world_manifest), "--corpus", str(corpus), "--out", str(out)]
    assert main([*run, "--attempts", "2"]) == 0
    capsys.readouterr()
    original = corpus.read_bytes()
    corpus.write_bytes(original.replace(b"the", b"a"))  # same path, other content
    assert main([*run, "--attempts", "3"]) == 2
    err = capsys.readouterr().err
    assert f"{corpus}: the corpus holds other content" in err and err.count("\n") == 1
    assert len(load_records([out])) == 4
    corpus.write_bytes(original)  # restored: the resume runs the third attempts
    assert main([*run, "--attempts", "3"]) == 0
    assert len(load_records([out])) == 6


def test_settings_hold_no_secret(tmp_path, world_manifest, capsys):
    """`--retriever-set url=http://user:sk-SECRET@127.0.0.1:P`: the settings file holds the URL redacted,
    and is written as every output is (mode 0644 through the writer)."""
    out = tmp_path / "records.jsonl"
    made_with = {"retriever_set": ["kind=http", "url=http://user:sk-SECRETSECRET@127.0.0.1:18801"]}
    run_attempts(EchoSolver(), manifest(1), out, "m", EvalSettings(attempts=1), made_with)
    text = settings_file(out).read_text()
    assert "SECRETSECRET" not in text and "user:" not in text and "http://***@127.0.0.1:18801" in text
    # the same settings typed again (with the secret) resume
    assert run_attempts(EchoSolver(), manifest(1), out, "m", EvalSettings(attempts=2), made_with) == 1


def test_the_dev_figures_count_workflows_that_ended_without_an_answer():
    """``no_answer`` is the workflow's counter (its trajectory's), not one of the record's costs."""
    from maopd.envs import orchestra_search_v1
    from maopd.evaluation.records import EvalRecord
    from maopd.study.tuning import search_figures

    env = orchestra_search_v1.raw_env(split="dev")
    env.reset(seed=0)
    for output in ["<report>a</report>", "<judge>no</judge>"] * 3:
        env.step(output)
    unanswered = env.record
    assert unanswered.counters.no_answer == 1
    rows = [
        EvalRecord("m", "d", "q", attempt, ["a"], None, counters={"search_actions": 0}, trajectory=trajectory)
        for attempt, trajectory in enumerate([unanswered, None])
    ]
    assert search_figures(rows)["no_answer_share"] == 0.5
