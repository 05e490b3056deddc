"""The stage trainer on a tiny model: the PPO step, micro-batching, variants, guards, tokenizers.

Most tests use a *scripted* team batch: the SynthWiki expert team writes the actions (so the
hierarchy has Leader, Searcher and Answerer calls, which a random tiny model never produces), its
text is encoded to token ids, and the π_old log-probs are the tiny π_0's own scores of those ids,
so the batch is exactly what the trainer gets from a rollout in which π_0 sampled those tokens.
Rewards are then set to varied values, so every role's GRPO group has a spread.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from maopd.agents.chat_tokens import encode_text
from maopd.agents.expert_team import expert_team
from maopd.agents.sampling import Candidate
from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model, save_model
from maopd.agents.tokenizer import train_tokenizer
from maopd.envs import hierarchical_search_v1
from maopd.envs.actions import ANSWERER, LEADER, SEARCHER
from maopd.envs.synthwiki import load_default_world
from maopd.training.advantages import grpo_advantages
from maopd.training.config import apply_settings, build_config
from maopd.training.losses import NonFiniteError
from maopd.training.model_loading import TokenizerMismatchError, check_tokenizers_match
from maopd.training.rollout import TeamRolloutCollector
from maopd.training.rollout_rewards import record_rewards
from maopd.training.token_scoring import score_tokens
from maopd.training.trainer import Trainer

GROUP = 2


def stage2_config(models, tmp_path, **settings):
    data = {
        "stage": "stage2",
        "run_dir": str(tmp_path / "run"),
        "model": {"path": str(models / "pi0")},
        "teacher": {"path": str(models / "teacher")},
        "env": {"max_steps": 6, "num_searchers": 2, "num_candidates": 2},
        "rollout": {"batch_size": 2, "group_size": GROUP, "max_new_tokens": 8, "max_questions": 8},
        "optim": {"minibatches": 1, "micro_batch_size": 4, "lr": 1e-4},
        "logging": {"tensorboard": False, "progress": False},
    }
    return build_config(apply_settings(data, settings))


class _ScriptedCollector(TeamRolloutCollector):
    """Rollouts whose actions the expert team writes, as canonical token ids."""

    def _generate(self, keys, turns, *args):
        self._turns = [turns[key] for key in keys]
        return super()._generate(keys, turns, *args)

    def generate(self, prompts, counts, seeds):
        outputs = expert_team().act(self._turns)
        ids = [encode_text(self.tokenizer, out.texts[0]) for out in outputs]
        return [[Candidate(row, [0.0] * len(row), "stop") for _ in range(count)] for row, count in zip(ids, counts)]


def _vary_rewards(batch):
    """Rewards with a spread in every role's group (the expert team would score EM = 1 everywhere)."""
    for b, row in enumerate(batch.records):
        for g, record in enumerate(row):
            em = float((b + g) % 2)
            rewards = record.rewards
            rewards.em = em
            rewards.leader = 0.9 * em + 0.1 * g / GROUP
            rewards.answerer = [float((g + j) % 2) for j in range(len(rewards.answerer))]
            rewards.searcher_calls = [0.9 * em + 0.05 * (g + k) for k in range(len(rewards.searcher_calls))]


@pytest.fixture(scope="module")
def scripted_batch(models):
    from maopd.agents.tiny_model import load_model

    model, tokenizer = load_model(models / "pi0")
    questions = [q for q in load_default_world().splits["train"] if q.metadata["hops"] == 2][:2]

    def make_env():
        return hierarchical_search_v1.env(max_steps=6, num_searchers=2, num_candidates=2)

    collector = _ScriptedCollector(make_env, SimpleNamespace(tokenizer=tokenizer))
    collector.policy = collector  # its own generate() answers the rounds
    batch = collector.collect(questions, GROUP, seed=0)
    scores = score_tokens(model, batch.token_batch(tokenizer.pad_token_id), temperature=1.0)
    for row, sequence in enumerate(batch.sequences):
        sequence.old_logprobs = scores.logprobs[row, : len(sequence.input_ids)].tolist()
    _vary_rewards(batch)
    assert {s.role for s in batch.sequences} == {"leader", "searcher", "answerer"}
    return batch


