"""The report on the pre-registered testbed: what a part saves, the configs it accepts, and each
claim's verdict by the pre-registered rules."""

import gzip
import json
from dataclasses import asdict, replace

import numpy as np
import pytest

from maopd.base.config import ConfigError, save_yaml
from maopd.evaluation.records import iter_records
from maopd.evaluation.score_matrix import ScoreMatrix
from maopd.evaluation.seed_statistics import side_by_side
from maopd.pipeline.config import load_experiment
from maopd.pipeline.seeds import seed_config
from maopd.study.preregistration import CLAIMS, PLAN, VERDICT_RULES
from maopd.study.report import (
    check_saved_configs,
    claim_verdicts,
    save_runs,
    searches_by_stage,
    searches_change_difference,
)

OPD, OUTCOME, BASE = "MultiAgent-OPD", "w/ outcome-based Searcher RL", "H-MAS base"


def _record(statuses=None):
    statuses = statuses or {}
    claims = [{**asdict(c), "status": statuses.get(c.name, "open")} for c in CLAIMS]
    return {"testbed_hash": "h", "plan": asdict(PLAN), "claims": claims, "verdict_rules": VERDICT_RULES}


def _matrix(scores: dict[str, np.ndarray]) -> ScoreMatrix:
    questions = next(iter(scores.values())).shape[0]
    ids = tuple(("1-hop", f"q{i:03d}") for i in range(questions))
    seeds = tuple(f"seed_{s}" for s in range(next(iter(scores.values())).shape[2]))
    return ScoreMatrix(ids, seeds, tuple(scores), np.stack(list(scores.values()), axis=-1).astype(float))


def test_a_saved_part_keeps_configs_metrics_and_records_without_trajectories(tmp_path):
    run = tmp_path / "runs" / "report"
    (run / "seed_0" / "stage1").mkdir(parents=True)
    (run / "seed_0" / "eval").mkdir()
    (run / "seed_0.yaml").write_text("seed: 0\n")
    (run / "seed_0" / "stage1" / "config.yaml").write_text("stage: stage1\n")
    (run / "seed_0" / "stage1" / "metrics.jsonl").write_text('{"step": 1, "workflow/search_actions": 2.0}\n')
    (run / "seed_0" / "stage1" / "checkpoints").mkdir()
    record = {
        "method": "m",
        "dataset": "1-hop",
        "question_id": "q",
        "attempt": 0,
        "golden_answers": ["a"],
        "final_output": "a",
        "score": 1.0,
        "search_actions": 2,
        "trajectory": {"workflow": "hierarchical", "calls": [{"outputs": ["long"]}]},
    }
    (run / "seed_0" / "eval" / "records.jsonl").write_text(json.dumps(record) + "\n")
    out = tmp_path / "saved"
    (saved,) = save_runs(run, out)
    assert not (saved / "stage1" / "checkpoints").exists()
    assert (saved / "stage1" / "metrics.jsonl").read_text() == (run / "seed_0" / "stage1" / "metrics.jsonl").read_text()
    assert (out / "seed_0.yaml").read_text() == "seed: 0\n"
    (row,) = [json.loads(line) for line in gzip.open(saved / "eval" / "records.jsonl.gz", "rt")]
    (source,) = iter_records(run / "seed_0" / "eval" / "records.jsonl")
    assert "trajectory" not in row and source.trajectory is not None
    assert row == {k: v for k, v in source.to_dict().items() if k != "trajectory"} and row["search_actions"] == 2
    first = (saved / "eval" / "records.jsonl.gz").read_bytes()
    save_runs(run, out)  # a part saved again gives the same bytes
    assert (saved / "eval" / "records.jsonl.gz").read_bytes() == first
    with pytest.raises(ConfigError, match="no seed_<s>/ directory"):
        save_runs(tmp_path / "saved" / "seed_0" / "stage1", tmp_path / "elsewhere")


