"""Search collapse per run: counts, seeds and the one-sided Fisher's exact test."""

from __future__ import annotations

import json
from math import comb

import pytest

from benchmarks.search_collapse import main


def run(seed: int, no_search: float) -> dict:
    return {"config": {"seed": seed}, "no_search_workflows": no_search}


RESULTS = {
    "runs": {
        "lazy_searcher_v1": {
            "team": [run(0, 1.0), run(1, 0.0), run(2, 0.47), run(3, 0.25), run(4, 0.24)],
            "role": [run(seed, 0.0) for seed in range(5)],
            "opd": [run(seed, 0.08) for seed in range(5)],
        }
    }
}


def test_collapsed_runs_are_counted_by_threshold_and_tested_against_the_pooled_methods(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    args = ["--results", str(results), "--scenario", "lazy_searcher_v1", "--method", "team"]
    summary = main([*args, "--against", "role", "opd", "--out", str(tmp_path / "out")])
    assert summary["counts"]["team"] == {"runs": 5, "collapsed": 3, "collapsed_seeds": [0, 2, 3]}
    assert summary["counts"]["role"]["collapsed"] == summary["counts"]["opd"]["collapsed"] == 0
    # 3 collapsed of 5 against 0 of 10: the one-sided p is the chance that all 3 collapsed runs of
    # the 15 fall in the 5 team runs, C(5, 3) / C(15, 3)
    assert summary["p_pooled"] == pytest.approx(comb(5, 3) / comb(15, 3))
    assert summary["p_each"]["role"] == pytest.approx(comb(5, 3) / comb(10, 3))
    saved = json.loads((tmp_path / "out" / "collapse.json").read_text())
    assert saved["p_pooled"] == summary["p_pooled"] and saved["command"].startswith(
        "python benchmarks/search_collapse.py"
    )
    assert json.loads(capsys.readouterr().out)["threshold"] == 0.25


def test_a_missing_method_or_scenario_is_one_line_naming_what_the_file_has(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    for wrong, named in ((["--scenario", "synthwiki_v1"], "no runs of scenario"), (["--method", "mappo"], "['mappo']")):
        settings = {"--scenario": "lazy_searcher_v1", "--method": "team"}
        settings.update(dict(zip(wrong[::2], wrong[1::2])))
        with pytest.raises(SystemExit):
            main(["--results", str(results), *[x for kv in settings.items() for x in kv], "--against", "role"])
        assert named in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"runs": {"lazy_searcher_v1": {"team": [{}], "role": [{}]}}}))
    with pytest.raises(SystemExit):
        main(["--results", str(broken), "--scenario", "lazy_searcher_v1", "--method", "team", "--against", "role"])
    assert "a run lacks 'no_search_workflows'" in capsys.readouterr().err


@pytest.mark.parametrize("against", [["role", "role"], ["team", "role"]])
def test_a_method_named_twice_is_refused_rather_than_pooled_twice(tmp_path, capsys, against):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    with pytest.raises(SystemExit):
        main(["--results", str(results), "--scenario", "lazy_searcher_v1", "--method", "team", "--against", *against])
    assert "more than once; give each method once" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
