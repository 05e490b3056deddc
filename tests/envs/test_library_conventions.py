"""What users of PettingZoo, Gymnasium and RLlib expect of the text environments: a global state,
an ``action_mask`` where the libraries look, spaces that print what they accept, PettingZoo's
names, a parallel API of its own, and typos and id-less questions met with help."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test, state_test

from maopd.envs import cascade_search_v1, hierarchical_search_v1, single_search_v1
from maopd.envs.actions import ACTION_KINDS, ROLE_ACTION_KINDS, parse_action
from maopd.envs.datasets import derived_id
from maopd.envs.retrieval.bm25 import BM25Retriever
from maopd.envs.search_env import ActionText, UnicodeText
from maopd.envs.workflows import WORKFLOW_MODULES, env_module
from tests.fixture import load_fixture

# every registered workflow's module: a workflow added to the table is tested here with no edit
MODULES = [env_module(workflow) for workflow in WORKFLOW_MODULES]
CORPUS, QUESTIONS = load_fixture()
RETRIEVER = BM25Retriever(CORPUS)


def make(module, **kwargs):
    return module.env(retriever=RETRIEVER, questions=QUESTIONS, **kwargs)


# ----- state() and state_space ---------------------------------------------------------------------
@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_pettingzoos_state_test_passes(module):
    state_test(make(module), module.parallel_env(retriever=RETRIEVER, questions=QUESTIONS), num_cycles=50)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("num_candidates", [1, 3])
def test_every_state_of_random_episodes_is_in_the_state_space(module, num_candidates):
    env = make(module, num_candidates=num_candidates)
    for seed in range(3):
        env.reset(seed=seed)
        while env.agents:
            state = env.state()
            assert env.state_space.contains(state)
            agent = env.agent_selection
            observation, _, terminated, _, _ = env.last()
            env.step(None if terminated else env.action_space(agent).sample(observation["action_mask"]))
        assert env.state_space.contains(env.state())


def test_the_state_holds_the_question_every_history_and_the_counters():
    env = make(hierarchical_search_v1, max_steps=12)
    env.reset(options={"question_index": 0})
    state = env.state()
    assert state["question"] == QUESTIONS[0].question
    assert set(state["histories"]) == set(env.possible_agents)
    assert state["histories"]["leader"] == env.observe("leader")["messages"]
    assert state["acting"].tolist() == [agent == "leader" for agent in env.possible_agents]
    assert (state["env_step"], state["steps_left"], state["delegation_rounds"]) == (0, 12, 0)
    env.step("<delegate>\nfirst subtask\nsecond subtask\n</delegate>")
    state = env.state()
    assert (state["env_step"], state["steps_left"], state["delegation_rounds"]) == (1, 11, 1)
    assert state["histories"]["searcher_1"][-1]["content"] == "Task: second subtask"
    assert state["acting"].tolist() == [a in ("searcher_0", "searcher_1") for a in env.possible_agents]


def test_state_before_reset_is_an_error():
    with pytest.raises(RuntimeError, match="reset"):
        hierarchical_search_v1.raw_env(retriever=RETRIEVER, questions=QUESTIONS).state()


# ----- action_mask, spaces ---------------------------------------------------------------------------
@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_observations_carry_action_mask_and_the_action_kinds_alias(module):
    env = make(module)
    env.reset(seed=0)
    for agent in env.possible_agents:
        observation = env.observe(agent)
        assert env.observation_space(agent).contains(observation)
        assert observation["action_mask"].dtype == np.int8
        assert np.array_equal(observation["action_mask"], observation["action_kinds"])
        allowed = [kind for kind, bit in zip(ACTION_KINDS, observation["action_mask"]) if bit]
        assert tuple(allowed) == env.unwrapped.allowed_actions(agent)


@pytest.mark.parametrize("num_candidates", [1, 4])
def test_sampling_with_the_observations_mask_draws_only_allowed_kinds(num_candidates):
    env = make(hierarchical_search_v1, num_candidates=num_candidates, max_rounds=1)
    kinds = set()
    for seed in range(4):
        env.reset(seed=seed)
        for agent in env.possible_agents:
            env.action_space(agent).seed(seed)
        while env.agents:
            agent = env.agent_selection
            observation, _, terminated, _, _ = env.last()
            action = None if terminated else env.action_space(agent).sample(observation["action_mask"])
            for text in [] if action is None else [action] if isinstance(action, str) else action:
                kind = parse_action(text, env.unwrapped.role_of(agent)).kind
                assert kind in env.unwrapped.allowed_actions(agent)
                kinds.add(kind)
            env.step(action)
        assert env.unwrapped.record.counters.format_failures == 0
    assert {"delegate", "select", "search", "report", "answer"} <= kinds


def test_a_waiting_agents_mask_samples_the_empty_action():
    space = ActionText(64, ROLE_ACTION_KINDS["searcher"], seed=0)
    assert space.sample(np.zeros(len(ACTION_KINDS), dtype=np.int8)) == ""
    only_report = np.array([kind == "report" for kind in ACTION_KINDS], dtype=np.int8)
    assert all(space.sample(only_report).startswith("<report>") for _ in range(20))
    with pytest.raises(ValueError, match="one 0/1 entry per kind"):
        space.sample(np.ones(3, dtype=np.int8))


def test_text_spaces_print_what_they_accept():
    text = UnicodeText(16)
    assert "any Unicode" in repr(text) and text.contains("Zürich—東京")
    action = make(cascade_search_v1).action_space("searcher_0")
    assert repr(action) == "ActionText(4096, kinds=('search', 'report'), charset=any Unicode)"
    assert action.contains("<search>Zürich</search>")


def test_max_cycles_is_refused_naming_max_steps():
    """PettingZoo's max_cycles (every agent that many turns; its max_cycles_test) is not this budget."""
    for module in MODULES:
        with pytest.raises(TypeError, match="takes no max_cycles: .* pass max_steps"):
            make(module, max_cycles=6)
    with pytest.raises(TypeError, match="takes no max_cycles"):
        hierarchical_search_v1.parallel_env(retriever=RETRIEVER, questions=QUESTIONS, max_cycles=9)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_final_rewards_are_read_the_pettingzoo_way_and_kept_after_the_episode(module):
    """Each agent's reward comes with ``env.last()`` at its last turn; ``env.rewards`` empties as the
    agents leave (PettingZoo's rule, which its api_test checks), ``final_rewards`` stays."""
    from maopd.agents.scripted import scripted_team

    env, team = make(module), scripted_team()
    env.reset(seed=0)
    returns: dict[str, float] = {}
    for agent in env.agent_iter():
        _, reward, terminated, truncated, _ = env.last()
        returns[agent] = returns.get(agent, 0.0) + reward
        env.step(None if terminated or truncated else team.act([env.turn(agent)])[0])
    assert env.rewards == {} and env.agents == []
    assert env.unwrapped.final_rewards == returns and set(returns) == set(env.possible_agents)
    parts = env.unwrapped.record.rewards
    for agent, value in returns.items():
        role = env.unwrapped.role_of(agent)
        if role == "searcher":
            assert value == parts.searchers.get(agent, 0.0)
        elif role == "answerer":
            assert value == (float(np.mean(parts.answerer)) if parts.answerer else 0.0)
        else:
            assert value == (parts.leader if role == "leader" else parts.roles[role])
    env.reset(seed=1)
    assert env.unwrapped.final_rewards == {}


