"""The hostile-inputs harness classifies outcomes as its docstring says, and a few of its repros hold."""

from __future__ import annotations

import json

import pytest

from benchmarks import hostile_inputs
from benchmarks.hostile_inputs import (
    REPROS,
    Ran,
    add_earlier,
    changed,
    classify,
    main,
    read_earlier,
    readme,
    secret_in,
    snapshot,
)

TRACE = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom\n'


def ran(returncode=0, output="", seconds=1.0, timed_out=False) -> Ran:
    return Ran(returncode, output, seconds, timed_out)


@pytest.mark.parametrize(
    "runs, problems, outcome",
    [
        (ran(), {}, "OK"),
        (ran(2, "maopd train: steps: must be >= 1\n"), {}, "clear error"),
        (ran(1, TRACE), {}, "traceback"),
        (ran(0, TRACE), {"wrong": ["accepted"]}, "traceback"),  # a trace is a trace, whatever else
        (ran(seconds=11), {}, "hang"),
        (ran(None, "", 20, timed_out=True), {"lost": ["x deleted"]}, "hang"),
        (ran(2), {"lost": ["x deleted"], "leaked": ["key"], "wrong": ["w"]}, "data loss"),
        (ran(), {"leaked": ["key"], "wrong": ["w"]}, "leak"),
        (ran(), {"wrong": ["accepted (exit 0)"]}, "silent-wrong"),
        ([ran(), ran(2, "refused\n")], {}, "clear error"),
        ([ran(), ran(1, TRACE)], {}, "traceback"),
    ],
)
def test_outcomes_are_classified_in_order(runs, problems, outcome):
    assert classify(runs, bound_s=10, **problems).outcome == outcome


def test_lost_files_and_secrets_are_found(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    (tmp_path / "gone.txt").write_text("mine")
    before = snapshot(tmp_path)
    (tmp_path / "keep.txt").write_text("overwritten")
    (tmp_path / "gone.txt").unlink()
    assert changed(before, tmp_path) == [f"{tmp_path / 'gone.txt'} deleted", f"{tmp_path / 'keep.txt'} overwritten"]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("url: http://u:sk-abcdefgh@host\n")
    assert secret_in("sk-abcdefgh", ran(output="fine"), tmp_path / "run") == ["sk-abc… in run/config.yaml"]
    assert secret_in("sk-abcdefgh", ran(output="sk-abcdefgh"), tmp_path / "nowhere") == ["sk-abc… in the output"]


def test_every_repro_has_a_unique_name_and_one_of_the_groups():
    assert len({r.name for r in REPROS}) == len(REPROS)
    assert {r.group for r in REPROS} == {"data loss", "security", "silent-wrong", "hangs", "tracebacks"}


def test_the_readme_says_whether_each_repro_reproduced_on_an_earlier_commit(tmp_path):
    earlier = {
        "commit": "abc1234",
        "command": "python benchmarks/hostile_inputs.py --only a b c",
        "machine": "x86_64",
        "results": [
            {"name": "a", "outcome": "data loss", "detail": "victim overwritten"},
            {"name": "b", "outcome": "clear error", "detail": "refused"},
            {"name": "c", "outcome": "harness error", "detail": "ImportError: no such module"},
        ],
    }
    (tmp_path / "before.json").write_text(json.dumps(earlier))
    row = {"group": "g", "outcome": "clear error", "detail": "", "seconds": 1}
    results = [row | {"name": name, "what": name} for name in ("a", "b", "c", "d")]
    report = {"command": "c", "commit": "def5678", "machine": "m", "total_seconds": 1, "counts": {}}
    report |= {"before": add_earlier(read_earlier([tmp_path / "before.json"]), results), "results": results}
    rows = {line.split("`")[1]: line for line in readme(report).splitlines() if line.startswith("| g |")}
    assert rows["a"].endswith("| reproduced on abc1234: data loss (victim overwritten) |")
    assert rows["b"].endswith("| not reproduced on abc1234: clear error (refused) |")
    assert rows["c"].endswith("| could not run on abc1234 (ImportError: no such module) |")
    assert rows["d"].endswith("| not run |")
    assert "abc1234: `python benchmarks/hostile_inputs.py --only a b c`" in readme(report)
    (tmp_path / "other.json").write_text("[]")
    with pytest.raises(ValueError, match="not a hostile_inputs.json"):
        read_earlier([tmp_path / "other.json"])


@pytest.mark.slow
def test_a_few_repros_run_through_the_harness_and_hold(tmp_path):
    names = ["manifest_over_its_dataset", "deeply_nested_jsonl", "world_demos_negative_limit", "viewer_script"]
    assert main(["--only", *names, "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")]) == 0
    report = json.loads((tmp_path / "out" / "hostile_inputs.json").read_text())
    outcomes = {r["name"]: r["outcome"] for r in report["results"]}
    assert outcomes == dict.fromkeys(names[:3], "clear error") | {"viewer_script": "OK"}
    assert report["failures"] == 0
    table = (tmp_path / "out" / "README.md").read_text()
    assert report["command"] in table and all(f"`{name}`" in table for name in names)


@pytest.mark.slow
def test_a_repro_that_fails_is_counted_as_a_failure(tmp_path, monkeypatch):
    """A harness that could not see a failure would report 0 whatever the code does."""
    monkeypatch.setattr(hostile_inputs, "accepted", lambda ran: ["accepted (exit 0)"])
    assert main(["--only", "world_demos_noise", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")]) == 1
    report = json.loads((tmp_path / "out" / "hostile_inputs.json").read_text())
    assert report["counts"]["silent-wrong"] == 1 and report["failures"] == 1