def test_only_the_pre_registered_config_of_a_part_is_accepted(tmp_path):
    record = _record()
    name, variants = PLAN.parts[1]
    config = seed_config(load_experiment("table3", PLAN.part_overrides(variants)), PLAN.seeds[1])
    save_yaml(config, tmp_path / f"seed_{PLAN.seeds[1]}.yaml")
    assert check_saved_configs(tmp_path, record) == {PLAN.seeds[1]: name}
    save_yaml(replace(config, eval=replace(config.eval, attempts=2)), tmp_path / f"seed_{PLAN.seeds[1]}.yaml")
    with pytest.raises(ConfigError, match=r"not the pre-registered config of part opd_and_outcome_rl .*'eval'"):
        check_saved_configs(tmp_path, record)
    save_yaml(replace(config, variants=["full"]), tmp_path / f"seed_{PLAN.seeds[1]}.yaml")
    with pytest.raises(ConfigError, match="no pre-registered part's"):
        check_saved_configs(tmp_path, record)
    save_yaml(config, tmp_path / f"seed_{PLAN.seeds[1]}.yaml")
    other_plan = {**record, "plan": {**record["plan"], "seeds": [0, 1]}}
    with pytest.raises(ConfigError, match="not the pre-registered one"):
        check_saved_configs(tmp_path, other_plan)
    (tmp_path / f"seed_{PLAN.seeds[1]}.yaml").unlink()
    unplanned = max(PLAN.seeds) + 1
    save_yaml(seed_config(config, unplanned), tmp_path / f"seed_{unplanned}.yaml")
    with pytest.raises(ConfigError, match=f"seed {unplanned} is not pre-registered"):
        check_saved_configs(tmp_path, record)


def test_each_claim_gets_its_metric_its_gates_and_its_verdict():
    rng = np.random.default_rng(0)
    shape = (60, 4, 3)
    base = (rng.random(shape) < 0.3).astype(float)
    opd = np.maximum(base, (rng.random(shape) < 0.5).astype(float))  # right wherever the base is, and more
    scores = {BASE: base, OPD: opd, OUTCOME: base.copy()}
    matrix = _matrix(scores)
    steps = np.arange(120, dtype=float)
    keeps = {f"seed_{s}": 2.0 + 0.01 * s + 0 * steps for s in range(3)}
    collapses = {f"seed_{s}": np.linspace(2.0, 0.2 + 0.05 * s, 120) for s in range(3)}
    searches = {"stage2_full": keeps, "stage2_outcome_searcher_rl": collapses}
    claims = {c["name"]: c for c in claim_verdicts(_record({"search_collapse": "open"}), matrix, searches)}
    assert claims["opd_vs_base"]["verdict"] == "reproduces"
    coverage = side_by_side(matrix, OPD, BASE, "higher", metric="pass")
    assert claims["coverage"]["question_bootstrap"] == coverage["question_bootstrap"]
    assert claims["consistency"]["verdict"] == "reproduces"
    assert claims["search_collapse"]["verdict"] == "reproduces"
    assert claims["search_collapse"]["seed_interval"]["seeds"] == 3
    assert claims["stage1"]["verdict"] == "not run yet"  # C-MAS systems are not in the matrix
    failed = claim_verdicts(_record({"opd_vs_base": "not tested"}), matrix, searches)
    assert {c["name"]: c["verdict"] for c in failed}["opd_vs_base"] == "not tested"
    assert claim_verdicts(_record(), matrix, {"stage2_full": keeps})[5]["verdict"] == "not run yet"


def test_the_change_in_searches_counts_seeds_and_window_steps():
    flat = {f"seed_{s}": np.full(40, 2.0) for s in range(3)}
    same = searches_change_difference(flat, flat, 10, "higher", True)
    assert same["question_bootstrap"]["macro"] == 0 and same["verdict"] == "inconclusive"
    drop = {f"seed_{s}": np.r_[np.full(20, 2.0), np.full(20, 1.0 - 0.1 * s)] for s in range(3)}
    result = searches_change_difference(flat, drop, 10, "higher", True)
    assert result["seed_interval"]["per_seed"] == pytest.approx({"seed_0": 1.0, "seed_1": 1.1, "seed_2": 1.2})
    assert result["verdict"] == "reproduces"
    assert searches_change_difference(flat, drop, 10, "higher", False)["verdict"] == "not tested"
    one = searches_change_difference({"seed_0": flat["seed_0"]}, {"seed_0": drop["seed_0"]}, 10, "higher", True)
    assert one["seed_interval"]["ci"] is None and one["verdict"] == "inconclusive"  # one seed excludes nothing


