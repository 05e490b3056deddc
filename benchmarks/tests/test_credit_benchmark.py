"""The credit-assignment benchmark: a method registered from an outside script runs and is reported."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from benchmarks import credit_assignment
from benchmarks.credit_assignment import (
    _LOADED_PLUGINS,
    COLUMNS,
    WORKER_MEMORY,
    default_workers,
    load_plugins,
    main,
    paired_differences,
    table,
)
from benchmarks.marl_statistics import interval
from maopd.base.config import ConfigError
from maopd.training.marl.credit import CREDIT_METHODS, CreditContext, get_credit_method
from maopd.training.marl.trainer import MarlConfig, train
from tests.training.test_marl_credit import TINY, batch  # noqa: F401  (batch: a fixture)

PLUGIN = '''
import numpy as np

from maopd.training.marl.credit import register


@register("zero_for_test")
def zero(episodes, context):
    """No credit at all: PPO sees advantage 0 everywhere (a null baseline)."""
    return [np.zeros(len(episode.decisions)) for episode in episodes]
'''


@pytest.mark.slow
def test_a_method_from_an_outside_script_runs_and_appears_in_the_table(tmp_path):
    plugin = tmp_path / "my_method.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "out"
    try:
        summary = main(
            [
                "--plugin",
                str(plugin),
                "--methods",
                "zero_for_test",
                "role",
                "--scenarios",
                "lazy_searcher_v1",
                "--seeds",
                "0",
                "1",
                "--iterations",
                "2",
                "--episodes",
                "4",
                "--eval-questions",
                "4",
                "--workers",
                "1",
                "--out",
                str(out),
            ]
        )
    finally:
        CREDIT_METHODS.pop("zero_for_test", None)
        _LOADED_PLUGINS.clear()
    saved = json.loads((out / "results.json").read_text())
    assert saved["plugins"][0]["methods"] == ["zero_for_test"] and len(saved["plugins"][0]["sha256"]) == 64
    assert "--plugin" in saved["command"] and summary["methods"] == ["zero_for_test", "role"]
    assert [len(runs) for runs in saved["runs"]["lazy_searcher_v1"].values()] == [2, 2]
    report = (out / "results.md").read_text()
    assert "| zero_for_test |" in report and "| zero_for_test | role |" in report
    assert "| zero_for_test (n=2 seeds) |" in report and "more than half of the 2 iterations" in report
    for name in ("curves_lazy_searcher_v1.png", "performance_profiles.png", "marl_eval.json"):
        assert (out / name).stat().st_size > 0


def test_paired_differences_pair_runs_by_seed():
    runs = {
        "a": [{"config": {"seed": s}, "em": 0.5 + 0.1 * s} for s in range(5)],
        "b": [{"config": {"seed": s}, "em": 0.4 + 0.1 * s} for s in reversed(range(5))],
    }
    (row,) = paired_differences(runs)
    assert abs(row["mean"] - 0.1) < 1e-9 and abs(row["low"] - 0.1) < 1e-9 and abs(row["high"] - 0.1) < 1e-9
    assert row["excludes_zero"] and row["seeds"] == 5 and interval([1.0]) is None


TINY_RUNS = ["--methods", "role", "--scenarios", "lazy_searcher_v1", "--seeds", "0", "1", "--episodes", "4"]
TINY_RUNS += ["--eval-questions", "4", "--workers", "1"]


@pytest.mark.slow
def test_a_stopped_benchmark_resumes_from_its_saved_runs_and_refuses_another_config(tmp_path, capsys):
    out = tmp_path / "out"
    first = main([*TINY_RUNS, "--iterations", "2", "--out", str(out)])
    saved = sorted(path.name for path in (out / "runs").iterdir())
    assert saved == ["lazy_searcher_v1__role__seed0.json", "lazy_searcher_v1__role__seed1.json"]
    (out / "runs" / saved[1]).unlink()  # as if the command had been killed during that run
    again = main([*TINY_RUNS, "--iterations", "2", "--out", str(out)])
    assert again["resumed_runs"] == 1 and first["resumed_runs"] == 0
    final = [[run["em"] for run in summary["runs"]["lazy_searcher_v1"]["role"]] for summary in (first, again)]
    assert final[0] == final[1]  # the retrained seed plays the same episodes
    assert "1 saved runs of an earlier, stopped invocation" in (out / "results.md").read_text()
    assert "note:" not in capsys.readouterr().err  # every saved run is of this commit
    kept = out / "runs" / saved[0]
    kept.write_text(json.dumps({**json.loads(kept.read_text()), "commit": "0000000"}))
    main([*TINY_RUNS, "--iterations", "2", "--out", str(out)])
    assert "holds runs trained at commit 0000000" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*TINY_RUNS, "--iterations", "3", "--out", str(out)])
    assert "holds a run of another config than this command's" in capsys.readouterr().err


@pytest.mark.slow
def test_speed_times_every_path_against_the_same_baselines(tmp_path):
    out = tmp_path / "speed"
    settings = ["--scenarios", "lazy_searcher_v1", "--seeds", "0", "--iterations", "1", "--episodes", "2"]
    main(["--speed", *settings, "--out", str(out)])
    row = json.loads((out / "speed.json").read_text())["results"]["lazy_searcher_v1"]
    paths = ("vectorized_text", "fast", "transitions_cached")
    assert {"reference", *paths} <= row.keys()
    assert all(run["episodes"] == 2 for path in paths for run in row[path])
    assert len({run["decisions"] for path in paths for run in row[path]}) == 1
    # the floor's timed run found every transition in the cache its untimed run filled
    assert row["transitions_cached"][0]["transition_misses"] == 0
    assert row["speedup_fast_over_vectorized_text_seconds"]["cold"] > 0
    assert row["transition_microseconds_per_decision"].keys() == {"vectorized_text", "fast"}


@pytest.mark.slow
def test_every_run_records_the_commit_the_benchmark_started_on(tmp_path, monkeypatch):
    commits = iter(["aaaaaaa", "bbbbbbb", "ccccccc"])  # the checkout moves on while the runs train
    monkeypatch.setattr(credit_assignment, "git_commit", lambda short=False: next(commits))
    summary = main([*TINY_RUNS, "--iterations", "1", "--out", str(tmp_path / "out")])
    assert summary["commit"] == "aaaaaaa"
    assert [run["commit"] for run in summary["runs"]["lazy_searcher_v1"]["role"]] == ["aaaaaaa", "aaaaaaa"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--iterations", "0"], "argument --iterations: 0 is out of range: must be at least 1"),
        (["--episodes", "0"], "argument --episodes: 0 is out of range: must be at least 1"),
        (["--eval-questions", "-5"], "argument --eval-questions: -5 is out of range: must be at least 1"),
        (["--workers", "0"], "argument --workers: 0 is out of range: must be at least 1"),
        (["--seeds", "-1"], "argument --seeds: -1 is out of range: must be in [0, 4294967295]"),
        (["--seeds", "0", "1", "0"], "--seeds lists 0 more than once; give each once"),
        (["--methods", "role", "team", "role"], "--methods lists role more than once; give each once"),
        (["--scenarios", "synthwiki_v1", "synthwiki_v1"], "--scenarios lists synthwiki_v1 more than once"),
    ],
)
def test_bad_arguments_are_refused_in_one_line_before_any_run(tmp_path, capsys, arguments, message):
    """A repeated seed would count one run twice in every interval; a zero budget would train nothing."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main([*arguments, "--out", str(out)])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0]
    assert not out.exists()


