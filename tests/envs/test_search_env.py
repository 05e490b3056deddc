"""``SearchEnv``'s boundary: the config it is given, the agents it is asked about, reset options."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from maopd.base.config import ConfigError
from maopd.envs import cascade_search_v1, hierarchical_search_v1
from maopd.envs.retrieval.bm25 import BM25Retriever
from maopd.envs.search_env import SearchEnvConfig
from tests.fixture import FIXTURE_DIR, load_fixture

CORPUS, QUESTIONS = load_fixture()
RETRIEVER = BM25Retriever(CORPUS)


def test_the_callers_config_is_never_changed():
    config = SearchEnvConfig(topk=2)
    before = asdict(config)
    with pytest.raises(ConfigError, match="topk"):
        hierarchical_search_v1.raw_env(config=config, retriever=RETRIEVER, questions=QUESTIONS, topk=0)
    assert asdict(config) == before
    env = hierarchical_search_v1.raw_env(
        config=config, corpus=FIXTURE_DIR / "corpus.jsonl", questions=QUESTIONS, topk=5, max_rounds=2
    )
    assert (env.config.topk, env.config.max_rounds, env.config.corpus) == (5, 2, str(FIXTURE_DIR / "corpus.jsonl"))
    assert asdict(config) == before


def test_an_unknown_argument_is_a_type_error():
    with pytest.raises(TypeError, match="unknown argument 'topx'"):
        hierarchical_search_v1.raw_env(retriever=RETRIEVER, questions=QUESTIONS, topx=3)


@pytest.mark.parametrize("module", [hierarchical_search_v1, cascade_search_v1])
def test_observing_an_unknown_agent_names_the_agents(module):
    env = module.raw_env(retriever=RETRIEVER, questions=QUESTIONS)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"unknown agent 'mallory'; this environment's agents are \["):
        env.observe("mallory")
    with pytest.raises(ValueError, match="unknown agent 'mallory'"):
        env.turn("mallory")


def test_an_out_of_range_question_index_is_a_user_error():
    env = hierarchical_search_v1.raw_env(retriever=RETRIEVER, questions=QUESTIONS)
    with pytest.raises(ConfigError, match=rf"question_index.*\[0, {len(QUESTIONS) - 1}\]"):
        env.reset(options={"question_index": 99999})
