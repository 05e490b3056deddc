"""Reward formulas on hand-computed values."""

import pytest

from maopd.envs import cascade_search_v1
from maopd.envs import rewards as R
from maopd.envs.datasets import Question
from maopd.envs.episode import run_episode
from maopd.envs.policy import AgentOutput


@pytest.mark.parametrize(
    "prediction, reference, expected",
    [
        ("The Beatles", "beatles", 1.0),
        ("  Tarvel. ", "tarvel", 1.0),
        ("“Lomerin”", "Lomerin", 1.0),
        ("an apple", "apple", 1.0),
        ("Tarvel City", "Tarvel", 0.0),
        ("", "Tarvel", 0.0),
        (None, "Tarvel", 0.0),
    ],
)
def test_exact_match(prediction, reference, expected):
    assert R.exact_match(prediction, [reference]) == expected


def test_exact_match_against_every_reference():
    assert R.exact_match("NYC", ["New York City", "nyc"]) == 1.0


class Answers:
    """Searchers report at once; the Answerer writes ``answer``."""

    def __init__(self, answer):
        self.answer = answer

    def act(self, turns):
        return [AgentOutput([self.answer if t.role == "answerer" else "<report>x</report>"]) for t in turns]


@pytest.mark.parametrize("answer, score", [("<answer>Paris</answer><answer>Tarvel</answer>", 1.0), ("Tarvel", 0.0)])
def test_a_candidate_is_scored_on_its_last_answer_tag(answer, score):
    question = Question("q1", "Where was Orlen Vask born?", ("Tarvel",))
    record = run_episode(cascade_search_v1.env(num_candidates=1), Answers(answer), options={"question": question})
    assert record.candidate_scores == [score]


def test_search_bonus():
    assert R.search_bonus(0, True) == 0.0
    assert R.search_bonus(1, True) == 0.5
    assert R.search_bonus(2, True) == 1.0
    assert R.search_bonus(5, True) == 1.0
    assert R.search_bonus(3, False) == 0.0


def test_role_rewards():
    assert R.searcher_reward(1.0, 0.5, False) == pytest.approx(0.95)
    assert R.searcher_reward(1.0, 1.0, True) == -1.0
    assert R.leader_reward(1.0, 3, False) == pytest.approx(0.9 + 0.1 * 3 / 6)
    assert R.leader_reward(0.0, 9, False) == pytest.approx(0.1)
    assert R.assign_bonus(0) == 0.0 and R.assign_bonus(6) == 1.0 and R.assign_bonus(7) == 1.0
    assert R.answerer_reward(1.0, False) == 1.0 and R.answerer_reward(0.0, True) == -1.0
    assert R.team_outcome([0.0, 1.0, 0.0]) == 1.0 and R.team_outcome([]) == 0.0