def _advantages(models, tmp_path, batch, **settings):
    trainer = Trainer(stage2_config(models, tmp_path, **settings))
    ppo_batch, _ = trainer.prepare(copy.deepcopy(batch))
    return trainer, ppo_batch


def _role_tokens(ppo_batch, role):
    return ppo_batch.tokens.response_mask & (ppo_batch.role_ids == role)[:, None]


@pytest.mark.slow
def test_one_step_reduces_the_surrogate_loss_on_a_fixed_batch(models, tmp_path, scripted_batch):
    trainer, ppo_batch = _advantages(models, tmp_path, scripted_batch)
    assert ppo_batch.advantages.token_advantages.abs().sum() > 0
    # one minibatch: each update reports the loss under the parameters it started from
    metrics = trainer.update(ppo_batch)
    before = metrics["loss/total"]
    after = trainer.update(ppo_batch)["loss/total"]
    assert after < before
    assert metrics["optim/updates"] == 1 and metrics["optim/grad_norm"] > 0
    for role in ("leader", "searcher", "answerer"):
        assert f"{role}/policy_loss" in metrics and f"{role}/entropy" in metrics


@pytest.mark.slow
def test_micro_batches_accumulate_to_the_minibatch_gradient(models, tmp_path, scripted_batch):
    grads = []
    for micro in (2, 1000):
        trainer, ppo_batch = _advantages(
            models, tmp_path, scripted_batch, **{"optim.micro_batch_size": micro, "optim.lr": 1e-12}
        )
        trainer.optimizer.step = lambda: None  # keep the gradient, skip the update
        trainer.update(ppo_batch)
        grads.append(torch.cat([p.grad.flatten() for p in trainer.model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-7)


def _ptx_file(path):
    from maopd.training.ptx import write_rows

    questions = load_default_world().splits["dev"][:100]
    texts = [{"text": q.question} for q in questions]
    chats = [
        {
            "role": "answerer",
            "messages": [
                {"role": "user", "content": q.question},
                {"role": "assistant", "content": f"<answer>{q.golden_answers[0]}</answer>"},
            ],
        }
        for q in questions
    ]
    return write_rows(texts + chats, path)


@pytest.mark.slow
def test_ptx_adds_the_negative_log_likelihood_gradient_of_its_examples(models, tmp_path, scripted_batch):
    from maopd.training.sft import sft_loss

    data = _ptx_file(tmp_path / "ptx.jsonl")
    grads, ptx_grad = [], None
    for coef in (0.0, 0.5):
        trainer, ppo_batch = _advantages(
            models,
            tmp_path,
            scripted_batch,
            **{
                "ptx.coef": coef,
                "ptx.data": str(data),
                "ptx.seq_len": 64,
                "ptx.batch_size": 8,
                "optim.lr": 1e-12,
                "optim.grad_clip": 1e9,
            },
        )  # compare raw gradients
        trainer.optimizer.step = lambda: None  # keep the gradient, skip the update
        metrics = trainer.update(ppo_batch)
        grads.append(torch.cat([p.grad.flatten() for p in trainer.model.parameters()]))
        if coef:
            roles = {e.role for e in trainer.ptx.examples}
            assert roles == {"pretraining", "answerer"}  # text windows and chat calls
            # the examples the update drew, drawn again from the same seed
            generator = torch.Generator().manual_seed(trainer._seed_for(1))
            torch.randperm(ppo_batch.num_sequences, generator=generator)
            examples = trainer.ptx.sample(generator)
            trainer.model.zero_grad()
            loss = sft_loss(trainer.model, examples, trainer.tokenizer.pad_token_id)
            (coef * loss).backward()
            ptx_grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters()])
            assert metrics["loss/ptx"] == pytest.approx(loss.item(), rel=1e-5)
        else:
            assert "loss/ptx" not in metrics
    torch.testing.assert_close(grads[1] - grads[0], ptx_grad, rtol=1e-3, atol=1e-6)


