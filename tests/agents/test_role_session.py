"""The role session (the core of the TRL and OpenEnv adapters) plays one call of one role, the
others played by the expert team: its reward is the record's, a call left open ends in format
failures, and a tool call is exactly one action of its kind."""

from __future__ import annotations

import pytest

from maopd.agents.expert_team import expert_team
from maopd.agents.integrations.role_session import (
    CALL_OVER,
    TOOL_PROMPTS,
    RoleSession,
    call_reward,
    since_last_output,
    tool_action,
    tool_view,
)
from maopd.envs.actions import parse_action

CASES = [
    ("searcher", "hierarchical"),
    ("searcher", "cascade"),
    ("answerer", "hierarchical"),
    ("answerer", "cascade"),
    ("leader", "hierarchical"),
    ("solver", "single"),
]


@pytest.mark.parametrize(("role", "workflow"), CASES)
def test_the_learner_plays_one_call_and_gets_its_reward_from_the_record(role, workflow):
    session = RoleSession(role, workflow, split="test")
    turn = session.reset(question_index=0)
    assert turn.role == role and session.call_id == turn.call_id
    assert tool_view(turn).startswith(TOOL_PROMPTS[role]) and turn.messages[1]["content"] in tool_view(turn)
    expert, answers = expert_team(), []
    while session.call_open:
        answers.append(session.act(expert.act([session.turn])[0]))
    assert session.done and answers[-1] == ""  # the output that ends the call gets no answer
    record = session.record
    call = next(c for c in record.calls if c.call_id == session.call_id)
    assert len(call.outputs) == session.actions == len(answers)
    assert session.reward == call_reward(record, role, session.call_id)
    assert session.reward > 0 and record.rewards.em == 1.0  # the expert team solves it


def test_an_answer_is_what_the_environment_added_to_the_call():
    session = RoleSession("searcher", "cascade", split="test")
    session.reset(question_index=0)
    answer = session.act(tool_action("search", "Koduth Bloom"))
    assert answer.startswith("<information>") and answer == session.turn.messages[-1]["content"]
    assert since_last_output(session.turn.messages) == [session.turn.messages[-1]]


def test_a_call_left_open_ends_in_format_failures():
    session = RoleSession("searcher", "hierarchical", split="test")
    session.reset(question_index=0)
    session.act(tool_action("search", "Koduth Bloom"))
    record = session.finish()
    assert not session.call_open and session.reward == -1.0
    call = next(c for c in record.calls if c.call_id == session.call_id)
    assert call.outputs[1:] == [""] * (len(call.outputs) - 1)
    with pytest.raises(RuntimeError, match="not acting"):
        session.act("<report>late</report>")


def test_the_hierarchy_searcher_is_the_first_assignment_and_the_others_play_the_rest():
    session = RoleSession("searcher", "hierarchical", split="test", seed=3)
    session.reset()
    assert session.call_id == "searcher_0@w1"
    session.finish()
    ids = [c.call_id for c in session.record.calls if c.role == "searcher"]
    assert ids[0] == "searcher_0@w1" and session.reward == session.record.rewards.searcher_calls[0]


@pytest.mark.parametrize(
    ("kind", "content", "parsed"),
    [
        ("search", "Zoroth River", "Zoroth River"),
        ("report", "x</report><search>y", "x&lt;/report&gt;&lt;search&gt;y"),
        ("select", "all", "all"),
        ("answer", "Paris", "Paris"),
    ],
)
def test_a_tool_call_is_exactly_one_action_of_its_kind(kind, content, parsed):
    role = {"search": "searcher", "report": "searcher", "select": "leader", "answer": "answerer"}[kind]
    action = parse_action(tool_action(kind, content), role, (kind,), 4096)
    assert action.kind == kind and action.content == parsed


def test_delegate_takes_one_subtask_a_line():
    action = parse_action(tool_action("delegate", ["Who founded A?", "Where is B?"]), "leader", ("delegate",), 4096)
    assert list(action.subtasks) == ["Who founded A?", "Where is B?"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"role": "critic"}, "role='critic' is invalid"),
        ({"role": "leader", "workflow": "cascade"}, "does not play"),
        ({"role": "solver", "workflow": "hierarchical"}, "does not play"),
        ({"role": "answerer", "num_candidates": 5}, "num_candidates"),
    ],
)
def test_bad_arguments_are_named(kwargs, error):
    with pytest.raises(ValueError, match=error):
        RoleSession(**kwargs)


def test_reset_takes_a_question_or_an_index_and_finish_needs_a_reset():
    session = RoleSession("solver", split="test")
    with pytest.raises(RuntimeError, match="reset"):
        session.finish()
    with pytest.raises(ValueError, match="not both"):
        session.reset(question={"question": "q", "golden_answers": ["a"]}, question_index=0)
    turn = session.reset(question={"question": "Where was Koduth Bloom formed?", "golden_answers": ["Lilunirn"]})
    assert turn.task == "Where was Koduth Bloom formed?"
    assert CALL_OVER not in session.act(tool_action("answer", "Lilunirn")) and session.reward == 1.0
