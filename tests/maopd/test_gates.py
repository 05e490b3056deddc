"""The testbed's gates (``maopd.study.gates``, ``maopd tune gates``): each check at its threshold, the
rows and verdict, and one quick run of the command on the smoke π_0."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from maopd.envs.synthwiki.popularity import BANDS
from maopd.study import gates
from maopd.study.gates import GATES, MET, NOT_MEASURED, NOT_MET


def test_each_check_is_met_at_its_threshold_and_not_just_past_it():
    assert gates.popular_recall_met(0.60) and not gates.popular_recall_met(0.5999)
    # 0.4 - 0.3 is 0.10000000000000003 in floating point: still at the threshold
    assert gates.long_tail_met(0.4, 0.3) and gates.long_tail_met(0.05, 0.3)
    assert not gates.long_tail_met(0.4001, 0.3)
    assert gates.no_search_met(0.21, 0.3) and not gates.no_search_met(0.2099, 0.3)
    assert gates.no_search_met(0.0, 0.0)  # nothing to lose by skipping search: the ratio holds
    assert gates.level_met(0.20) and gates.level_met(0.60)
    assert not gates.level_met(0.1999) and not gates.level_met(0.6001)
    assert gates.searching_met(0.70) and not gates.searching_met(0.6999)
    assert gates.judge_checks(0.75, 100, 0.5) == {"balanced_accuracy": True, "negatives": True, "judge_rate": True}
    assert gates.judge_checks(0.7499, 99, 0.05) == {
        "balanced_accuracy": False,
        "negatives": False,
        "judge_rate": False,
    }
    assert not gates.judge_checks(None, 100, 0.95)["balanced_accuracy"]
    assert not gates.judge_checks(0.9, 100, 0.95)["judge_rate"] and gates.judge_checks(0.9, 100, 0.9499)["judge_rate"]


def test_thresholds_are_one_frozen_table():
    with pytest.raises(dataclasses.FrozenInstanceError):
        GATES.popular_recall = 0.5  # type: ignore[misc]
    assert GATES.level == (0.20, 0.60) and GATES.judge_rate == (0.05, 0.95)


def _band(facts, recall, chance=0.1):
    return {"facts": facts, "recall": recall, "chance": chance}


def test_rows_give_a_verdict_per_check_and_all_met_only_when_every_check_is_met():
    known = {"bands": {"popular": _band(10, 0.7), "middle": _band(5, 0.3), "long_tail": _band(20, 0.15)}}
    rows = gates.recall_rows("recall", known)
    assert [r["verdict"] for r in rows] == [MET, MET, gates.DESCRIPTION]
    forgets = {"bands": {"popular": _band(10, 0.5), "middle": _band(5, 0.3), "long_tail": _band(20, 0.25)}}
    assert [r["verdict"] for r in gates.recall_rows("recall", forgets)][:2] == [NOT_MET, NOT_MET]
    empty = {"bands": {"popular": _band(0, None), "middle": _band(0, None), "long_tail": _band(0, None)}}
    assert [r["verdict"] for r in gates.recall_rows("recall", empty)][:2] == [NOT_MEASURED, NOT_MEASURED]
    missing = gates.recall_rows("recall", {"not_measured": "no pretrained/ checkpoint"})
    assert {r["verdict"] for r in missing} == {NOT_MEASURED} and missing[0]["note"] == "no pretrained/ checkpoint"

    forced = {"questions": 3, "attempts": 2, "no_search": {"em": 0.56}, "search": {"em": 0.8}}
    assert gates.forced_search_rows(forced)[0]["verdict"] == MET
    judge = {
        "balanced": {"balanced_accuracy": 0.8, "negatives": 120, "examples": 240},
        "gate": {"checks": {"balanced_accuracy": True, "negatives": True, "judge_rate": True}},
        "critic/judge_rate": 0.6,
        "workflows": 10,
        "p_yes_auc_vs_gold": 0.7,
    }
    assert [r["verdict"] for r in gates.judge_rows(judge)] == [MET, MET, gates.DESCRIPTION]
    systems = {
        w: {"avg@4": {"macro": 0.4}, "searching_share": 0.9, "workflows": 8}
        for w in ("hierarchical", "cascade", "single")
    }
    level = gates.level_rows(systems, attempts=4)
    assert len(level) == 6 and {r["verdict"] for r in level} == {MET}

    rows = [*gates.recall_rows("recall", known), *gates.forced_search_rows(forced), *gates.judge_rows(judge), *level]
    assert gates.overall(rows) == gates.ALL_MET
    assert gates.overall([*rows, *missing]) == gates.NOT_ALL_MET
    systems["single"]["searching_share"] = 0.39
    assert gates.overall([*rows[:-6], *gates.level_rows(systems, attempts=4)]) == gates.NOT_ALL_MET
    assert "| gate | check |" in gates.markdown_table(rows)


@pytest.mark.slow
def test_quick_gates_of_the_smoke_base_model_write_every_check_with_a_verdict(smoke_model, tmp_path):
    from maopd.cli import main

    model = smoke_model
    assert (model / "pretrained" / "model.safetensors").is_file()  # the build keeps the pretrained LM
    out = tmp_path / "gates"
    assert main(["tune", "gates", "--model", str(model), "--quick", "--attempts", "1", "--out", str(out)]) == 0

    result = json.loads((out / "gates.json").read_text())
    checks = {(r["gate"], r["check"]): r["verdict"] for r in result["rows"]}
    assert {gate for gate, _ in checks} == {
        "recall after pretraining",
        "recall after fine-tuning",
        "recall as Searcher, no search",
        "forced no search vs search",
        "judge",
        "level",
        "searching",
    }
    assert set(checks.values()) <= {MET, NOT_MET, NOT_MEASURED, gates.DESCRIPTION}
    assert checks[("recall after pretraining", "popular recall")] != NOT_MEASURED  # pretrained/ was probed
    assert checks[("forced no search vs search", "EM no search / search")] != NOT_MEASURED
    assert {f"{w} macro avg@1" for w in ("hierarchical", "cascade", "single")} <= {c for _, c in checks}
    assert result["verdict"] in (gates.ALL_MET, gates.NOT_ALL_MET)
    assert set(result["seconds"]) == {"closed_book_recall", "forced_search", "level", "judge"}
    assert result["world"] == {"seed": 0, "size": "tiny"} and result["thresholds"]["popular_recall"] == 0.6
    assert result["command"].startswith("maopd tune gates") and result["commit"]
    assert result["figures"]["level"]["questions_per_type"] == 1
    assert "| gate | check |" in (out / "gates.md").read_text()


def test_what_fine_tuning_kept_is_a_description_row():
    bands = {b: {"recall": r, "facts": 10, "chance": 0.0} for b, r in zip(BANDS, (0.5, 0.25, 0.0))}
    row = gates.retention_row({"bands": bands})
    assert row["verdict"] == gates.DESCRIPTION and row["value"] == "0.500 / 0.250 / 0.000"
    met = {**row, "verdict": MET}
    assert gates.overall([met, row]) == gates.ALL_MET  # a description never decides the verdict


GATE_RESULTS = sorted((Path(__file__).parents[2] / "benchmarks/results/testbed_gates").glob("*.json"))


def test_the_rows_follow_from_the_saved_figures_alone():
    for path in GATE_RESULTS:
        result = json.loads(path.read_text())
        assert gates.gate_rows(result["figures"]) == result["rows"], path.name


def test_a_recipe_applies_every_check_to_its_builds_mean_figures_and_shows_each_build():
    first, second = (json.loads(path.read_text()) for path in GATE_RESULTS[:2])
    first["figures"]["forced_search"] |= {"no_search": {"em": 0.5}, "search": {"em": 0.8}}  # 0.625 x: not met
    second["figures"]["forced_search"] |= {"no_search": {"em": 0.7}, "search": {"em": 0.9}}  # 0.78 x: met
    result = gates.recipe_gates([first, second])
    forced = next(row for row in result["rows"] if row["gate"] == "forced no search vs search")
    assert forced["value"] == "0.600 / 0.850" and forced["verdict"] == MET  # 0.6 >= 0.7 x 0.85
    assert [b["verdict"] for b in forced["builds"]] == [NOT_MET, MET]
    level = [row for row in result["rows"] if row["gate"] == "level"]
    for row in level:
        values = [float(b["value"]) for b in row["builds"]]
        assert float(row["value"]) == pytest.approx(sum(values) / 2, abs=6e-4)
    assert result["verdict"] == gates.overall(result["rows"])
    assert [b["config_key"] for b in result["builds"]] == [first["config_key"], second["config_key"]]
    table = gates.recipe_table(result)
    assert "| build 1 | build 2 | mean | verdict on the mean |" in table and "0.500 / 0.800 ✗" in table

    # a part one build could not measure is not measured for the recipe
    second["figures"]["judge"] = {"not_measured": "no reports"}
    judge = [row for row in gates.recipe_gates([first, second])["rows"] if row["gate"] == "judge"]
    assert {row["verdict"] for row in judge} == {NOT_MEASURED}
    with pytest.raises(ValueError, match="measured alike"):
        gates.recipe_gates([first, {**second, "quick": not second["quick"]}])
    with pytest.raises(ValueError, match="two or more builds"):
        gates.recipe_gates([first])


def test_recipe_gates_writes_its_table_and_refuses_unreadable_input(tmp_path, capsys):
    from maopd.cli import main

    out = tmp_path / "recipe"
    assert main(["tune", "recipe-gates", *map(str, GATE_RESULTS[:3]), "--out", str(out)]) == 0
    result = json.loads((out / "recipe_gates.json").read_text())
    assert len(result["builds"]) == 3 and result["command"].startswith("maopd tune recipe-gates")
    assert "| build 1 | build 2 | build 3 | mean |" in (out / "recipe_gates.md").read_text()
    (tmp_path / "broken.json").write_text("{")
    assert main(["tune", "recipe-gates", str(tmp_path / "broken.json"), str(GATE_RESULTS[0]), "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("maopd tune recipe-gates:") and "broken.json" in error and "\n" not in error


def collapse(no_search: float, search: float, questions: int = 300, attempts: int = 4) -> dict:
    return {
        "questions": questions,
        "attempts": attempts,
        "ratio": no_search / search,
        "paired_difference_points": 100 * (no_search - search),
        "no_search_em": no_search,
        "search_em": search,
    }


def test_the_collapse_preconditions_are_met_inside_their_bounds_only():
    met = gates.collapse_rows(collapse(0.54, 0.58))  # 0.93x, -4 points
    assert [row["verdict"] for row in met] == [MET] * 4
    verdicts = {r["check"]: r["verdict"] for r in gates.collapse_rows(collapse(0.13, 0.61))}  # search pays 48 points
    assert verdicts["EM no search / search"] == NOT_MET and verdicts["mean paired difference, points"] == NOT_MET
    free = {r["check"]: r["verdict"] for r in gates.collapse_rows(collapse(0.60, 0.60))}  # searching pays nothing
    assert free["mean paired difference, points"] == NOT_MET and free["EM no search / search"] == NOT_MET
    low = {r["check"]: r["verdict"] for r in gates.collapse_rows(collapse(0.42, 0.45))}
    assert low["EM forced search"] == NOT_MET
    small = {r["check"]: r["verdict"] for r in gates.collapse_rows(collapse(0.54, 0.58, questions=299))}
    assert small["sample"] == NOT_MET


def test_a_recipe_of_collapse_builds_is_read_per_build_never_on_the_mean():
    """One build pays 6 points for search, the other 0.96x: each fails on its own, their mean
    (0.93x, 4 points) passes, and the recipe fails."""
    builds = [gates.collapse_rows(collapse(0.50, 0.56)), gates.collapse_rows(collapse(0.54, 0.56))]
    mean = gates.collapse_rows(collapse(0.52, 0.56))
    assert gates.overall(mean) == gates.ALL_MET
    assert gates.per_build_verdict(builds) == gates.NOT_ALL_MET
    assert gates.per_build_verdict([mean, mean]) == gates.ALL_MET and gates.per_build_verdict([]) == gates.NOT_ALL_MET


def test_the_collapse_judge_gate_reads_the_auc_on_own_reports():
    own = {"p_yes_auc_vs_gold": 0.70, "critic/judge_rate": 0.2}
    assert [r["verdict"] for r in gates.collapse_judge_rows(own)] == [MET, MET]
    chance = {"p_yes_auc_vs_gold": 0.51, "critic/judge_rate": 0.796}
    assert [r["verdict"] for r in gates.collapse_judge_rows(chance)] == [NOT_MET, MET]
    assert gates.collapse_judge_rows({"p_yes_auc_vs_gold": None, "critic/judge_rate": 0.9})[1]["verdict"] == NOT_MET


@pytest.mark.slow
def test_collapse_figures_of_the_smoke_base_model(smoke_model, tmp_path):
    from maopd.cli import main

    out = tmp_path / "collapse"
    argv = ["tune", "collapse", "--model", str(smoke_model), "--questions", "3", "--attempts", "2"]
    assert main([*argv, "--env", "topk=2", "--out", str(out)]) == 0
    result = json.loads((out / "collapse.json").read_text())
    figures = result["figures"]
    assert figures["env_options"] == {"topk": 2} and figures["questions"] == 3
    assert figures["no_search"]["start"] == "<report>" and figures["search"]["start"] == "<search>"
    per_question = figures["per_question"]
    assert len(per_question) == 3 and all(row["band"] in BANDS for row in per_question.values())
    mean = sum(row["search"] for row in per_question.values()) / 3
    assert figures["search_em"] == pytest.approx(mean) == pytest.approx(figures["search"]["em"])
    assert {row["check"] for row in result["rows"]} >= {"EM no search / search", "mean paired difference, points"}
    assert main([*argv, "--env", "topk=0", "--out", str(out)]) == 2  # a bad option: one line, before any work


def test_class_figures_group_questions_by_kind_and_band():
    from maopd.study.tuning import class_figures

    per_question = {
        "a": {"kind": "1-hop", "band": "popular", "unforced": 1.0, "no_search": 0.75, "search": 1.0},
        "b": {"kind": "1-hop", "band": "popular", "unforced": 0.5, "no_search": 0.25, "search": 0.5},
        "c": {"kind": "comparison", "band": "middle", "unforced": 0.0, "no_search": 0.0, "search": 0.0},
    }
    popular, comparison = class_figures(per_question)
    assert (popular["kind"], popular["band"], popular["questions"]) == ("1-hop", "popular", 2)
    assert popular["unforced_em"] == 0.75 and popular["ratio"] == pytest.approx(0.5 / 0.75)
    assert popular["paired_difference_points"] == pytest.approx(-25.0)
    assert comparison["ratio"] is None and comparison["paired_difference_points"] == 0.0


def test_the_lever_table_reads_each_run_and_names_a_missing_one(tmp_path, capsys):
    from maopd.base.json_files import write_json
    from maopd.cli import main

    arms = {
        arm: {"em": em, "no_search_share": share}
        for arm, em, share in (("unforced", 0.6, 0.1), ("no_search", 0.5, 1.0), ("search", 0.6, 0.0))
    }
    figures = {"questions": 300, "attempts": 4, "band": None, "env_options": {"topk": 1}, **arms}
    figures.update(ratio=0.5 / 0.6, paired_difference_points=-10.0)
    (tmp_path / "run").mkdir()
    write_json(
        tmp_path / "run" / "collapse.json",
        {"command": "maopd tune collapse", "verdict": "not all met", "figures": figures},
    )
    assert main(["tune", "collapse-levers", f"topk_1={tmp_path / 'run'}", "--out", str(tmp_path / "out")]) == 0
    assert (
        "| topk_1 | 300 x 4 | 0.600 | 0.500 | 0.600 | 0.83 | -10.0 | 0.100 | not all met |" in capsys.readouterr().out
    )
    assert (tmp_path / "out" / "levers.json").is_file() and (tmp_path / "out" / "levers.md").is_file()
    assert main(["tune", "collapse-levers", f"gone={tmp_path / 'nothing'}", "--out", str(tmp_path / "out")]) == 2
    assert "collapse.json does not exist" in capsys.readouterr().err
