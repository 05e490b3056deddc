"""Option-level action mode: same workflow as text mode, finite masked menus, numeric observations."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, state_test

from maopd.agents.expert_team import expert_team
from maopd.envs import cascade_search_v1, hierarchical_search_v1, orchestra_search_v1
from maopd.envs.episode import run_episode
from maopd.envs.option.menus import MENU_SIZE, expert_choice, mentions
from maopd.envs.option.scenarios import get_scenario
from maopd.envs.option.wrapper import (
    OBSERVATION_SIZE,
    option_env,
    option_parallel_env,
    play_options,
    state_names,
)
from maopd.envs.synthwiki.questions import KINDS, question_kind
from maopd.envs.workflows import option_workflows

TEXT_ENVS = {"cascade": cascade_search_v1, "hierarchical": hierarchical_search_v1}
SAME_FIELDS = (
    "subtasks",
    "reports",
    "selected_reports",
    "searches",
    "candidates",
    "rewards",
    "counters",
    "format_errors",
)


def play(env, choose, question_index):
    """Play one episode choosing with ``choose(env, agent)``; return the record and the menus seen."""
    seen = []

    def act(agent, observation):
        seen.append((agent, env.menu(agent), observation))
        return choose(env, agent)

    return play_options(env, act, {"question_index": question_index}), seen


@pytest.mark.parametrize("workflow", ["cascade", "hierarchical"])
def test_expert_choices_reproduce_the_scripted_expert_team_exactly(workflow):
    option = option_env(workflow, split="test")
    text = TEXT_ENVS[workflow].env(split="test")
    team = expert_team()
    ems = []
    for i in range(30):
        record, _ = play(option, lambda env, agent: expert_choice(env.menu(agent)), i)
        reference = run_episode(text, team, options={"question_index": i})
        for name in SAME_FIELDS:
            assert getattr(record, name) == getattr(reference, name), (i, name)
        ems.append(record.rewards.em)
    assert np.mean(ems) >= 0.95  # the expert team's accuracy on SynthWiki (docs/synthwiki.md)


@pytest.mark.parametrize("workflow", ["cascade", "hierarchical"])
def test_observations_are_fixed_size_features_with_a_mask_matching_the_menu(workflow):
    env = option_env(workflow, split="test")
    rng = np.random.default_rng(0)
    for i in range(10):
        _, seen = play(env, lambda env, agent: int(rng.choice(np.flatnonzero(env.observe(agent)["action_mask"]))), i)
        for agent, menu, obs in seen:
            assert env.observation_space(agent).contains(obs)
            assert obs["observations"].shape == (OBSERVATION_SIZE,)
            assert obs["action_mask"].sum() == len(menu) and 1 <= len(menu) <= MENU_SIZE
            assert len({o.text for o in menu}) == len(menu)
            assert sum(o.hint for o in menu) <= 1 or agent == "answerer"
    # A waiting agent has no options.
    env.reset(options={"question_index": 0})
    waiting = [a for a in env.agents if a != env.agent_selection]
    assert all(env.observe(a)["action_mask"].sum() == 0 for a in waiting)


def test_the_chosen_option_is_the_exact_text_the_environment_records():
    env = option_env("cascade", split="test")
    env.reset(options={"question_index": 3})
    menu = env.menu("searcher_0")
    env.step(1)
    assert env.unwrapped.searcher_calls[0].outputs == [menu[1].text]


@pytest.mark.parametrize("bad", [MENU_SIZE + 3, -1, "2", 2.0, True, None])
def test_invalid_choices_are_recorded_format_failures_and_the_episode_still_ends(bad):
    env = option_env("hierarchical", split="test", max_steps=6)
    env.reset(options={"question_index": 0})
    env.step(bad)
    record, _ = play_on(env)
    assert record.counters.format_failures >= 1
    assert record.format_errors[0].agent == "leader"


def play_on(env):
    """Finish the current episode with the last option of every menu."""
    while env.agents:
        agent = env.agent_selection
        env.step(None if env.terminations[agent] else len(env.menu(agent)) - 1)
    return env.unwrapped.record, None


def test_masked_slot_is_a_format_failure():
    env = option_env("cascade", split="test")
    env.reset(options={"question_index": 0})
    mask = env.observe("searcher_0")["action_mask"]
    env.step(int(np.flatnonzero(mask == 0)[0]))
    assert env.unwrapped.counters.format_failures == 1


def test_mentions_skip_template_words_and_passage_ranks():
    assert mentions("[1] Dekuveth River: Which city is 2,684 km from University of Brask?") == [
        "Dekuveth River",
        "2,684 km",
        "University of Brask",
    ]


def test_menus_without_the_world_grammar_still_offer_generic_options():
    question = {"id": "q", "question": "Who painted the Night Watch?", "golden_answers": ["Rembrandt"]}
    env = option_env("hierarchical", split="test", questions=[question])
    env.reset()
    labels = [o.label for o in env.menu("leader")]
    assert "Who painted the Night Watch?" in labels and "all reports" in labels


@pytest.mark.parametrize("workflow", ["cascade", "hierarchical"])
def test_pettingzoo_api(workflow):
    api_test(option_env(workflow, split="test"), num_cycles=30)
    parallel_api_test(option_parallel_env(workflow, split="test"), num_cycles=30)


def test_a_workflow_has_an_option_mode_when_every_role_of_its_declaration_names_a_menu():
    assert set(option_workflows()) >= {"cascade", "hierarchical", "orchestra"} and "single" not in option_workflows()
    with pytest.raises(ValueError, match=r"workflow='single' has no option mode; workflows whose every role"):
        option_env("single")
    # another paper's team, its Verifier's two verdicts declared as its role's menu
    option, text, team = option_env("orchestra", split="test"), orchestra_search_v1.env(split="test"), expert_team()
    api_test(option, num_cycles=30)
    parallel_api_test(option_parallel_env("orchestra", split="test"), num_cycles=30)
    for i in range(10):
        record, seen = play(option, lambda env, agent: expert_choice(env.menu(agent)), i)
        reference = run_episode(text, team, options={"question_index": i})
        assert all(getattr(record, name) == getattr(reference, name) for name in SAME_FIELDS), i
        verdicts = [sorted(o.label for o in menu) for agent, menu, _ in seen if agent == "verifier"]
        assert verdicts and all(labels == ["no", "yes"] for labels in verdicts)


# ----- the global state ----------------------------------------------------------------------------
@pytest.mark.parametrize("workflow", ["cascade", "hierarchical"])
@pytest.mark.parametrize("scenario", ["synthwiki_v1", "lazy_searcher_v1"])
def test_every_state_of_random_episodes_is_a_fixed_size_vector_in_the_state_space(scenario, workflow):
    env = get_scenario(scenario).make_env("train", workflow)
    size = len(state_names(env.unwrapped))
    assert env.state_space.shape == (size,) and size == {"cascade": 20, "hierarchical": 33}[workflow]
    rng = np.random.default_rng(0)
    seen = set()
    for i in range(4):
        env.reset(options={"question_index": i})
        while True:
            state = env.state()
            assert state.dtype == np.float32 and state.shape == (size,) and env.state_space.contains(state)
            seen.add(state.tobytes())
            if not env.agents:
                break
            agent = env.agent_selection
            mask = env.observe(agent)["action_mask"]
            env.step(None if env.terminations[agent] else int(rng.choice(np.flatnonzero(mask))))
    assert len(seen) > 8  # the state moves with the episode


@pytest.mark.parametrize("workflow", ["cascade", "hierarchical"])
def test_pettingzoos_state_test_passes_on_both_apis(workflow):
    state_test(option_env(workflow, split="test"), option_parallel_env(workflow, split="test"), num_cycles=30)
    parallel = option_parallel_env(workflow, split="test")
    parallel.reset(options={"question_index": 0})
    assert parallel.state_space == option_env(workflow, split="test").state_space
    assert parallel.state_space.contains(parallel.state())


def test_the_state_tells_team_situations_apart():
    env = option_env("hierarchical", split="test")
    names = state_names(env.unwrapped)

    def value(name):
        return float(env.state()[names.index(name)])

    def choose(agent, kind):
        return next(i for i, option in enumerate(env.menu(agent)) if option.kind == kind)

    kinds = {}
    for i in range(40):
        env.reset(options={"question_index": i})
        kinds.setdefault(question_kind(env.unwrapped.question), env.state())
    # the first states of questions of different kinds differ, and only in the kind
    first = list(kinds.values())
    assert len(first) == len(KINDS)
    assert {names[j] for state in first for j in np.flatnonzero(state != first[0])} == set(KINDS)

    env.reset(options={"question_index": 0})
    assert (value("acting:leader"), value("step"), value("rounds")) == (1.0, 0.0, 0.0)
    env.step(choose("leader", "delegate"))
    assert value("acting:leader") == 0.0 and value("rounds") > 0 and value("searcher_0:active") == 1.0
    wave, before = env.unwrapped.acting_agents(), env.state()
    env.step(choose(wave[0], "search"))
    assert not np.array_equal(env.state(), before)  # the next Searcher acts, or the step is over
    for agent in wave[1:]:
        env.step(choose(agent, "search"))
    assert value("searches") > 0 and value("searcher_0:search_steps") > 0 and value("reports") == 0.0

    # the expert team finds every supporting passage, reports facts and hands them over
    record, _ = play(env, lambda env, agent: expert_choice(env.menu(agent)), 0)
    assert record.rewards.em == 1.0
    assert value("evidence") == 1.0 and value("reports_with_facts") > 0 and value("answering") == 1.0
    assert value("acting:answerer") == 0.0 and value("selected") > 0


def test_state_before_reset_is_an_error():
    with pytest.raises(RuntimeError, match="reset"):
        option_env("cascade", split="test").state()
