"""The report over training seeds: pooled paired differences, searches over training, figures."""

import json

import numpy as np
import pytest

from maopd.cli import main
from maopd.evaluation.records import EvalRecord, record_line, scored
from maopd.evaluation.score_matrix import read_matrix
from maopd.evaluation.seed_report import pooled, window_change, write_report
from maopd.evaluation.seed_statistics import side_by_side


def _records(method: str, correct: dict[str, list[int]]) -> list[EvalRecord]:
    """One record per (question, attempt); ``correct[qid][a]`` says whether attempt a is right."""
    return [
        scored(
            EvalRecord(
                method=method,
                dataset="1-hop",
                question_id=qid,
                attempt=a,
                golden_answers=["x"],
                final_output="<answer>x</answer>" if ok else "<answer>y</answer>",
            )
        )
        for qid, attempts in correct.items()
        for a, ok in enumerate(attempts)
    ]


def _run_dir(root, name, records, searches):
    run = root / name
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "records.jsonl").write_text("".join(record_line(r) for r in records), encoding="utf-8")
    for stage, series in searches.items():
        (run / stage).mkdir()
        rows = [
            {"step": i + 1, "workflow/search_actions": v, "reward/em": 0.1 + 0.01 * i} for i, v in enumerate(series)
        ]
        (run / stage / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return run


def test_pooling_keeps_every_seeds_attempts_of_a_question_side_by_side():
    seed_a = _records("m", {"q1": [1, 0], "q2": [0, 0]})
    seed_b = _records("m", {"q1": [1, 1], "q2": [1, 0]})
    attempts = sorted((r.question_id, r.attempt, r.score) for r in pooled([seed_a, seed_b]))
    assert attempts == [
        ("q1", 0, 1.0),
        ("q1", 1, 0.0),
        ("q1", 2, 1.0),
        ("q1", 3, 1.0),
        ("q2", 0, 0.0),
        ("q2", 1, 0.0),
        ("q2", 2, 1.0),
        ("q2", 3, 0.0),
    ]
    assert [r.attempt for r in seed_a] == [0, 1, 0, 1]  # the seeds' own records are left as they were


def test_window_change_finds_a_fall_in_searches_and_its_interval_excludes_zero():
    falling = [np.linspace(3.0, 0.5, 40) + 0.05 * np.sin(np.arange(40) + s) for s in range(3)]
    change = window_change(falling, 10)
    assert change["last"] < change["first"]
    assert change["ci"][1] < 0 < change["first"]
    flat = [np.full(40, 2.0) for _ in range(3)]
    assert window_change(flat, 10)["change"] == 0.0


def test_report_pools_seeds_into_paired_differences_and_plots_every_run(tmp_path):
    questions = [f"q{i}" for i in range(30)]
    runs = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        better = {q: list(rng.random(4) < 0.8) for q in questions}
        worse = {q: list(rng.random(4) < 0.2) for q in questions}
        records = _records("A", better) + _records("B", worse)
        runs.append(
            _run_dir(
                tmp_path,
                f"seed_{seed}",
                records,
                {"stage1": [1.0] * 12, "stage2_outcome_searcher_rl": list(np.linspace(2, 0, 20))},
            )
        )
    report = write_report(
        runs,
        [("A", "B"), ("A", "missing method")],
        tmp_path / "report",
        labels={"stage1": "Stage I"},
        expected={("A", "B"): "higher"},
    )
    (difference,) = report["comparisons"]  # a pair with a method no seed has is left out
    assert (difference["a"], difference["b"]) == ("A", "B")
    assert difference["avg@12"]["ci"][0] > 0.4
    # both intervals side by side, from the committed matrix alone; the pooled bootstrap is the same figure
    matrix = read_matrix(tmp_path / "report" / "score_matrix.json")
    assert (matrix.seeds, matrix.systems, matrix.attempts, len(matrix.questions)) == (
        ("seed_0", "seed_1", "seed_2"),
        ("A", "B"),
        4,
        30,
    )
    assert difference["question_bootstrap"] == difference["avg@12"]
    recomputed = side_by_side(matrix, "A", "B", "higher")
    assert {k: difference[k] for k in recomputed} == recomputed
    assert difference["seed_interval"]["seeds"] == 3 and difference["seed_interval"]["ci"][0] > 0.4
    assert difference["verdict"] == "reproduces"
    assert report["accuracy"]["A"]["seed_interval"]["mean"] == pytest.approx(
        np.mean(
            [
                per_seed_avg["A"]["avg@4"]
                for per_seed_avg in json.loads((tmp_path / "report" / "per_seed.json").read_text()).values()
            ]
        )
    )
    assert report["searches"]["stage2_outcome_searcher_rl"]["ci"][1] < 0
    assert report["training_em"]["stage2_outcome_searcher_rl"]["change"] == pytest.approx(0.1)  # 10 steps of +0.01
    per_seed = json.loads((tmp_path / "report" / "per_seed.json").read_text())
    assert set(per_seed) == {"seed_0", "seed_1", "seed_2"} and per_seed["seed_0"]["A"]["avg@4"] > 0.5
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| A | B |" in text and "Stage I" in text
    assert "| question bootstrap | seed-level t-interval | expected | verdict |" in text
    assert "| A higher | reproduces |" in text
    assert "| Stage I | 14.50 | 16.50 | +2.00" in text  # training EM in %: steps 1-10 vs 3-12 of 12
    for plot in report["plots"]:
        assert (tmp_path / "report" / plot).stat().st_size > 0
    assert report["plots"] == ["searches_over_training.png", "training_em_over_training.png"]


def test_one_seed_reports_no_seed_interval_and_failed_gates_test_nothing(tmp_path):
    rng = np.random.default_rng(0)
    questions = [f"q{i}" for i in range(20)]
    records = _records("A", {q: list(rng.random(2) < 0.9) for q in questions}) + _records(
        "B", {q: list(rng.random(2) < 0.1) for q in questions}
    )
    run = _run_dir(tmp_path, "seed_0", records, {})
    report = write_report([run], [("A", "B")], tmp_path / "report", expected={("A", "B"): "higher"}, gates_met=False)
    (difference,) = report["comparisons"]
    assert difference["seed_interval"]["ci"] is None and "cannot be computed" in difference["seed_interval"]["note"]
    assert difference["verdict"] == "not tested"
    text = (tmp_path / "report" / "report.md").read_text()
    assert "(no interval from 1 seed)" in text and "| not tested |" in text


def test_report_names_a_seed_without_records(tmp_path):
    run = tmp_path / "seed_0"
    run.mkdir()
    with pytest.raises(FileNotFoundError, match="seed_0"):
        write_report([run], [], tmp_path / "report")


def test_seeds_do_not_apply_to_one_stage(capsys):
    assert main(["train", "--config", "configs/tiny_cpu_stage1.yaml", "--seeds", "0", "1"]) == 2
    assert "--seeds applies to the pipeline" in capsys.readouterr().err


@pytest.mark.slow
def test_smoke_job_over_two_seeds_writes_each_seed_and_the_pooled_report(tmp_path):
    import yaml

    run = tmp_path / "run"
    assert main(["train", "--preset", "smoke", "--seeds", "0", "1", "--run-dir", str(run)]) == 0
    for seed in (0, 1):
        config = yaml.safe_load((run / f"seed_{seed}.yaml").read_text())
        assert config["seed"] == seed and config["eval"]["seed"] == seed  # fresh evaluation samples per seed
        assert (run / f"seed_{seed}" / "eval" / "records.jsonl").is_file()
    report = json.loads((run / "report" / "report.json").read_text())
    assert {"stage1", "stage2_full", "single"} <= set(report["searches"])
    assert {c["b"] for c in report["comparisons"]} >= {"C-MAS base", "H-MAS base", "Single agent base"}
    assert (run / "report" / "report.md").is_file() and (run / "report" / "searches_over_training.png").is_file()


def test_a_figure_no_run_logged_draws_no_empty_panel(tmp_path):
    from maopd.evaluation.seed_report import plot_over_training

    logged, unlogged = [np.linspace(0, 1, 20)], [np.full(20, np.nan)]
    assert plot_over_training([({"a": unlogged}, "y", 1.0)], tmp_path / "none.png", {}, "t") is None
    assert not (tmp_path / "none.png").exists()
    path = plot_over_training(
        [({"a": logged, "b": unlogged}, "y", 1.0), ({"b": unlogged}, "z", 1.0)], tmp_path / "one.png", {}, "t"
    )
    assert path.is_file()