def test_ptx_leaves_out_the_calls_of_a_role_with_loss_weight_zero(models, tmp_path):
    """'w/o direct Searcher supervision' with PPO-ptx on: no Searcher call is a ptx example."""
    from maopd.training.ptx import write_rows

    chat = [
        {"role": "user", "content": "Where was Orlen Vask born?"},
        {"role": "assistant", "content": "<search>Orlen Vask</search>"},
    ]
    data = write_rows(
        [{"role": "searcher", "messages": chat}, {"role": "answerer", "messages": chat}], tmp_path / "ptx.jsonl"
    )
    ptx = {"ptx.coef": 0.1, "ptx.data": str(data)}
    assert {e.role for e in Trainer(stage2_config(models, tmp_path, **ptx)).ptx.examples} == {"searcher", "answerer"}
    unsupervised = stage2_config(models, tmp_path, **ptx, **{"ppo.role_loss_weights": {"searcher": 0.0}})
    assert {e.role for e in Trainer(unsupervised).ptx.examples} == {"answerer"}


def test_ptx_data_is_written_whole_or_not_at_all(tmp_path):
    from maopd.training.ptx import read_rows, write_rows

    target = tmp_path / "ptx.jsonl"
    with pytest.raises(TypeError):
        write_rows([{"text": "fine"}, {"text": object()}], target)  # fails half way
    assert not target.exists()
    write_rows([{"text": "fine"}], target)
    assert read_rows(target) == [{"text": "fine"}] and list(tmp_path.iterdir()) == [target]


def test_ptx_data_errors_name_the_field_and_line(models, tmp_path):
    from maopd.base.config import ConfigError

    with pytest.raises(ConfigError, match="ptx.data"):
        stage2_config(models, tmp_path, **{"ptx.coef": 0.1})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"txt": "oops"}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2 "):
        Trainer(stage2_config(models, tmp_path, **{"ptx.coef": 0.1, "ptx.data": str(bad)}))


@pytest.mark.slow
def test_variants_change_only_the_searcher_path(models, tmp_path, scripted_batch):
    beta = 0.01
    _, full = _advantages(models, tmp_path, scripted_batch)
    _, no_kl = _advantages(models, tmp_path, scripted_batch, **{"advantage.kl_in_reward_coef": 0.0})
    leader, searcher, answerer = (_role_tokens(full, r) for r in (LEADER, SEARCHER, ANSWERER))
    adv = {"full": full.advantages.token_advantages}

    def unchanged(other):
        # Equal up to float rounding: a variant's Teacher scores other rows (no Searcher rows, or
        # none at all), so the prefix trees it packs the Leader's rows into differ in shape.
        torch.testing.assert_close(other[leader | answerer], adv["full"][leader | answerer], atol=1e-6, rtol=0)

    # full: Searcher tokens get β·(log π_T − log π_old), Eq. 5
    expected_opd = beta * (full.teacher_logprobs - full.old_logprobs)
    torch.testing.assert_close(adv["full"][searcher], expected_opd[searcher])
    assert adv["full"][searcher].abs().min() > 0

    # w/o direct Searcher supervision: Searcher advantages and loss weight 0, the rest unchanged
    trainer, none = _advantages(models, tmp_path, scripted_batch, variant="no_searcher_supervision")
    assert trainer.config.ppo.role_loss_weights == {"searcher": 0.0}
    assert torch.all(none.advantages.token_advantages[searcher] == 0)
    unchanged(none.advantages.token_advantages)
    assert none.num_sequences == full.num_sequences  # Searcher rows stay in the batch

    # w/ outcome-based Searcher RL: Eq. 1 on R_EM per trajectory; the Leader and Answerer keep their
    # objectives, KL-in-reward toward the Teacher included, so the Teacher scores their rows only
    trainer, outcome = _advantages(models, tmp_path, scripted_batch, variant="outcome_searcher_rl")
    assert trainer.frozen.teacher is None and trainer.frozen.reference is not None
    assert outcome.teacher_logprobs is None and torch.all(outcome.reference_logprobs[searcher] == 0)
    torch.testing.assert_close(outcome.reference_logprobs[leader | answerer], full.teacher_logprobs[leader | answerer])
    em_advantage = grpo_advantages(record_rewards(scripted_batch)["em"]).flatten()
    for row, sequence in enumerate(scripted_batch.sequences):
        if sequence.role == "searcher":
            mask = full.tokens.response_mask[row]
            expected = em_advantage[sequence.group * GROUP + sequence.trajectory]
            assert torch.all(outcome.advantages.token_advantages[row][mask] == expected)
    unchanged(outcome.advantages.token_advantages)

    # w/ base-model teacher: the Teacher is π_0, which sampled this batch (OPD signal ≈ 0); the
    # Leader/Answerer KL stays toward π_T, so their advantages are the full method's
    _, base = _advantages(models, tmp_path, scripted_batch, variant="base_model_teacher")
    assert base.advantages.token_advantages[searcher].abs().max() < 1e-6
    for role in ("leader", "answerer"):
        shaped = base.advantages.shaped_rewards[role]
        torch.testing.assert_close(shaped, full.advantages.shaped_rewards[role], atol=1e-7, rtol=0)
        assert not torch.allclose(shaped, no_kl.advantages.shaped_rewards[role], atol=1e-7, rtol=0)
    torch.testing.assert_close(
        base.advantages.token_advantages[leader | answerer], adv["full"][leader | answerer], atol=1e-5, rtol=0
    )

    # Prompted Critic: Searchers get Eq. 1 on 0.3·R_EM + 0.5·R_judge + 0.2·b_S; Leader/Answerer unchanged
    trainer = Trainer(stage2_config(models, tmp_path, variant="prompted_critic"))
    verdicts = iter([1.0, 0.0] * 50)
    trainer.critic.judge = lambda items: [next(verdicts) for _ in items]
    critic, _ = trainer.prepare(copy.deepcopy(scripted_batch))
    unchanged(critic.advantages.token_advantages)
    verdicts = iter([1.0, 0.0] * 50)
    expected_rewards = torch.zeros(2, GROUP)
    for b, row in enumerate(scripted_batch.records):
        for g, record in enumerate(row):
            bonuses = record.rewards.search_bonus
            per_call = [0.3 * record.rewards.em + 0.5 * next(verdicts) + 0.2 * bonus for bonus in bonuses]
            expected_rewards[b, g] = sum(per_call) / len(per_call)
    torch.testing.assert_close(critic.advantages.shaped_rewards["searcher"], expected_rewards)