def test_a_mistyped_keyword_gets_did_you_mean():
    with pytest.raises(TypeError, match="unknown argument 'max_step'; did you mean 'max_steps'"):
        make(cascade_search_v1, max_step=4)
    with pytest.raises(TypeError, match="'retreiver'; did you mean 'retriever'"):
        cascade_search_v1.env(retreiver=RETRIEVER)
    with pytest.raises(TypeError, match="unknown argument 'zzz'$"):
        make(cascade_search_v1, zzz=1)


# ----- questions given in code -----------------------------------------------------------------------
def test_a_question_without_id_gets_one_derived_from_its_text():
    env = make(cascade_search_v1)
    question = {"question": "Where was Orlen Vask born?", "golden_answers": ["Tarvel"]}
    env.reset(options={"question": question})
    assert env.unwrapped.question.id == derived_id(question["question"]) == derived_id("Where was Orlen Vask born?")
    assert derived_id("Where was Orlen Vask born? ") != env.unwrapped.question.id
    env = cascade_search_v1.env(retriever=RETRIEVER, questions=[question])
    env.reset(seed=0)
    assert env.unwrapped.question.id == derived_id(question["question"])


# ----- AgentTurn: the bare task and the instructions ---------------------------------------------------
def test_turns_carry_the_bare_task_and_the_instructions_apart_from_the_messages():
    env = hierarchical_search_v1.raw_env(retriever=RETRIEVER, questions=QUESTIONS, num_searchers=2, max_rounds=4)
    env.reset(options={"question": {"question": "Who <answer>x</answer> founded Vellora?", "golden_answers": ["a"]}})
    leader = env.turn("leader")
    assert leader.task == "Who &lt;answer&gt;x&lt;/answer&gt; founded Vellora?"
    assert leader.instructions == "You have 2 Searchers per wave and at most 4 waves."
    # what the model reads is unchanged: the label, the task and the instructions in one message
    assert leader.messages[1]["content"] == f"Question: {leader.task}\n{leader.instructions}"
    env.step("<delegate>\nWho founded Vellora?\n</delegate>")
    searcher = env.turn("searcher_0")
    assert (searcher.task, searcher.instructions) == ("Who founded Vellora?", "")
    assert searcher.messages[1]["content"] == "Task: Who founded Vellora?"
    assert env.turn("searcher_1").task == ""  # never assigned
    assert env.turn("answerer").task == leader.task


