"""``.ci/run``: it ends with README's test command, and runs the fast set once without the vLLM venv,
so that the venv it builds cannot hide a test that fails on a machine without one."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _commands() -> list[str]:
    text = (REPO / ".ci" / "run").read_text(encoding="utf-8").replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_ends_with_readmes_test_command_verbatim():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = re.search(r"^(bash scripts/setup\.sh --dev && .*pytest -q)$", readme, re.M).group(1)
    assert _commands()[-1] == command


def test_ci_runs_the_fast_set_with_the_vllm_venv_hidden():
    hidden = []
    for line in _commands():
        words = shlex.split(line)
        if "pytest" in words and "not slow" in words:
            hidden.append(words)
    assert len(hidden) == 1, hidden
    words = hidden[0]
    # the requirement is lifted (vLLM tests skip) and the venv is looked for in an empty folder only
    assert words[:5] == ["env", "-u", "MAOPD_REQUIRE_VLLM", "-u", "MAOPD_VLLM_PYTHON"], words
    assert any(word.startswith("MAOPD_VLLM_VENV=$(mktemp -d)") for word in words), words
