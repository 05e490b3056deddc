"""The judge gate of ``maopd tune judge``: classifier figures, the balanced set, P(yes)."""

from __future__ import annotations

import math

import pytest

from maopd.envs.prompts import judgement_text
from maopd.envs.synthwiki import load_default_world
from maopd.envs.synthwiki.judge_labels import judge_examples
from maopd.envs.synthwiki.knowledge import Knowledge
from maopd.evaluation.classifier_metrics import balanced_accuracy, roc_auc
from maopd.study.tuning import balanced_judge_figures, judge_gate
from maopd.training.config import CriticConfig
from maopd.training.critic import PromptedCritic, verdict_ids
from tests.training.test_divergence_judge_and_zero_rl import ScriptedJudge


def test_balanced_accuracy_and_roc_auc_match_hand_counts():
    labels = [True, True, True, False]
    assert balanced_accuracy(labels, [True, False, True, False]) == pytest.approx((2 / 3 + 1) / 2)
    assert balanced_accuracy(labels, [True] * 4) == balanced_accuracy(labels, [False] * 4) == 0.5
    assert balanced_accuracy([True, True], [True, False]) is None
    # pairs (positive, negative): 0.9>0.5, 0.5=0.5, 0.2<0.5
    assert roc_auc([True, True, True, False], [0.9, 0.5, 0.2, 0.5]) == pytest.approx((1 + 0.5 + 0) / 3)
    assert roc_auc([True, False], [0.1, 0.9]) == 0.0 and roc_auc([False, False], [0.1, 0.9]) is None


@pytest.fixture(scope="module")
def examples():
    world = load_default_world(0, "tiny")
    return judge_examples(world.splits["dev"], Knowledge(d.text for d in world.corpus.documents), seed=0, limit=60)


def test_a_constant_judge_has_balanced_accuracy_one_half_and_a_perfect_one_passes(examples, monkeypatch):
    monkeypatch.setattr(
        "maopd.training.critic.prompt_ids", lambda tokenizer, messages: [0]
    )  # scripted judges read none
    always = PromptedCritic(ScriptedJudge([judgement_text(True)] * len(examples)), CriticConfig())
    figures = balanced_judge_figures(always, examples)
    assert figures["examples"] == 60 and figures["negatives"] == 30
    assert figures["balanced_accuracy"] == 0.5 and figures["true_positive_rate"] == 1.0
    assert set(figures["yes_rate_by_kind"].values()) == {1.0}
    perfect = PromptedCritic(ScriptedJudge([judgement_text(e.useful) for e in examples]), CriticConfig())
    figures = balanced_judge_figures(perfect, examples)
    assert figures["balanced_accuracy"] == 1.0 and figures["yes_rate_by_kind"]["off_entity"] == 0.0
    assert judge_gate(figures, judge_rate=0.5)["met"] is False  # 30 negatives < 100
    assert judge_gate({**figures, "negatives": 100}, judge_rate=0.5)["met"] is True
    gate = judge_gate({**figures, "negatives": 100}, judge_rate=0.95)
    assert gate["checks"] == {"balanced_accuracy": True, "negatives": True, "judge_rate": False}


def test_p_yes_is_the_first_verdict_token_probability_of_yes_over_no(models):
    from maopd.evaluation.solvers import model_policy

    policy = model_policy(str(models / "pi0"))
    yes, no = verdict_ids(policy.tokenizer, True), verdict_ids(policy.tokenizer, False)
    assert policy.tokenizer.decode(yes).startswith(judgement_text(True))
    assert policy.tokenizer.decode(no).startswith(judgement_text(False))
    critic = PromptedCritic(policy, CriticConfig())
    items = [("Q?", "Where was Orlen Vask born?", "Orlen Vask was born in Tarvel."), ("Q?", "Where?", "")]
    probabilities = critic.yes_probabilities(items)
    assert len(probabilities) == 2 and all(0.0 < p < 1.0 and math.isfinite(p) for p in probabilities)
    assert probabilities[0] != probabilities[1]
