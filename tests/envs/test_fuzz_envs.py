"""Property-based fuzzing of both environments with hypothesis-driven policies (docs/reliability.md).

Every output of every role, the question, the golden answers and the environment configuration
are drawn by hypothesis, over a fixture corpus with adversarial twins of every passage. After
each episode the invariants of docs/reliability.md are checked against an independent oracle:
the format failures the parser sees in what the policy wrote.
"""

import json
import math
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maopd.envs import cascade_search_v1, hierarchical_search_v1, single_search_v1
from maopd.envs.actions import ROLE_ACTION_KINDS, parse_action
from maopd.envs.datasets import Question
from maopd.envs.policy import AgentOutput
from maopd.envs.prompts import LAST_TURN_NOTICE, ROLE_PROMPTS
from maopd.envs.records import WorkflowRecord
from maopd.envs.retrieval.bm25 import BM25Retriever
from maopd.envs.search_env import MAX_OBSERVATION_CHARS
from tests.adversarial import INJECTION_PAYLOADS, leaked_tags, poison_corpus
from tests.envs.test_fuzz_actions import (
    HUGE_OUTPUTS,
    MANY_SUBTASKS,
    SPECIAL_FRAGMENTS,
    TAG_VARIANTS,
    fuzz_settings,
    garbage,
    unicode_text,
)
from tests.fixture import load_fixture

CORPUS = poison_corpus(load_fixture()[0])
RETRIEVER = BM25Retriever(CORPUS)
NON_TEXT = (None, 7, 3.5, b"<answer>bytes</answer>", ["<answer>in a list</answer>"])
FRAGMENTS = (*TAG_VARIANTS, *SPECIAL_FRAGMENTS, *INJECTION_PAYLOADS, *ROLE_PROMPTS.values(), *LAST_TURN_NOTICE.values())
RARE_OUTPUTS = (*HUGE_OUTPUTS, MANY_SUBTASKS)


def compose_output(rng: random.Random, role: str) -> object:
    """One output from a seed: fragments and random Unicode (surrogates included), maybe a valid
    action of the role at the end, rarely a 1 MB output or a non-text object.

    Hypothesis draws only the seed (cheap, and shrinks to simple outputs); the parser tests in
    test_fuzz_actions.py explore the text space itself with full strategies.
    """
    roll = rng.random()
    if roll < 0.03:
        return rng.choice(RARE_OUTPUTS)
    if roll < 0.06:
        return rng.choice(NON_TEXT)
    parts = []
    for _ in range(rng.randrange(6)):
        if rng.random() < 0.3:
            parts.append("".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(1, 12))))
        else:
            parts.append(rng.choice(FRAGMENTS))
    if rng.random() < 0.6:
        kind = rng.choice(ROLE_ACTION_KINDS[role])
        content = {"select": rng.choice(["all", "1", "2, 1", "9"]), "answer": rng.choice(["Tarvel", "", " x "])}
        parts.append(f"<{kind}>{content.get(kind, rng.choice(['Orlen Vask', ' ', '', 'a<b', 'Tarvel']))}</{kind}>")
    return "".join(parts)


# Dataset files are valid UTF-8: lone surrogates can only come from policy outputs.
def as_utf8(text):
    return text.encode("utf-8", "replace").decode()


questions = st.builds(
    Question,
    id=st.just("fuzz"),
    question=st.one_of(st.just("Where was Orlen Vask born?"), garbage.map(as_utf8)),
    golden_answers=st.lists(unicode_text.map(as_utf8), max_size=2).map(lambda answers: ("Tarvel", *answers)),
)


def configs(module):
    return st.fixed_dictionaries(
        {
            "max_steps": st.one_of(
                st.none(), st.integers(module.raw_env.min_steps, module.raw_env.default_max_steps + 3)
            ),
            "max_rounds": st.integers(1, 6),
            "num_searchers": st.integers(1, 4),
            "num_candidates": st.integers(1, 3),
            "topk": st.integers(1, 4),
            "max_action_chars": st.sampled_from([16, 100, 4096, 8192]),
            "max_passage_chars": st.sampled_from([16, 600]),
        }
    )


class DrawnPolicy:
    """Each output's seed is drawn by hypothesis (the seed also picks how many candidate texts come back);
    keeps what the environment will read, for the oracle."""

    def __init__(self, data):
        self.data = data
        self.acted = []  # (turn, texts as the environment will read them)

    def act(self, turns):
        results = []
        for turn in turns:
            rng = random.Random(self.data.draw(st.integers(0, 2**32 - 1)))
            count = rng.choice([turn.num_candidates, turn.num_candidates, 0, turn.num_candidates + 1])
            texts = [compose_output(rng, turn.role) for _ in range(count)]
            seen = [t if isinstance(t, str) else "" for t in texts][: turn.num_candidates]
            self.acted.append((turn, seen + [""] * (turn.num_candidates - len(seen))))
            results.append(AgentOutput(texts, input_tokens=1, output_tokens=count))
        return results


