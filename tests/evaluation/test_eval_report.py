"""``maopd eval score`` on methods with different attempt counts: each method keeps its own k."""

import json
import re
from html.parser import HTMLParser

import pytest

from maopd.evaluation.records import record_from_dict
from maopd.evaluation.report import SHOWN_OUTPUT_CHARS, build_tables, write_tables, write_viewer
from maopd.evaluation.scoring import score_records
from maopd.evaluation.summary import summarize
from tests.evaluation.test_eval_metrics import make_records


def test_methods_with_different_attempt_counts_are_scored_each_with_its_own_k(tmp_path, capsys):
    three = make_records(
        "three",
        {"d": [[1, 0, 0], [1, 1, 1]]},
        costs={
            ("d", q, a): {"search_actions": 1 + a, "input_tokens": 10, "output_tokens": 5}
            for q in range(2)
            for a in range(3)
        },
    )
    four = make_records(
        "four",
        {"d": [[1, 1, 0, 0], [0, 0, 0, 0]]},
        costs={
            ("d", q, a): {"search_actions": 2, "input_tokens": 20, "output_tokens": 8}
            for q in range(2)
            for a in range(4)
        },
    )
    summary = score_records(three + four, [], tmp_path, draws=20)
    assert {name: m["k"] for name, m in summary["methods"].items()} == {"three": 3, "four": 4}
    tables = build_tables(summary)
    main = tables["main"]
    assert main.headers[:2] == ["method", "k"] and "avg@k" in main.title
    rows = {row[0]: row for row in main.rows}
    assert rows["three"][1] == 3 and rows["three"][2] == pytest.approx((1 / 3 + 1) / 2)
    assert rows["four"][1] == 4 and rows["four"][2] == pytest.approx(0.25)
    assert tables["table4"].headers == ["method", "k", "avg@k", "pass@k", "k/k"]
    assert (tmp_path / "cost_accuracy.png").is_file()
    assert json.loads((tmp_path / "summary.json").read_text())["methods"]["four"]["k"] == 4


def test_one_shared_k_keeps_the_concrete_names():
    summary = summarize(make_records("a", {"d": [[1, 0]]}) + make_records("b", {"d": [[0, 0]]}), [("a", "b")], draws=10)
    tables = build_tables(summary)
    assert tables["main"].headers == ["method", "d", "macro"] and "avg@2" in tables["main"].title
    assert tables["paired"].headers[2:5] == ["avg@2", "pass@2", "2/2"]


PAYLOAD = "<script>alert(1)</script><img src=x onerror=alert(2)>"
VIEWER_TAGS = {"meta", "title", "style", "h3", "h4", "p", "b", "i", "table", "tr", "td", "div", "code", "pre"}


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)


def _hostile_records() -> list:
    """Records whose every text field, trajectory entries included, holds markup."""
    passage = {"id": PAYLOAD, "title": PAYLOAD, "text": PAYLOAD, "score": 1.0}
    trajectory = {
        "subtasks": [{"wave": 1, "agent": PAYLOAD, "task": PAYLOAD}],
        "searches": [{"wave": 1, "agent": PAYLOAD, "query": PAYLOAD, "passages": [passage]}],
        "reports": [{"number": 1, "agent": PAYLOAD, "task": PAYLOAD, "text": PAYLOAD}],
        "format_errors": [{"env_step": 1, "agent": PAYLOAD, "error": PAYLOAD}],
        "calls": [{"call_id": PAYLOAD, "agent": PAYLOAD, "outputs": [PAYLOAD]}],
    }
    rows = [
        {
            "method": method,
            "dataset": f"d{PAYLOAD}|x",
            "question_id": PAYLOAD,
            "question": PAYLOAD,
            "attempt": attempt,
            "golden_answers": [PAYLOAD],
            "final_output": f"<answer>{PAYLOAD}</answer>",
            "trajectory": trajectory,
        }
        for method in (f"a|b{PAYLOAD}", "plain")
        for attempt in range(2)
    ]
    return [record_from_dict(row, f"line {n}") for n, row in enumerate(rows, start=1)]


