"""``maopd eval run --policy mypkg.mod:MyTeam`` scores a policy defined outside this package, run as a
user would: the console script, from the folder that holds ``mypkg``, nothing on PYTHONPATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maopd.envs.datasets import load_questions
from maopd.evaluation.manifest import ManifestEntry, question_hash

REPO = Path(__file__).resolve().parents[2]
MAOPD = Path(sys.executable).with_name("maopd")
CORPUS = REPO / "tests" / "fixture" / "corpus.jsonl"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not MAOPD.is_file(), reason="no maopd console script beside python")]

MODULE = '''
import re

from maopd.agents.scripted import scripted_team
from maopd.envs.policy import AgentOutput


def shout(text):
    return re.sub("<answer>(.*?)</answer>", lambda match: f"<answer>{match.group(1).upper()}</answer>", text)


class MyTeam:
    """The scripted team, whose Answerer shouts its answers (exact match ignores case)."""

    def __init__(self):
        self.team = scripted_team()

    def act(self, turns):
        outputs = self.team.act(turns)
        return [
            AgentOutput([shout(text) if turn.role == "answerer" else text for text in output.texts])
            for turn, output in zip(turns, outputs)
        ]


class Silent:
    def act(self, turns):
        return []
'''


@pytest.fixture
def project(tmp_path):
    """A user's folder: the package ``mypkg`` and a manifest of the fixture questions."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "mod.py").write_text(MODULE)
    questions = load_questions(REPO / "tests" / "fixture" / "questions.jsonl")[:3]
    entries = [ManifestEntry("fixture", q, question_hash(q.question)).to_dict() for q in questions]
    (tmp_path / "manifest.jsonl").write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    return tmp_path


def _maopd(project: Path, *arguments: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MAOPD_DEBUG")}
    return subprocess.run(
        [str(MAOPD), *arguments], cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def _run(project: Path, out: str, *policy: str) -> subprocess.CompletedProcess:
    return _maopd(
        project, "eval", "run", "--manifest", "manifest.jsonl", "--corpus", str(CORPUS), "--attempts", "2",
        "--out", out, *policy,
    )  # fmt: skip


def test_eval_run_scores_a_team_and_a_role_defined_outside_the_package(project):
    done = _run(project, "records.jsonl", "--policy", "mypkg.mod:MyTeam")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (project / "records.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and {row["method"] for row in rows} == {"mypkg.mod:MyTeam-hierarchical"}
    assert all(row["strict_answer"] == row["strict_answer"].upper() for row in rows if row["strict_answer"])
    done = _run(project, "records.jsonl", "--policy", "scripted", "--role", "answerer=mypkg/mod.py:MyTeam")
    assert done.returncode == 0, done.stderr[-2000:]
    done = _maopd(project, "eval", "score", "records.jsonl", "--draws", "10", "--out", "report")
    assert done.returncode == 0, done.stderr[-2000:]
    methods = json.loads((project / "report" / "summary.json").read_text())["methods"]
    mine, with_role = (
        methods["mypkg.mod:MyTeam-hierarchical"],
        methods["scripted-hierarchical+answerer=mypkg/mod.py:MyTeam"],
    )
    assert mine["k"] == 2 and mine["accuracy"]["avg@2"]["macro"] > 0
    assert with_role["accuracy"]["avg@2"]["macro"] == mine["accuracy"]["avg@2"]["macro"]

    # a resume under an edited policy is refused: the records name the source they were made with
    (project / "mypkg" / "mod.py").write_text(MODULE + "\n# edited\n")
    done = _run(project, "records.jsonl", "--policy", "mypkg.mod:MyTeam")
    assert done.returncode == 2 and "policy_source_sha256" in done.stderr


def test_a_policy_that_breaks_the_contract_ends_the_run_in_one_line_naming_it(project):
    done = _run(project, "silent.jsonl", "--role", "searcher=mypkg.mod:Silent")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]  # after the progress bar
    assert last.startswith("maopd eval run: policy mypkg.mod:Silent returned 0 output(s) for 1 turn(s); act(turns)")