def test_the_report_and_its_claims_build_from_saved_seeds_alone(tmp_path, monkeypatch):
    """``maopd report build`` on a saved part: the seed report, and the claims from its score
    matrix; the figures are recomputed from the committed matrix by ``claim_verdicts`` itself."""
    from maopd.cli import main
    from maopd.evaluation.records import record_line
    from maopd.evaluation.score_matrix import read_matrix
    from maopd.study import preregistration, report
    from tests.evaluation.test_score_matrix import records

    rng = np.random.default_rng(1)
    questions = [("1-hop", f"q{i:02d}") for i in range(12)]
    runs = tmp_path / "saved"
    for seed in range(3):
        rows = []
        for method, rate in ((BASE, 0.3), (OPD, 0.7), (OUTCOME, 0.6)):
            rows += records(method, {q: list((rng.random(4) < rate).astype(int)) for q in questions})
        for row in rows:  # every counter but the tokens: a field records lack is reported as such
            row.counters = {
                "search_actions": seed,  # seed 0 searches in no workflow
                "searches_with_passages": 1,
                "reports": 2,
                "task_assignments": 2,
            }
        if seed == 0:
            seed_0 = rows
        (runs / f"seed_{seed}" / "eval").mkdir(parents=True)
        (runs / f"seed_{seed}" / "eval" / "records.jsonl").write_text("".join(record_line(r) for r in rows))
        for stage, end in (("stage2_full", 2.0), ("stage2_outcome_searcher_rl", 0.5)):
            (runs / f"seed_{seed}" / stage).mkdir()
            series = np.linspace(2.0, end + 0.1 * seed, 30)
            lines = [
                json.dumps({"step": i + 1, "workflow/search_actions": v, "workflow/no_search": 0.1, "reward/em": 0.5})
                + "\n"
                for i, v in enumerate(series)
            ]
            (runs / f"seed_{seed}" / stage / "metrics.jsonl").write_text("".join(lines))
    record = {**_record(), "testbed_hash": "fixed"}
    path = tmp_path / "preregistration.json"
    path.write_text(json.dumps(record))
    monkeypatch.setattr(preregistration, "testbed_components", lambda: {})
    monkeypatch.setattr(preregistration, "testbed_hash", lambda components: "fixed")
    monkeypatch.setattr(report, "check_saved_configs", lambda runs, record: dict.fromkeys(range(3), "part"))
    bands = {qid: ("1-hop", "popular" if i < 4 else "long_tail") for i, (_, qid) in enumerate(questions)}
    monkeypatch.setattr(preregistration, "named_bands", lambda split: bands)
    out = tmp_path / "report"
    argv = ["report", "build", "--runs", str(runs), "--preregistration", str(path), "--out", str(out)]
    assert main(argv) == 0
    claims = json.loads((out / "claims.json").read_text())["claims"]
    assert claims == json.loads(
        json.dumps(
            claim_verdicts(
                record,
                read_matrix(out / "score_matrix.json"),
                report.searches_by_stage([runs / f"seed_{s}" for s in range(3)]),
            )
        )
    )
    verdicts = {c["name"]: c["verdict"] for c in claims}
    assert verdicts["opd_vs_base"] == "reproduces" and verdicts["search_collapse"] == "reproduces"
    assert verdicts["stage1"] == verdicts["vs_single_agent"] == "not run yet"
    by_band = json.loads((out / "claims.json").read_text())["accuracy_by_band"]
    matrix = read_matrix(out / "score_matrix.json")
    popular = [i for i, (_, qid) in enumerate(matrix.questions) if bands[qid][1] == "popular"]
    assert by_band[OPD]["popular"] == {"avg": pytest.approx(matrix.system(OPD)[popular].mean()), "questions": 4}
    assert set(by_band[OPD]) == {"popular", "long_tail"}  # no question names a middle-band entity
    systems = json.loads((out / "claims.json").read_text())["systems"]
    assert list(systems) == [BASE, OPD, OUTCOME]  # in the paper's table order
    assert systems[OPD]["pass@4"] == json.loads(
        json.dumps({k: v for k, v in side_by_side(matrix, OPD, metric="pass").items() if k not in ("a", "b")})
    )
    tables = (out / "tables.md").read_text()
    assert f"| {OPD} |" in tables
    workload = json.loads((out / "claims.json").read_text())["workload"]
    assert workload[OPD]["search_actions"]["per_seed"] == {"seed_0": 0.0, "seed_1": 1.0, "seed_2": 2.0}
    assert workload[OPD]["search_actions"]["mean"] == pytest.approx(1.0) and "input_tokens" not in workload[OPD]
    assert f"| {OPD} | 1.00 [" in tables and tables.rstrip().endswith("| n/a | n/a |")
    closed = json.loads((out / "claims.json").read_text())["without_search_by_band"]
    popular_scores = [r.score for r in seed_0 if r.method == OPD and bands[r.question_id][1] == "popular"]
    assert closed[OPD]["popular"] == {
        "share": pytest.approx(1 / 3),
        "avg": pytest.approx(np.mean(popular_scores)),
        "workflows": 48,
    }
    seed_report = json.loads((out / "report.json").read_text())
    assert seed_report["no_search"]["stage2_full"]["change"] == pytest.approx(0.0)
    assert "searches_over_training.png" in seed_report["plots"] and not (out / "judge_over_training.png").exists()
    text = (out / "claims.md").read_text()
    assert all(f"| {c['name']} |" in text for c in claims) and "(3 seeds)" in text
    assert "| system | popular (4 questions) | long_tail (8 questions) |" in text
    assert f"| {OPD} | 33.33 (" in text.split("answered without a search")[1]
    monkeypatch.setattr(preregistration, "testbed_hash", lambda components: "changed")
    assert main(argv) == 2  # another testbed than the registered one is refused, in one line