def test_the_viewer_escapes_every_text_of_a_record(tmp_path):
    path = write_viewer(_hostile_records(), tmp_path / "viewer.html")
    parser = _Tags()
    parser.feed(path.read_text(encoding="utf-8"))
    assert parser.tags <= VIEWER_TAGS, parser.tags - VIEWER_TAGS
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in path.read_text(encoding="utf-8")


def test_tables_md_keeps_names_inside_their_cells(tmp_path):
    summary = summarize(_hostile_records(), [(f"a|b{PAYLOAD}", "plain")], draws=10)
    markdown = write_tables(build_tables(summary), tmp_path).read_text(encoding="utf-8")
    assert "<script" not in markdown and "<img" not in markdown
    for block in markdown.split("### ")[1:]:
        rows = [line for line in block.splitlines() if line.startswith("|")]
        cells = {len(re.split(r"(?<!\\)\|", row)) for row in rows}
        assert len(cells) == 1, block  # every row has as many cells as the header


class _Says:
    """A policy that writes ``text`` for every turn."""

    def __init__(self, text: str):
        self.text = text

    def act(self, turns):
        from maopd.envs.policy import AgentOutput

        return [AgentOutput([self.text] * turn.num_candidates) for turn in turns]


@pytest.mark.parametrize(
    ("leader", "answerer", "failure", "shown"),
    [
        ("<select>report seven</select>", "<answer>x</answer>", "no_candidate", "&lt;select&gt;report seven"),
        (None, "", "empty_candidate", "(empty output: &#x27;&#x27;)"),
        (None, "I think it is Paris.", "no_valid_tag", "I think it is Paris."),
    ],
    ids=["no_candidate", "empty", "untagged"],
)
def test_the_viewer_shows_what_a_failed_workflow_wrote(tmp_path, leader, answerer, failure, shown):
    """A failed workflow's page shows the failed outputs and the format errors, never a bare "None"."""
    from maopd.agents.scripted import ScriptedLeader, ScriptedSearcher
    from maopd.envs import hierarchical_search_v1
    from maopd.envs.episode import run_episode
    from maopd.envs.policy import RoleRouter
    from maopd.evaluation.records import from_workflow

    team = RoleRouter(
        {
            "leader": ScriptedLeader() if leader is None else _Says(leader),
            "searcher": ScriptedSearcher(),
            "answerer": _Says(answerer),
        }
    )
    workflow = run_episode(hierarchical_search_v1.env(), team, seed=0)
    loaded = record_from_dict(json.loads(json.dumps(from_workflow(workflow, "m", "d", 0).to_dict())), "line 1")
    assert loaded.failure == failure
    page = write_viewer([loaded], tmp_path / "viewer.html").read_text(encoding="utf-8")
    assert "<pre>None</pre>" not in page
    assert "failed outputs" in page and shown in page
    for error in workflow.format_errors:
        assert json.dumps(error.agent)[1:-1] in page
    if failure == "no_candidate":
        assert "(no Answerer candidate" in page and "step 1, leader: bad &lt;select&gt;" in page


def test_the_viewer_counts_the_characters_a_cut_output_had(tmp_path):
    """An output the record keeps cut (``output_chars``) shows how much the model wrote."""
    from maopd.agents.scripted import ScriptedLeader, ScriptedSearcher
    from maopd.envs import hierarchical_search_v1
    from maopd.envs.episode import run_episode
    from maopd.envs.policy import RoleRouter
    from maopd.evaluation.records import from_workflow

    team = RoleRouter({"leader": ScriptedLeader(), "searcher": ScriptedSearcher(), "answerer": _Says("y" * 100_000)})
    workflow = run_episode(hierarchical_search_v1.env(), team, seed=0)
    assert workflow.calls[-1].output_chars == [100_000]
    loaded = record_from_dict(json.loads(json.dumps(from_workflow(workflow, "m", "d", 0).to_dict())), "line 1")
    page = write_viewer([loaded], tmp_path / "viewer.html").read_text(encoding="utf-8")
    assert f"… ({100_000 - SHOWN_OUTPUT_CHARS} more characters)" in page
