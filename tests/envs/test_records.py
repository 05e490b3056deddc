"""The typed workflow record: its JSON form is the one records have always had, byte for byte, and
every output it keeps is bounded."""

from __future__ import annotations

import json

import pytest

from maopd.agents.scripted import scripted_team
from maopd.envs import cascade_search_v1, hierarchical_search_v1, single_search_v1
from maopd.envs.episode import run_episode
from maopd.envs.records import RECORD_VERSION, CallRecord, RecordFormatError, WorkflowRecord
from tests.envs.test_workflows import OPTIONS, Rules
from tests.fixture import FIXTURE_DIR

# Written by the environments before records were typed (version 1, no "version" key): the three
# workflows with and without force_finish, played by the expert team and by sampled actions with and
# without format failures, one or two candidates, dropped subtasks and workflows without an answer.
VERSION_1_RECORDS = FIXTURE_DIR / "workflow_records.jsonl"
TEN_MB = "x" * 10_000_000


def version_1_lines() -> list[str]:
    return VERSION_1_RECORDS.read_text(encoding="utf-8").splitlines()


def json_line(record: WorkflowRecord) -> str:
    return json.dumps(record.to_json(), ensure_ascii=False)


def layout(data: dict) -> tuple:
    """The keys, in order, of a record's JSON form and of its rewards and counters."""
    return tuple(data), tuple(data["rewards"]), tuple(data["counters"])


def item_layouts(data: dict) -> set:
    """The keys, in order, of each item of a record's lists of objects."""
    items = {
        (name, tuple(item))
        for name in ("subtasks", "reports", "searches", "format_errors", "calls")
        for item in data[name]
    }
    return items | {("passages", tuple(p)) for search in data["searches"] for p in search["passages"]}


def test_committed_version_1_records_round_trip_byte_for_byte():
    lines = version_1_lines()
    assert len(lines) == 36 and not any('"version"' in line[:20] for line in lines)
    for line in lines:
        record = WorkflowRecord.from_json(json.loads(line))
        assert record.version == 1
        assert json_line(record) == line


def test_fresh_records_have_the_version_1_layout():
    """A fresh record without a cut output writes exactly the keys, in their order, that the
    committed records of its workflow and force_finish setting hold."""
    layouts, items = {}, set()
    for line in version_1_lines():
        data = json.loads(line)
        layouts[(data["workflow"], "no_answer" in data["counters"])] = layout(data)
        items |= item_layouts(data)
    assert len(layouts) == 6
    for module in (cascade_search_v1, hierarchical_search_v1, single_search_v1):
        for force_finish in (False, True):
            record = run_episode(module.env(force_finish=force_finish), scripted_team(), seed=0)
            data = record.to_json()
            assert "version" not in data and record.version == 1
            assert layout(data) == layouts[(record.workflow, not force_finish)]
            assert item_layouts(data) <= items and item_layouts(data)
            assert json_line(WorkflowRecord.from_json(json.loads(json_line(record)))) == json_line(record)


def test_a_record_states_its_version_only_when_it_needs_it():
    assert WorkflowRecord.from_json({"question": "q"}).version == 1  # no key: version 1
    assert WorkflowRecord.from_json({"version": 1, "question": "q"}).question == "q"
    cut = WorkflowRecord(calls=[CallRecord(outputs=["x"], output_chars=[5])])
    assert cut.version == RECORD_VERSION == 2 and next(iter(cut.to_json().items())) == ("version", 2)
    assert WorkflowRecord.from_json(json.loads(json_line(cut))) == cut
    with pytest.raises(
        RecordFormatError, match="version 3 workflow record; this multiagent-opd reads versions up to 2"
    ):
        WorkflowRecord.from_json({"version": 3})
    with pytest.raises(RecordFormatError, match="'record.version' must be a positive integer"):
        WorkflowRecord.from_json({"version": "2"})


@pytest.mark.parametrize(
    "data, message",
    [
        ([], "field 'record' must be an object, got list"),
        ({"calls": [{"outputs": "x"}]}, r"field 'record.calls\[0\].outputs' must be a list, got str"),
        ({"rewards": {"em": "1"}}, "field 'record.rewards.em' must be a number, got str"),
        ({"counters": {"reports": True}}, "field 'record.counters.reports' must be an integer, got bool"),
        (
            {"searches": [{"passages": [{"id": "1", "title": None, "text": "", "score": 0}]}]},
            r"'record.searches\[0\].passages\[0\].title' must be a string",
        ),
        ({"searches": [{"passages": [{"id": "1", "title": "t", "text": "x"}]}]}, r"passages\[0\].score' is missing"),
        ({"rewards": {"searchers": {"searcher_0": None}}}, "'record.rewards.searchers.searcher_0' must be a number"),
    ],
)
def test_a_malformed_record_is_refused_naming_the_field(data, message):
    with pytest.raises(RecordFormatError, match=message):
        WorkflowRecord.from_json(data)


def test_a_partial_record_takes_the_defaults():
    record = WorkflowRecord.from_json({"workflow": "hierarchical", "calls": [{"outputs": ["long"]}]})
    assert record.calls[0].outputs == ["long"] and record.calls[0].wave is None
    assert record.rewards.em == 0.0 and record.counters.no_answer is None and record.reports == []


def test_reading_the_record_as_a_dict_says_how_to_read_it():
    record = run_episode(cascade_search_v1.env(), scripted_team(), seed=0)
    with pytest.raises(TypeError, match=r"read through attributes: record\.rewards .*record\.to_json\(\)"):
        record["rewards"]


def test_ten_10_mb_outputs_give_a_bounded_record_with_their_lengths():
    env = single_search_v1.env(max_steps=10, force_finish=True)
    record = run_episode(env, Rules(solver=lambda turn: TEN_MB), options=OPTIONS)
    limit = env.unwrapped.config.max_action_chars
    (call,) = record.calls
    assert call.output_chars == [10_000_000] * 10 and call.outputs == [TEN_MB[:limit]] * 10
    assert record.candidates == [TEN_MB[:limit]]  # the forced last output is the candidate, cut alike
    assert record.counters.format_failures == 10
    line = json_line(record)
    assert len(line) < 20 * limit + 20_000  # the outputs, each also in the chat history, and the rest
    assert line.startswith('{"version": 2, ') and WorkflowRecord.from_json(json.loads(line)) == record


def test_cut_answerer_candidates_keep_their_lengths():
    env = cascade_search_v1.env(num_candidates=2)
    policy = Rules(searcher=lambda turn: "<report>born in Tarvel</report>", answerer=lambda turn: TEN_MB)
    record = run_episode(env, policy, options=OPTIONS)
    searcher, answerer = record.calls
    assert searcher.output_chars is None and answerer.output_chars == [10_000_000, 10_000_000]
    limit = env.unwrapped.config.max_action_chars
    assert record.candidates == answerer.outputs == [TEN_MB[:limit]] * 2
    assert record.rewards.answerer == [-1.0, -1.0]  # over-long: format failures, as before
