"""Stage II diagnostics: the Teacher–student divergence metrics, the
zero-advantage control (``AdvantageConfig.zero_rl``) and the Prompted Critic's judge figures."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from maopd.agents.sampling import Candidate
from maopd.base.config import ConfigError
from maopd.envs.actions import SEARCHER
from maopd.envs.records import CallRecord, Report, RewardParts, WorkflowRecord
from maopd.envs.rewards import report_has_gold
from maopd.training.advantages import AdvantageConfig, team_token_advantages
from maopd.training.config import CriticConfig
from maopd.training.critic import PromptedCritic
from maopd.training.divergence import decision_index, response_runs, searcher_divergence_metrics
from maopd.training.losses import PPOLossConfig, ppo_loss
from maopd.training.trainer import Trainer
from tests.training.test_trainer import scripted_batch, stage2_config  # noqa: F401  (a fixture, used by name)

# ----- Teacher–student divergence ------------------------------------------------------


def chars(text):
    return [ord(c) for c in text]


def decode_chars(ids):
    return "".join(chr(i) for i in ids)


def test_decision_token_is_where_the_output_commits_to_search_or_report():
    # one token per character: the decision token is the tag name's first letter
    text = "think first <search>Paris</search>"
    assert decision_index(chars(text), decode_chars) == text.index("<search>") + 1
    text = "done <report>Paris</report> <search>x</search>"
    assert decision_index(chars(text), decode_chars) == text.index("<report>") + 1
    assert decision_index(chars("no tag here </search>"), decode_chars) is None
    # multi-character tokens: "<" alone commits to nothing; the token holding "rep" does
    pieces = ["ok ", "<", "rep", "ort>", "Paris", "</report>"]
    vocab = {i: p for i, p in enumerate(pieces)}
    assert decision_index(list(vocab), lambda ids: "".join(vocab[i] for i in ids)) == 2
    pieces = ["<search>", "Paris"]  # a tag that is one token (the tiny tokenizer's added tokens)
    assert decision_index([0, 1], lambda ids: "".join(pieces[i] for i in ids)) == 0


def test_response_runs_are_the_generated_turns():
    assert response_runs(torch.tensor([0, 1, 1, 0, 0, 1, 0, 1])) == [(1, 3), (5, 6), (7, 8)]


def test_divergence_metrics_match_a_hand_computation(models, tmp_path, scripted_batch):  # noqa: F811
    trainer = Trainer(stage2_config(models, tmp_path))
    ppo_batch, metrics = trainer.prepare(copy.deepcopy(scripted_batch))
    tokens, old, teacher = ppo_batch.tokens, ppo_batch.old_logprobs, ppo_batch.teacher_logprobs
    vocab = trainer.tokenizer.get_vocab()
    tag_ids = {vocab["<search>"], vocab["<report>"]}
    k1, k3, decisions = [], [], []
    for row in range(ppo_batch.num_sequences):
        if int(ppo_batch.role_ids[row]) != SEARCHER:
            continue
        in_turn = False
        decided = False
        for t in range(tokens.input_ids.shape[1]):
            if not tokens.response_mask[row, t]:
                in_turn = False
                continue
            if not in_turn:
                in_turn, decided = True, False
            o, q = float(old[row, t]), float(teacher[row, t])
            k1.append(o - q)
            k3.append(math.exp(q - o) - 1 - (q - o))
            if not decided and int(tokens.input_ids[row, t]) in tag_ids:
                decisions.append(q - o)
                decided = True
    assert k1 and decisions
    assert metrics["teacher/searcher_kl_k1"] == pytest.approx(sum(k1) / len(k1), rel=1e-4, abs=1e-6)
    assert metrics["teacher/searcher_kl_k3"] == pytest.approx(sum(k3) / len(k3), rel=1e-4, abs=1e-6)
    assert metrics["teacher/decision_tokens"] == len(decisions)
    assert metrics["teacher/searcher_tokens"] == len(k1)
    assert metrics["teacher/decision_log_ratio"] == pytest.approx(sum(decisions) / len(decisions), rel=1e-4, abs=1e-6)
    assert metrics["teacher/searcher_kl_k3"] > 0  # another model's weights: the two differ


def test_divergence_metrics_need_searcher_tokens():
    mask = torch.ones(1, 3, dtype=torch.bool)
    scored = torch.tensor([True])
    assert searcher_divergence_metrics(
        torch.zeros(1, 3, dtype=torch.long),
        mask,
        torch.tensor([0]),
        torch.zeros(1, 3),
        torch.zeros(1, 3),
        scored,
        decode_chars,
    ) == {"teacher/searcher_tokens": 0.0}


def test_divergence_metrics_read_only_the_rows_the_teacher_scored():
    """Two Searcher rows, one scored: the unscored row's zeros never enter the means."""
    ids = torch.tensor([chars("<search>ab"), chars("<report>cd")])
    mask = torch.ones(2, 10, dtype=torch.bool)
    roles = torch.tensor([SEARCHER, SEARCHER])
    old = torch.full((2, 10), -1.0)
    teacher = torch.stack([torch.full((10,), -0.5), torch.zeros(10)])  # row 1 unscored: 0
    metrics = searcher_divergence_metrics(ids, mask, roles, old, teacher, torch.tensor([True, False]), decode_chars)
    assert metrics["teacher/searcher_tokens"] == 10
    assert metrics["teacher/searcher_kl_k1"] == pytest.approx(-0.5)
    assert metrics["teacher/decision_tokens"] == 1
    assert metrics["teacher/decision_log_ratio"] == pytest.approx(0.5)
    unscored = searcher_divergence_metrics(ids, mask, roles, old, teacher, torch.tensor([False, False]), decode_chars)
    assert unscored == {"teacher/searcher_tokens": 0.0}