@pytest.mark.slow
def test_base_model_teacher_distils_from_pi0_and_keeps_pi_t_as_the_kl_reference(models, tmp_path, scripted_batch):
    """Two distinguishable frozen models: the Searchers' OPD log-probs are π_0's, the Leader/Answerer
    KL-in-reward and the KL loss read π_T's (another model's weights), each model scored once."""
    from maopd.agents.tiny_model import load_model

    settings = {"ppo.kl_loss_coef": 0.01}
    trainer, base = _advantages(models, tmp_path, scripted_batch, variant="base_model_teacher", **settings)
    assert trainer.frozen.teacher is not trainer.frozen.reference
    tokens = base.tokens
    pi0 = score_tokens(load_model(models / "pi0")[0], tokens).logprobs
    pi_t = score_tokens(load_model(models / "teacher")[0], tokens).logprobs
    leader, searcher, answerer = (_role_tokens(base, r) for r in (LEADER, SEARCHER, ANSWERER))
    assert not torch.allclose(pi0[searcher], pi_t[searcher], atol=1e-3)
    torch.testing.assert_close(base.teacher_logprobs[searcher], pi0[searcher], atol=1e-5, rtol=0)
    assert torch.all(base.teacher_logprobs[leader | answerer] == 0)  # π_0 scores the Searchers only
    # the KL loss reads every row: π_T's log-probs on all of them
    torch.testing.assert_close(base.reference_logprobs[tokens.response_mask.bool()], pi_t[tokens.response_mask.bool()])
    # the same batch with π_T as the Teacher too: the Leader/Answerer rewards carry the same KL
    # penalty, and one model scored every row once
    full_trainer, full = _advantages(models, tmp_path, scripted_batch, **settings)
    assert full_trainer.frozen.teacher is full_trainer.frozen.reference
    for role in ("leader", "answerer"):
        torch.testing.assert_close(
            base.advantages.shaped_rewards[role], full.advantages.shaped_rewards[role], atol=1e-7, rtol=0
        )
    torch.testing.assert_close(base.advantages.token_advantages[searcher], 0.01 * (pi0 - base.old_logprobs)[searcher])


