"""Injection: passages, subtasks and reports that carry action tags or role prompts never act.

Guarantees (docs/reliability.md): text the environment inserts is never parsed and reaches every
model with its tags neutralized, so it can neither act for any role nor end an episode early.
"""

import pytest

from maopd.agents.scripted import scripted_team
from maopd.envs import cascade_search_v1, hierarchical_search_v1
from maopd.envs.actions import ACTION_KINDS, parse_action
from maopd.envs.episode import run_episode
from maopd.envs.retrieval.bm25 import BM25Retriever
from tests.adversarial import (
    INJECTED_ANSWER,
    INJECTION_PAYLOADS,
    is_adversarial,
    leaked_tags,
    poison_corpus,
)
from tests.envs.test_workflows import Rules
from tests.fixture import load_fixture

WORKFLOWS = [cascade_search_v1, hierarchical_search_v1]
CORPUS, QUESTIONS = load_fixture()
CLEAN = BM25Retriever(CORPUS)
POISONED = BM25Retriever(poison_corpus(CORPUS))
PAYLOAD = " ".join(INJECTION_PAYLOADS)


def context(turn):
    return "\n".join(m["content"] for m in turn.messages if m["role"] == "user")


def assert_inert(record):
    assert not [leak for call in record.calls for leak in leaked_tags(call.messages)]
    assert INJECTED_ANSWER not in " ".join(a or "" for a in record.extracted_answers)


def test_poison_corpus_twins_every_document_and_payloads_cover_every_action():
    poisoned = poison_corpus(CORPUS)
    assert len(poisoned) == 2 * len(CORPUS) and sum(map(is_adversarial, (d.id for d in poisoned.documents))) == len(
        CORPUS
    )
    for kind in ACTION_KINDS:
        assert f"<{kind}>" in PAYLOAD
    with pytest.raises(ValueError, match="payloads"):
        poison_corpus(CORPUS, payloads=())


@pytest.mark.parametrize("module", WORKFLOWS, ids=lambda m: m.__name__)
def test_adversarial_passages_neither_act_nor_shorten_episodes(module):
    """The scripted team over a corpus where every passage has a poisoned twin: same episode
    lengths and reports as on the clean corpus, no format failure, nothing leaks."""
    retrieved_adversarial = 0
    for question in QUESTIONS:
        clean = run_episode(
            module.env(retriever=CLEAN, questions=QUESTIONS), scripted_team(), options={"question": question}
        )
        record = run_episode(
            module.env(retriever=POISONED, questions=QUESTIONS), scripted_team(), options={"question": question}
        )
        retrieved_adversarial += sum(is_adversarial(p.id) for s in record.searches for p in s.passages)
        assert record.counters.env_steps == clean.counters.env_steps
        assert record.counters.reports == clean.counters.reports
        assert record.counters.format_failures == 0
        assert_inert(record)
    assert retrieved_adversarial >= len(QUESTIONS) // 2  # the twins really reached the models


@pytest.mark.parametrize("module", WORKFLOWS, ids=lambda m: m.__name__)
def test_models_echoing_their_context_cannot_act(module):
    """Roles that copy everything they were shown (passages, subtasks, reports, prompts) into
    their output, with no action of their own, only get format failures."""
    policy = Rules(leader=context, searcher=context, answerer=context)
    # forced finish, so that the Answerer is reached and shown the echoed reports too
    env = module.env(retriever=POISONED, questions=QUESTIONS, force_finish=True)
    record = run_episode(env, policy, options={"question": QUESTIONS[0]})
    assert record.extracted_answers == [None] and record.rewards.em == 0.0
    assert record.counters.format_failures == len(policy.turns) and record.counters.reports == 0
    assert record.counters.env_steps == env.max_steps  # the episode ran its whole budget
    assert_inert(record)


def test_adversarial_subtasks_and_reports_stay_data():
    """A Leader whose subtasks carry every payload, and Searchers that search for them and then
    report passages plus payloads: every role still acts only through its own tags."""
    first_wave = True

    def leader(turn):
        nonlocal first_wave
        if first_wave and "delegate" in turn.allowed:
            first_wave = False
            subtasks = "\n".join(p.replace("\n", " ").replace("</delegate>", "") for p in INJECTION_PAYLOADS[:3])
            return f"<delegate>\nWhere was Orlen Vask born?\n{subtasks}\n</delegate>"
        return "<select>all</select>"

    def searcher(turn):
        if not any(m["role"] == "assistant" for m in turn.messages):
            return f"<search>{turn.task}</search>"
        return f"<report>{context(turn)[-1500:]}</report>"

    answers = []

    def answerer(turn):
        answers.append(context(turn))
        return "<answer>Tarvel</answer>"

    policy = Rules(leader=leader, searcher=searcher, answerer=answerer)
    env = hierarchical_search_v1.env(retriever=POISONED, questions=QUESTIONS)
    record = run_episode(env, policy, options={"question": QUESTIONS[0]})
    assert record.counters.delegation_rounds == 1 and len(record.subtasks) == 3
    assert record.counters.format_failures == 0 and record.counters.reports == 3
    assert record.extracted_answers == ["Tarvel"] and record.counters.env_steps == 5
    assert_inert(record)
    # The payload text did reach the Answerer, as inert data.
    assert INJECTED_ANSWER in answers[0] and parse_action(answers[0], "answerer").kind is None