def test_the_committed_parts_ran_the_registered_configs():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    record = json.loads((root / "preregistration" / "preregistration.json").read_text(encoding="utf-8"))
    parts = check_saved_configs(root / "popularity_testbed_report" / "runs", record)
    assert sorted(parts) == list(PLAN.seeds)


def test_the_committed_report_recomputes_from_its_score_matrix_and_saved_runs():
    """Every figure of the committed report's ``claims.json`` and ``tables.md``, recomputed from
    the committed score matrix and saved runs: anyone can check the report without training."""
    from pathlib import Path

    from maopd.evaluation.score_matrix import read_matrix
    from maopd.evaluation.seed_report import seed_records
    from maopd.study.preregistration import named_bands
    from maopd.study.report import (
        accuracy_by_band,
        system_figures,
        tables_markdown,
        without_search_by_band,
        workload,
        workload_markdown,
    )

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    report = root / "popularity_testbed_report"
    record = json.loads((root / "preregistration" / "preregistration.json").read_text(encoding="utf-8"))
    committed = json.loads((report / "claims.json").read_text(encoding="utf-8"))
    matrix = read_matrix(report / "score_matrix.json")
    seed_dirs = [report / "runs" / name for name in committed["parts"]]
    assert list(matrix.seeds) == list(committed["parts"])

    def as_saved(value):
        return json.loads(json.dumps(value, ensure_ascii=False))

    assert committed["testbed_hash"] == record["testbed_hash"]
    assert committed["claims"] == as_saved(claim_verdicts(record, matrix, searches_by_stage(seed_dirs)))
    systems = system_figures(matrix)
    assert committed["systems"] == as_saved(systems)
    bands = named_bands("test")
    assert committed["accuracy_by_band"] == as_saved(accuracy_by_band(matrix, bands))
    per_seed = dict(zip(committed["parts"], seed_records(seed_dirs)))
    assert committed["without_search_by_band"] == as_saved(without_search_by_band(per_seed, bands))
    assert committed["workload"] == as_saved(workload(per_seed))
    tables = tables_markdown(systems) + "\n" + workload_markdown(workload(per_seed))
    assert (report / "tables.md").read_text(encoding="utf-8") == tables