def _with_em(batch, em_rows):
    batch = copy.deepcopy(batch)
    for row, ems in zip(batch.records, em_rows):
        for record, em in zip(row, ems):
            record.rewards.em = em
    return batch


def test_dynamic_sampling_keeps_drawing_until_b_questions_disagree(models, tmp_path, scripted_batch, monkeypatch):
    uniform = _with_em(scripted_batch, [[1.0, 1.0], [0.0, 0.0]])
    one_informative = _with_em(scripted_batch, [[0.0, 0.0], [0.0, 1.0]])
    rounds = [uniform, one_informative, one_informative, uniform]
    trainer = Trainer(stage2_config(models, tmp_path, **{"rollout.dynamic_sampling_rounds": 3}))
    monkeypatch.setattr(trainer, "_collect_round", lambda sampling_round: rounds[sampling_round])
    batch, stats = trainer.collect()
    # B = 2: round 0 has no informative question, rounds 1 and 2 have one each; round 3 is not drawn
    assert stats["rollout/rounds"] == 3
    assert stats["rollout/informative_fraction"] == pytest.approx(2 / 6)
    assert [[r.rewards.em for r in row] for row in batch.records] == [[0.0, 1.0], [0.0, 1.0]]
    question_1 = [s.input_ids for s in scripted_batch.sequences if s.group == 1]
    for group in (0, 1):
        assert [s.input_ids for s in batch.sequences if s.group == group] == question_1
    ppo_batch, _ = trainer.prepare(batch)
    assert ppo_batch.num_sequences == 2 * len(question_1)


def test_dynamic_sampling_is_off_by_default_and_never_leaves_a_rank_empty(
    models, tmp_path, scripted_batch, monkeypatch
):
    uniform = _with_em(scripted_batch, [[1.0, 1.0], [0.0, 0.0]])
    trainer = Trainer(stage2_config(models, tmp_path))
    monkeypatch.setattr(trainer, "_collect_round", lambda sampling_round: uniform)
    batch, stats = trainer.collect()
    assert batch.sequences == uniform.sequences and batch.records == uniform.records
    assert stats["rollout/rounds"] == 1 and stats["rollout/informative_fraction"] == 0
    trainer = Trainer(stage2_config(models, tmp_path, **{"rollout.dynamic_sampling_rounds": 2}))
    monkeypatch.setattr(trainer, "_collect_round", lambda sampling_round: uniform)
    batch, stats = trainer.collect()
    assert batch is uniform and stats["rollout/rounds"] == 3


@pytest.mark.slow
def test_dynamic_sampling_rounds_draw_fresh_questions_with_fresh_seeds(models, tmp_path):
    trainer = Trainer(stage2_config(models, tmp_path, **{"rollout.dynamic_sampling_rounds": 1}))
    drawn = []
    next_batch = trainer.loader.next_batch
    trainer.loader.next_batch = lambda: (
        drawn.append(next_batch()[1]) or ([trainer.loader.questions[i] for i in drawn[-1]], drawn[-1])
    )
    batch, stats = trainer.collect()  # a random π_0 answers nothing: no question is informative
    assert stats["rollout/rounds"] == 2 and len(drawn) == 2 and set(drawn[0]).isdisjoint(drawn[1])
    assert len(batch.questions) == 2 and trainer._seed_for(0, 1) != trainer._seed_for(0, 0)


def test_first_question_skips_the_start_of_the_split(models, tmp_path):
    split = hierarchical_search_v1.env().questions
    trainer = Trainer(stage2_config(models, tmp_path, **{"rollout.first_question": 5}))
    assert trainer.loader.questions == split[5:13]  # then max_questions = 8


def test_nan_reward_stops_the_step_with_a_clear_error(models, tmp_path, scripted_batch):
    trainer = Trainer(stage2_config(models, tmp_path))
    batch = copy.deepcopy(scripted_batch)
    batch.records[0][1].rewards.leader = float("nan")
    with pytest.raises(NonFiniteError, match="leader rewards .* leader"):
        trainer.prepare(batch)