def play(env, policy, question):
    """A bounded driver: the episode must end within ``max_steps`` environment steps."""
    env.reset(seed=0, options={"question": question})
    for _ in range(env.max_steps):
        acting = env.acting_agents()
        if not acting:
            break
        for agent in acting:
            assert env.observation_space(agent).contains(env.observe(agent))
        for output in policy.act([env.turn(agent) for agent in acting]):
            env.step(output)
    assert not env.acting_agents(), "episode outlived its budget"
    for _ in env.possible_agents:
        if env.agents:
            env.step(None)
    assert not env.agents
    return env.record


def check_invariants(env, policy, record):
    config = env.config
    counters = record.counters
    # Budgets.
    assert counters.env_steps <= env.max_steps
    assert counters.delegation_rounds <= config.max_rounds
    assert max(Counter(s.wave for s in record.subtasks).values(), default=0) <= config.num_searchers
    assert all(len(search.passages) <= config.topk for search in record.searches)
    # the single agent's answer is one candidate; num_candidates is the Answerer's
    assert len(record.candidates) in (0, 1 if record.workflow == "single" else config.num_candidates)
    # Bounded: every output the record keeps is cut to max_action_chars, its length kept when cut.
    assert all(len(c) <= config.max_action_chars for c in record.candidates)
    for call in record.calls:
        assert all(len(output) <= config.max_action_chars for output in call.outputs)
        if call.output_chars is not None:
            assert len(call.output_chars) == len(call.outputs)
            assert all(n >= len(o) for n, o in zip(call.output_chars, call.outputs))
            assert any(n > config.max_action_chars for n in call.output_chars)
        assert all(len(m["content"]) <= MAX_OBSERVATION_CHARS for m in call.messages)
        assert all(len(m["content"]) <= config.max_action_chars for m in call.messages if m["role"] == "assistant")
        # Injection: nothing the environment inserted carries a live tag.
        assert not leaked_tags(call.messages), leaked_tags(call.messages)

    # Every format failure is counted, and only those.
    failed_calls = set()
    expected_failures = 0
    for turn, texts in policy.acted:
        for text in texts:
            if not parse_action(text, turn.role, turn.allowed, config.max_action_chars).valid:
                expected_failures += 1
                failed_calls.add(turn.call_id)
    assert counters.format_failures == len(record.format_errors) == expected_failures

    # Rewards stay in their documented ranges; a role with a format failure gets exactly -1.
    rewards = record.rewards
    assert rewards.em in (0.0, 1.0)
    answerer_texts = next((texts for turn, texts in policy.acted if turn.role == "answerer"), [])
    for text, reward in zip(answerer_texts, rewards.answerer, strict=True):
        failed = not parse_action(text, "answerer", ("answer",), config.max_action_chars).valid
        assert (reward == -1.0) == failed and (failed or 0.0 <= reward <= 1.0)
    searcher_ids = [call.call_id for call in record.calls if call.role == "searcher"]
    for call_id, reward in zip(searcher_ids, rewards.searcher_calls, strict=True):
        assert (reward == -1.0) == (call_id in failed_calls) and -1.0 <= reward <= 1.0
    solver = rewards.roles.get("solver")
    if solver is not None:
        assert (solver == -1.0) == ("solver" in failed_calls) and -1.0 <= solver <= 1.0
        assert solver in (-1.0, rewards.em)
    if rewards.leader is not None:
        assert (rewards.leader == -1.0) == ("leader" in failed_calls) and -1.0 <= rewards.leader <= 1.0
    assert all(math.isfinite(r) and -1.0 <= r <= 1.0 for r in env._cumulative_rewards.values())

    # The record is valid JSON, writable as UTF-8, and survives a round trip unchanged.
    text = json.dumps(record.to_json(), ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")
    assert WorkflowRecord.from_json(json.loads(text)) == record


@pytest.mark.slow
@pytest.mark.parametrize(
    "module", [cascade_search_v1, hierarchical_search_v1, single_search_v1], ids=lambda m: m.__name__
)
@fuzz_settings(1500)
@given(questions, st.data())
def test_environment_survives_any_output(module, question, data):
    env = module.env(retriever=RETRIEVER, questions=[question], **data.draw(configs(module)))
    policy = DrawnPolicy(data)
    check_invariants(env, policy, play(env, policy, question))


def test_lone_surrogates_are_replaced():
    """A lone surrogate in an output (possible in a JSON-decoded API answer) is replaced, so the
    record can be written as UTF-8."""
    env = cascade_search_v1.env(
        retriever=RETRIEVER, questions=[Question("s", "Where was Orlen Vask born?", ("Tarvel",))]
    )
    env.reset(seed=0)
    env.step("<search>Orlen\ud800 Vask</search>")
    env.step("<report>Tarvel \udfff</report>")
    env.step(["<answer>Tarvel\ud83d</answer>"])
    json.dumps(env.record.to_json(), ensure_ascii=False).encode("utf-8")
    assert env.record.reports[0].text == "Tarvel \ufffd" and env.record.searches[0].query == "Orlen\ufffd Vask"