@pytest.mark.slow
def test_a_variant_without_distillation_logs_no_teacher_metrics(models, tmp_path, scripted_batch):  # noqa: F811
    """Outcome-based Searcher RL: π_T scores the Leader/Answerer rows (KL-in-reward) only, so no
    ``teacher/*`` metric and no Searcher KL to π_T is logged."""
    trainer = Trainer(stage2_config(models, tmp_path, variant="outcome_searcher_rl"))
    ppo_batch, metrics = trainer.prepare(copy.deepcopy(scripted_batch))
    assert trainer.frozen.teacher is None and trainer.frozen.reference is not None
    assert not [key for key in metrics if key.startswith("teacher/")]
    update = trainer.update(ppo_batch)
    assert "leader/approx_kl_teacher" in update and "answerer/approx_kl_teacher" in update
    assert "searcher/approx_kl_teacher" not in update and "searcher/approx_kl_old" in update


# ----- every RL advantage zeroed --------------------------------------------------------


def test_zero_rl_is_off_by_default_and_checked():
    assert AdvantageConfig().zero_rl is False
    with pytest.raises(ConfigError, match="zero_rl"):
        AdvantageConfig(zero_rl=1)


def test_zero_rl_zeroes_grpo_and_opd_advantages_and_the_policy_gradient():
    role_ids = torch.tensor([0, 1, 2, 2])
    mask = torch.ones(4, 3, dtype=torch.bool)
    old = -torch.rand(4, 3) - 0.1
    inputs = {
        "role_ids": role_ids,
        "traj_index": torch.tensor([0, 0, 0, 0]),
        "candidate_index": torch.tensor([0, 0, 0, 1]),
        "response_mask": mask,
        "old_logprobs": old,
        "teacher_logprobs": old - 0.5,
        "leader_rewards": torch.tensor([[1.0]]),
        "answerer_rewards": torch.tensor([[[1.0, 0.0]]]),
    }
    on = team_token_advantages(**inputs, config=AdvantageConfig(zero_rl=True))
    off = team_token_advantages(**inputs, config=AdvantageConfig())
    assert off.token_advantages.abs().sum() > 0  # OPD on the Searcher, GRPO on the Answerer
    assert torch.equal(on.token_advantages, torch.zeros(4, 3))
    logprobs = old.clone().requires_grad_(True)
    terms = ppo_loss(logprobs, old, on.token_advantages, mask, role_ids, PPOLossConfig(entropy_coef=0.0))
    terms.loss.backward()
    assert float(terms.policy_loss.detach()) == 0.0 and torch.equal(logprobs.grad, torch.zeros(4, 3))


