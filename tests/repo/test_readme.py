"""README.md is for users: it reaches stepping an environment on its first screen, quotes no
measured figure (those live in the results READMEs under benchmarks/results/, which it links), and
its stepping snippet runs outside the clone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
STEP_HEADING = "## Step an environment"
FIRST_SCREEN = 45  # lines
NUMBER = r"[−+-]?\d+(?:[.,]\d+)?"
# [a, b] with numbers: a confidence interval; ± a half-width
INTERVAL = re.compile(rf"\[\s*{NUMBER}\s*,\s*{NUMBER}\s*\]|±")
# a percentage, or a difference or score in points
FIGURE = re.compile(rf"{NUMBER}\s*%|{NUMBER}\s*(?:percentage\s+)?points?\b|\bpoints?\s+{NUMBER}")


def _prose() -> str:
    """README without its code blocks (a figure in code would be a value in code, not a result)."""
    return re.sub(r"```.*?```", "", README, flags=re.DOTALL)


def step_snippet() -> str:
    section = README[README.index("\n" + STEP_HEADING) :]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_stepping_an_environment_is_on_the_first_screen():
    lines = README.splitlines()
    assert STEP_HEADING in lines, f"README has no {STEP_HEADING!r} heading"
    assert lines.index(STEP_HEADING) < FIRST_SCREEN, f"{STEP_HEADING!r} is on line {lines.index(STEP_HEADING) + 1}"


def test_the_readme_quotes_no_interval_or_figure():
    assert not INTERVAL.findall(README), INTERVAL.findall(README)
    assert not FIGURE.findall(_prose()), FIGURE.findall(_prose())


def test_the_patterns_catch_what_they_are_for():
    assert INTERVAL.search("+29.6 points, [26.0, 33.3] by questions") and INTERVAL.search("0.5 ± 0.1")
    assert INTERVAL.search("[−14.7, 49.1]") and not INTERVAL.search("[docs/main_job.md](docs/main_job.md)")
    assert FIGURE.search("under 0.5% of workflows") and FIGURE.search("+24.6 points") and FIGURE.search("38 %")
    assert not FIGURE.search("10 RL steps per stage and 40 test questions, torch 2.13.0")


def test_the_readme_links_the_report():
    assert "benchmarks/results/popularity_testbed_report/README.md" in README


@pytest.mark.slow
def test_the_stepping_snippet_runs_outside_the_clone(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", step_snippet()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Question:" in done.stdout and "RewardParts(em=" in done.stdout