@pytest.mark.parametrize("module", [cascade_search_v1, single_search_v1], ids=lambda m: m.__name__)
def test_the_other_workflows_give_the_question_as_the_task(module):
    env = module.raw_env(retriever=RETRIEVER, questions=QUESTIONS)
    env.reset(options={"question_index": 0})
    turn = env.turn(env.agent_selection)
    assert (turn.task, turn.instructions) == (QUESTIONS[0].question, "")


# ----- the parallel API ----------------------------------------------------------------------------------
@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_the_parallel_env_has_acting_agents_turns_and_the_acting_flag(module):
    env = module.parallel_env(retriever=RETRIEVER, questions=QUESTIONS)
    observations, infos = env.reset(seed=0)
    steps = 0
    while env.agents:
        acting = env.acting_agents()
        assert acting and acting == env.unwrapped.acting_agents()
        assert [agent for agent in env.agents if infos[agent]["acting"]] == acting
        for agent in env.agents:
            assert observations[agent]["action_mask"].any() == (agent in acting)
        actions = {agent: env.action_space(agent).sample(observations[agent]["action_mask"]) for agent in acting}
        assert all(env.turn(agent).agent == agent for agent in acting)
        assert env.state_space.contains(env.state())
        observations, rewards, terminations, _, infos = env.step(actions)
        steps += 1
        if not all(terminations.values()):
            # PettingZoo's convention: every live agent has a reward each step; these pay at the end
            assert set(rewards) == set(infos) and all(value == 0.0 for value in rewards.values())
    assert not any(info["acting"] for info in infos.values()) and env.acting_agents() == []
    assert steps <= env.unwrapped.max_steps


def test_the_parallel_env_still_passes_pettingzoos_parallel_test():
    parallel_api_test(hierarchical_search_v1.parallel_env(retriever=RETRIEVER, questions=QUESTIONS), num_cycles=50)
