"""Python snippets of the docs run as written: each is found by a line it holds and executed."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def snippet(doc: str, marker: str) -> str:
    """The one ```python block of ``doc`` (a path under the repository) that holds ``marker``."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    blocks = [code for code in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if marker in code]
    assert len(blocks) == 1, f"{doc}: {len(blocks)} python blocks hold {marker!r}"
    return blocks[0]


@pytest.mark.parametrize(
    ("doc", "marker"),
    [
        ("docs/environments.md", "env.unwrapped.final_rewards"),  # final rewards, the PettingZoo way
        ("docs/marl.md", "import supersuit"),  # flat observations under SuperSuit's wrappers
    ],
)
def test_the_snippet_runs(doc, marker, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet(doc, marker), f"{doc} snippet", "exec"), {"__name__": "__main__"})


POLICIES = "docs/policies.md"


@pytest.fixture
def my_policy(tmp_path, monkeypatch):
    """docs/policies.md's ``my_policy.py``, written where the reader would, and importable from there."""
    (tmp_path / "my_policy.py").write_text(snippet(POLICIES, "# my_policy.py"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_policy", raising=False)
    return tmp_path


def test_the_policy_pages_example_steps_an_environment(my_policy, capsys):
    exec(compile(snippet(POLICIES, "from my_policy import"), "policies.md snippet", "exec"), {"__name__": "__main__"})
    em, searches, report = capsys.readouterr().out.split(" ", 2)
    assert float(em) in (0.0, 1.0) and int(searches) >= 1 and report.strip()


@pytest.mark.slow
def test_the_policy_pages_commands_score_the_example(my_policy):
    """Every command of the page's shell block, as written, with the clone's console script."""
    text = (ROOT / POLICIES).read_text(encoding="utf-8")
    (commands,) = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
    bin_dir = Path(sys.executable).parent
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for line in filter(None, commands.splitlines()):
        done = subprocess.run(shlex.split(line), cwd=my_policy, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (line, done.stderr[-2000:])
    methods = json.loads((my_policy / "report" / "summary.json").read_text(encoding="utf-8"))["methods"]
    assert set(methods) == {
        "my_policy.py:FirstPassageTeam-hierarchical",
        "scripted-hierarchical+searcher=my_policy.py:FirstPassageSearcher",
    }
    team, role = methods.values()
    assert team["accuracy"] == role["accuracy"]  # the same team, named two ways


@pytest.mark.slow
def test_the_rllib_builder_snippet_runs():
    """docs/marl.md's ``ppo_config()`` example, in a process of its own (it starts Ray) and a short
    folder (Ray's socket paths under it must stay short)."""
    pytest.importorskip("ray.rllib")
    code = snippet("docs/marl.md", "ppo_config(")
    folder = tempfile.mkdtemp(prefix="rl")
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=600, check=False
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = ast.literal_eval(done.stdout.strip().splitlines()[-1])  # the greedy evaluation, printed
    assert set(figures) == {"em", "searches"} and 0 <= figures["em"] <= 1