def test_teacher_with_another_vocabulary_is_refused(models, tmp_path):
    other = train_tokenizer(["an entirely different corpus of words"], vocab_size=400)
    save_model(build_tiny_model(other, TinyModelConfig()), other, tmp_path / "other")
    with pytest.raises(TokenizerMismatchError, match="same vocabulary"):
        Trainer(stage2_config(models, tmp_path, **{"teacher.path": str(tmp_path / "other")}))
    from maopd.agents.tiny_model import load_model

    _, tokenizer = load_model(models / "pi0")
    check_tokenizers_match(tokenizer, tokenizer, "same")


def test_config_errors_name_the_field(models, tmp_path):
    from maopd.base.config import ConfigError

    with pytest.raises(ConfigError, match="teacher.path"):
        build_config({"stage": "stage2"})
    with pytest.raises(ConfigError, match="variant"):
        build_config({"stage": "stage1", "variant": "prompted_critic"})
    with pytest.raises(ConfigError, match="rollout.group_size"):
        build_config({"stage": "stage1", "rollout": {"group_size": 0}})
    with pytest.raises(ConfigError, match="rollout.first_question"):
        build_config({"stage": "stage1", "rollout": {"first_question": -1}})
    with pytest.raises(ConfigError, match="rollout.dynamic_sampling_rounds"):
        build_config({"stage": "stage1", "rollout": {"dynamic_sampling_rounds": -1}})


@pytest.mark.slow
def test_opd_calibration_gradient_norms_are_linear_in_beta(models, tmp_path, scripted_batch):
    """`maopd tune beta` relies on the Searcher's surrogate gradient at π_old being β times its
    gradient at β = 1, and the Leader/Answerer gradient not depending on β."""
    from maopd.training.role_gradients import role_gradient_norms

    norms = []
    for beta in (1.0, 2.5):
        trainer, ppo_batch = _advantages(
            models, tmp_path, scripted_batch, **{"advantage.opd_beta": beta, "ppo.entropy_coef": 0.0}
        )
        norms.append(role_gradient_norms(trainer, ppo_batch))
    assert norms[0]["searcher"] > 0 and norms[0]["leader_answerer"] > 0
    assert norms[1]["searcher"] == pytest.approx(2.5 * norms[0]["searcher"], rel=1e-4)
    assert norms[1]["leader_answerer"] == pytest.approx(norms[0]["leader_answerer"], rel=1e-5)


def test_the_teacher_and_the_kl_reference_are_named_apart():
    from maopd.base.config import ConfigError
    from maopd.training.model_loading import frozen_sources

    base = {"stage": "stage2", "variant": "base_model_teacher"}
    with pytest.raises(ConfigError, match="teacher.path: teacher.reference 'checkpoint'"):
        build_config(base)  # π_T, the default KL reference, is the Stage I model
    assert frozen_sources(build_config({**base, "teacher": {"path": "stage1"}})) == ("base_model", "checkpoint")
    assert frozen_sources(build_config({**base, "teacher": {"reference": "base_model"}})) == (
        "base_model",
        "base_model",
    )
    full = build_config({"stage": "stage2", "teacher": {"path": "stage1"}})
    assert frozen_sources(full) == ("checkpoint", "checkpoint")
    no_kl = {"advantage": {"kl_in_reward_coef": 0.0}}
    assert frozen_sources(build_config({**base, **no_kl})) == ("base_model", None)
    outcome = build_config({"stage": "stage2", "variant": "outcome_searcher_rl", "teacher": {"path": "stage1"}})
    assert frozen_sources(outcome) == (None, "checkpoint")
    with pytest.raises(ConfigError, match="ppo.kl_loss_coef: the KL loss needs a Teacher"):
        build_config({"stage": "stage1", "ppo": {"kl_loss_coef": 0.1}})


def test_a_requested_logger_that_is_not_installed_is_refused_before_any_work(monkeypatch):
    import importlib.util

    from maopd.base.config import ConfigError
    from maopd.training.config import LoggingConfig

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match="logging.wandb: the wandb package is not installed"):
        LoggingConfig(wandb=True)
    assert LoggingConfig().wandb is False  # not requested: nothing to check