def test_the_trainer_config_refuses_a_bad_value_in_one_line():
    with pytest.raises(ConfigError, match=r"^episodes_per_iteration: must be >= 1, got 0$"):
        MarlConfig(episodes_per_iteration=0)
    with pytest.raises(ConfigError, match=r"^workflow: must be one of \['hierarchical', 'cascade'\] or null"):
        MarlConfig(workflow="single")


def test_bad_files_and_directories_are_refused_in_one_line_before_any_run(tmp_path, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text('import numpy\n\nraise KeyError("no such column")\n')
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    cases = [
        (["--plugin", str(tmp_path / "missing.py")], "missing.py does not exist; give the Python file"),
        (["--plugin", str(tmp_path)], "is a directory; give the Python file that registers your method"),
        (["--plugin", str(broken)], "broken.py failed at line 3: KeyError: 'no such column'"),
        (["--speed", "--reference-checkout", str(tmp_path)], "is not a checkout of this project"),
        (["--out", str(a_file)], "a_file is a file; a directory is needed there"),
    ]
    for arguments, message in cases:
        with pytest.raises(SystemExit):
            main(
                [*arguments, "--iterations", "1", "--seeds", "0"]
                + ([] if "--out" in arguments else ["--out", str(tmp_path / "out")])
            )
        errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
        assert len(errors) == 1 and message in errors[0], (arguments, errors)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_plugin_methods_bad_output_ends_the_benchmark_in_one_line(tmp_path, capsys):
    """docs/marl.md promises a ``PluginOutputError`` is one line naming the method, not a traceback."""
    plugin = tmp_path / "short_plugin.py"
    plugin.write_text(
        "import numpy as np\nfrom maopd.training.marl.credit import register\n\n\n"
        '@register("short_for_test")\ndef short(episodes, context):\n'
        "    return [np.zeros(len(ep.decisions) - 1) for ep in episodes]\n"
    )
    arguments = [*TINY_RUNS, "--methods", "short_for_test", "--seeds", "0", "--iterations", "1"]
    try:
        with pytest.raises(SystemExit) as exit_info:
            main([*arguments, "--plugin", str(plugin), "--out", str(tmp_path / "out")])
    finally:
        CREDIT_METHODS.pop("short_for_test", None)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert "Traceback" not in err and len(errors) == 1
    assert f"credit-assignment method 'short_for_test' ({plugin}) returned shape" in errors[0]


def test_the_default_workers_are_one_per_usable_core_as_memory_allows(monkeypatch):
    pages = {"SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(credit_assignment.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(credit_assignment.os, "sysconf", lambda name: pages.get(name, pages["SC_PHYS_PAGES"]))
    pages["SC_PHYS_PAGES"] = 128 * WORKER_MEMORY // 4096  # memory for 128 workers: the cores decide
    assert default_workers() == 16
    pages["SC_PHYS_PAGES"] = 5 * WORKER_MEMORY // 4096 + 1  # memory for 5
    assert default_workers() == 5
    pages["SC_PHYS_PAGES"] = WORKER_MEMORY // 8192  # less than one worker's share: still one
    assert default_workers() == 1


def test_a_plugin_reads_the_global_state_through_the_registry(batch, tmp_path):  # noqa: F811  (the imported fixture)
    """The state-baseline example of docs/marl.md, loaded as the benchmark's --plugin loads it."""
    docs = (Path(__file__).parents[2] / "docs" / "marl.md").read_text()
    (example,) = re.findall(r"```python\n(# state_baseline\.py\n.*?)```", docs, re.DOTALL)
    plugin = tmp_path / "state_baseline.py"
    plugin.write_text(example)
    env, policy, episodes = batch
    try:
        (described,) = load_plugins([plugin])
        assert described["methods"] == ["state_baseline"]
        advantages = get_credit_method("state_baseline")(episodes, CreditContext(env, policy))
        assert [len(a) for a in advantages] == [len(ep.decisions) for ep in episodes]
        assert all(np.isfinite(a).all() for a in advantages)
        _, metrics = train(MarlConfig(method="state_baseline", **TINY), progress=False)
        assert len(metrics["curve"]) == 2
    finally:
        CREDIT_METHODS.pop("state_baseline", None)
        _LOADED_PLUGINS.clear()


def test_credit_benchmark_prints_no_interval_for_one_seed():
    run = {**dict.fromkeys(COLUMNS, 0.25), "seconds": 3.0}
    one = table({"opd": [run]}, window=10)
    assert "[" not in one and "1 seed" in one
    assert "[" in table({"opd": [run, {**run, COLUMNS[0]: 0.5}]}, window=10)