@pytest.mark.slow
def test_zero_rl_without_extra_terms_leaves_the_weights_unchanged(models, tmp_path):
    trainer = Trainer(
        stage2_config(
            models,
            tmp_path,
            **{"advantage.zero_rl": True, "ppo.entropy_coef": 0.0, "ptx.coef": 0.0, "ppo.kl_loss_coef": 0.0},
        )
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = trainer.train_step()
    assert metrics["optim/updates"] >= 1 and metrics["loss/policy"] == 0.0
    assert metrics["optim/grad_norm"] == 0.0
    for old, new in zip(before, trainer.model.parameters()):
        assert torch.equal(old, new)


# ----- the Prompted Critic's judge figures ----------------------------------------------


class ScriptedJudge:
    """A judge policy whose greedy outputs are scripted texts, in order."""

    def __init__(self, texts):
        self.texts = list(texts)
        self.tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: self.texts[ids[0]])
        self.calls = 0

    def generate(self, prompts, n, **kwargs):
        out = [[Candidate([self.calls + i], [0.0], "stop")] for i in range(len(prompts))]
        self.calls += len(prompts)
        return out


def _record(reports, golden=("Tarvel",), em=1.0):
    calls = [CallRecord(role="searcher", agent=f"searcher_{k}", wave=1) for k in range(len(reports))]
    return WorkflowRecord(
        question="Where was Orlen Vask born?",
        golden_answers=list(golden),
        reports=[
            Report(agent=f"searcher_{k}", wave=1, task=f"task {k}", text=text)
            for k, text in enumerate(reports)
            if text is not None
        ],
        calls=calls,
        rewards=RewardParts(em=em, searcher_calls=[0.9] * len(reports), search_bonus=[1.0] * len(reports)),
    )


def test_report_has_gold_matches_whole_normalized_words():
    assert report_has_gold("Orlen Vask was born in TARVEL.", ["Tarvel"])
    assert not report_has_gold("born in Tarvelton", ["Tarvel"])
    assert not report_has_gold("anything", [""])


def test_judge_format_rate_and_agreement(monkeypatch):
    monkeypatch.setattr("maopd.training.critic.prompt_ids", lambda tokenizer, messages: [0])
    # reports: gold, gold, not gold, not gold, gold; a call without a report is not judged
    records = [
        [_record(["born in Tarvel", "Tarvel, a town", None]), _record(["Paris", "nothing found", "It is Tarvel"])]
    ]
    judge = ScriptedJudge(
        [
            "<judge>yes</judge>",  # gold, yes: agrees
            "<judge>no</judge>",  # gold, no: disagrees
            "<judge>no</judge>",  # not gold, no: agrees
            "unknown",  # unparseable: counts against the format rate only
            "<judge> YES </judge>",  # gold, yes: agrees
        ]
    )
    critic = PromptedCritic(judge, CriticConfig())
    rewards = critic.searcher_rewards(records)
    assert judge.calls == 5
    m = critic.last_metrics
    assert m["critic/judged"] == 5 and m["critic/format_rate"] == pytest.approx(4 / 5)
    assert m["critic/gold_rate"] == pytest.approx(3 / 5)
    assert m["critic/agreement"] == pytest.approx(3 / 4)
    assert m["critic/judge_rate"] == pytest.approx(2 / 5)
    w = CriticConfig()
    unreported = w.em_weight * 1.0 + w.judge_weight * 0.0 + w.bonus_weight * 1.0
    first = [w.em_weight + w.judge_weight * v + w.bonus_weight for v in (1.0, 0.0)] + [unreported]
    second = [w.em_weight + w.judge_weight * v + w.bonus_weight for v in (0.0, 0.0, 1.0)]
    torch.testing.assert_close(rewards, torch.tensor([[sum(first) / 3, sum(second) / 3]]))


