"""Demonstrations for supervised fine-tuning: scripted-team episodes, one chat per model call.

Each demonstration is the call's final chat history exactly as the environment built it (role
prompt, task, retrieved passages, the scripted outputs), so a model trained on it sees at
training time the format it will see at rollout time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from maopd.base.atomic import open_atomically
from maopd.envs.datasets import Question
from maopd.envs.episode import run_episode
from maopd.envs.policy import Policy
from maopd.envs.prompts import critic_message, judgement_text
from maopd.envs.records import CallRecord, WorkflowRecord
from maopd.envs.retrieval.base import Retriever
from maopd.envs.synthwiki.judge_labels import JudgeExample
from maopd.envs.synthwiki.knowledge import Knowledge, report_states_answer
from maopd.envs.workflows import env_module


def make_env(workflow: str, retriever: Retriever, questions: Sequence[Question]):
    """``workflow``'s environment (registered in ``maopd.envs.workflows``) over ``retriever``."""
    return env_module(workflow).env(retriever=retriever, questions=list(questions))


def call_chat(call: CallRecord) -> list[dict[str, str]]:
    """The call's messages, ending with its last output (the Answerer's is not in its history;
    the solver's answer, like every Searcher output, is)."""
    messages = list(call.messages)
    if call.outputs and (messages[-1]["role"] != "assistant" or messages[-1]["content"] != call.outputs[-1]):
        messages.append({"role": "assistant", "content": call.outputs[-1]})
    return messages


def judgements(record: WorkflowRecord, knowledge: Knowledge) -> Iterator[dict[str, Any]]:
    """The Prompted Critic's judge on each report of ``record``, as it should answer: yes exactly
    when the report states the answer to its sub-question (``knowledge`` holds the world's facts)."""
    for report in record.reports:
        useful = report_states_answer(report.task, report.text, knowledge)
        yield {
            "question_id": record.question_id,
            "workflow": record.workflow,
            "role": "critic",
            "call_id": f"critic@{report.agent}@w{report.wave}",
            "em": max(record.candidate_scores, default=0.0),
            "messages": [
                critic_message(record.question, report.task, report.text),
                {"role": "assistant", "content": judgement_text(useful)},
            ],
        }


def decidable_judgements(examples: Sequence[JudgeExample]) -> Iterator[dict[str, Any]]:
    """The Prompted Critic's judge on balanced examples of decidable labels
    (``maopd.envs.synthwiki.judge_labels``): yes exactly when the report states a fact about the
    sub-question's entity and asked relation. They come from no episode, so carry no workflow and no episode score."""
    for number, example in enumerate(examples):
        yield {
            "question_id": example.question_id,
            "workflow": None,
            "role": "critic",
            "call_id": f"critic@{example.kind}@{number}",
            "em": None,
            "messages": [
                critic_message(example.question, example.subquestion, example.report),
                {"role": "assistant", "content": judgement_text(example.useful)},
            ],
        }


def demonstrations(
    workflow: str,
    policy: Policy,
    retriever: Retriever,
    questions: Sequence[Question],
    successful_only: bool = True,
    judge_with: Knowledge | None = None,
) -> Iterator[dict[str, Any]]:
    """Play every question once and yield one demonstration per model call; with ``judge_with`` (the
    world's facts), also the critic's judgement of every report, of failed episodes too."""
    env = make_env(workflow, retriever, questions)
    for index in range(len(questions)):
        record = run_episode(env, policy, seed=index, options={"question_index": index})
        em = max(record.candidate_scores, default=0.0)
        if judge_with is not None:
            yield from judgements(record, judge_with)
        if successful_only and em < 1.0:
            continue
        for call in record.calls:
            yield {
                "question_id": record.question_id,
                "workflow": workflow,
                "role": call.role,
                "call_id": call.call_id,
                "em": em,
                "messages": call_chat(call),
            }


def write_demonstrations(rows: Iterator[dict[str, Any]], path: str | Path) -> int:
    count = 0
    with open_atomically(path) as handle:
        for row in rows:
            handle.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
            count += 1
    return count