def test_judge_agreement_on_the_world_counts_a_bridge_report_as_correct(monkeypatch):
    from maopd.envs.synthwiki import load_default_world
    from maopd.envs.synthwiki.grammar import parse_question, subquestion
    from maopd.envs.synthwiki.knowledge import Knowledge, final_answer
    from maopd.training.trainer import world_report_gold

    world = load_default_world()
    gold = world_report_gold(corpus=None)
    knowledge = Knowledge(d.text for d in world.corpus.documents)
    question = next(
        q for q in world.splits["train"] if q.metadata.get("hops") == 2 and q.metadata["type"] != "comparison"
    )
    plan = parse_question(question.question)
    bridge_task = subquestion(plan.steps[0], plan.topic)
    bridge = knowledge.lookup(plan.topic, plan.steps[0])
    # the first hop's answer is the bridge entity: a report stating it answers its sub-question,
    # although it does not hold the question's answer
    assert bridge and final_answer(plan, knowledge) != bridge
    assert gold(f"Task: {bridge_task}", f"The answer is {bridge}.")
    assert not gold(bridge_task, "No relevant information found.")
    assert gold(question.question, f"It is {question.golden_answers[0]}.")
    assert not gold("not a question of the world", question.golden_answers[0])
    assert world_report_gold(corpus="my_corpus.jsonl") is None  # another corpus: the question's answers decide

    monkeypatch.setattr("maopd.training.critic.prompt_ids", lambda tokenizer, messages: [0])
    record = _record([f"The answer is {bridge}.", "nothing"], golden=question.golden_answers)
    for report in record.reports:
        report.task = bridge_task
    critic = PromptedCritic(ScriptedJudge(["<judge>yes</judge>", "<judge>no</judge>"]), CriticConfig(), gold)
    critic.searcher_rewards([[record]])
    assert critic.last_metrics["critic/gold_rate"] == 0.5 and critic.last_metrics["critic/agreement"] == 1.0


def test_judge_figures_reach_the_step_metrics(models, tmp_path, scripted_batch):  # noqa: F811
    trainer = Trainer(stage2_config(models, tmp_path, variant="prompted_critic"))
    _, metrics = trainer.prepare(copy.deepcopy(scripted_batch))
    for name in ("critic/format_rate", "critic/gold_rate", "critic/judged", "critic/judge_rate"):
        assert name in metrics
    assert 0.0 <= metrics["critic/format_rate"] <= 1.0


@pytest.mark.slow
def test_tune_judge_gives_the_judges_figures_on_recorded_reports(models, tmp_path, capsys):
    import json

    from maopd.agents.expert_team import expert_team
    from maopd.cli import main
    from maopd.envs import hierarchical_search_v1
    from maopd.envs.episode import run_episode
    from maopd.evaluation.records import from_workflow, record_line

    env = hierarchical_search_v1.env(split="dev")
    workflows = [run_episode(env, expert_team(), seed=i, options={"question_index": i}) for i in range(3)]
    records = tmp_path / "records.jsonl"
    records.write_text("".join(record_line(from_workflow(w, "expert", "1-hop", 0)) for w in workflows))
    out = tmp_path / "judge.json"
    command = ["tune", "judge", "--model", str(models / "pi0"), "--records", str(records), "--balanced", "21"]
    assert main([*command, "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["workflows"] == 3 and figures["methods"] == ["expert"]
    assert figures["critic/judged"] == sum(len(w.reports) for w in workflows)
    assert figures["critic/gold_rate"] == 1.0  # the expert's reports state their sub-questions' answers
    assert 0.0 <= figures["critic/format_rate"] <= 1.0 and figures["command"].startswith("maopd tune judge")
    assert figures["p_yes_auc_vs_gold"] is None  # every report is gold-correct: no AUC
    assert figures["balanced"]["examples"] == 20 and figures["balanced"]["negatives"] == 10
    assert figures["balanced"]["split"] == "dev" and 0.0 <= figures["balanced"]["balanced_accuracy"] <= 1.0
    assert figures["gate"]["met"] is False and figures["gate"]["checks"]["negatives"] is False

    bare = tmp_path / "bare.jsonl"
    bare.write_text(record_line(from_workflow(workflows[0], "expert", "1-hop", 0, keep_trajectory=False)))
    assert main(["tune", "judge", "--model", str(models / "pi0"), "--records", str(bare)]) == 2
    assert "no recorded workflow holds a report" in capsys.readouterr().err
