import itertools
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from maopd.agents.chat_tokens import encode_text, prompt_ids, turn_continuation_ids
from maopd.agents.hf_policy import HFPolicy
from maopd.agents.sampling import SamplingConfig
from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model
from maopd.envs.prompts import system_message, task_message
from maopd.training.teacher import Teacher, _token_trees
from maopd.training.token_scoring import pad_batch, score_tokens

INFO = {"role": "user", "content": "<information>\n[1] Paris: the capital of France.\n</information>"}


@pytest.fixture(scope="module")
def searcher_calls(model, tokenizer):
    """Two-turn Searcher calls: generated ids, then env-inserted ids, then generated ids again."""
    sampler = HFPolicy(model, tokenizer, SamplingConfig(temperature=1.0, max_new_tokens=12), seed=5)
    calls = []
    for task in ("capital of France", "who wrote Hamlet", "x"):
        messages = [system_message("searcher"), task_message(task)]
        ids = prompt_ids(tokenizer, messages)
        mask, logprobs = [0] * len(ids), [0.0] * len(ids)
        for _ in range(2):
            ((candidate,),) = sampler.generate([ids], n=1)
            inserted = turn_continuation_ids(tokenizer, candidate.token_ids, [INFO], history=messages)
            ids = ids + candidate.token_ids + inserted
            mask += [1] * len(candidate.token_ids) + [0] * len(inserted)
            logprobs += candidate.logprobs + [0.0] * len(inserted)
        calls.append((ids, mask, logprobs))
    return calls


def reference_scores(model, ids, mask, temperature=1.0):
    """Naive scoring of one unpadded sequence with the full logits tensor."""
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].float() / temperature, dim=-1)
    values = torch.zeros(len(ids))
    entropy = torch.zeros(len(ids))
    for t in range(1, len(ids)):
        if mask[t]:
            values[t] = logprobs[t - 1, ids[t]]
            entropy[t] = -(logprobs[t - 1].exp() * logprobs[t - 1]).sum()
    return values, entropy


@pytest.mark.parametrize("side", ["left", "right"])
def test_identical_teacher_gives_zero_log_ratio(model, tokenizer, searcher_calls, side):
    ids, masks, recorded = zip(*searcher_calls)
    batch = pad_batch(ids, masks, tokenizer.pad_token_id, side=side)
    whole_rows = Teacher(build_tiny_model(tokenizer), temperature=1.0, share_prefixes=False).score(batch)
    teacher_scores = Teacher(build_tiny_model(tokenizer), temperature=1.0).score(
        batch
    )  # the rows share their system prompt
    student_scores = score_tokens(model, batch, temperature=1.0)
    assert torch.equal(whole_rows.logprobs, student_scores.logprobs.detach())
    assert torch.allclose(teacher_scores.logprobs, student_scores.logprobs.detach(), atol=1e-5, rtol=0)
    for row, (sequence_mask, sampled) in enumerate(zip(masks, recorded)):
        response = batch.response_mask[row]
        assert response.sum() == sum(sequence_mask) > 0
        ratio = (
            teacher_scores.logprobs[row][response]
            - torch.tensor(sampled)[torch.tensor(sequence_mask, dtype=torch.bool)]
        )
        assert ratio.abs().max() < 1e-4


@pytest.mark.parametrize("max_batch_tokens", [16384, 1], ids=["one group", "a group per row"])
def test_scores_match_naive_reference_and_mask_exactly(model, tokenizer, searcher_calls, max_batch_tokens):
    ids, masks, _ = zip(*searcher_calls)
    for side in ("left", "right"):
        batch = pad_batch(ids, masks, tokenizer.pad_token_id, side=side)
        teacher = Teacher(model, temperature=0.7, chunk_tokens=5, max_batch_tokens=max_batch_tokens)
        scores = teacher.score(batch, with_entropy=True)
        assert torch.equal(scores.mask, batch.response_mask)
        assert not scores.logprobs[~batch.response_mask].any() and not scores.entropy[~batch.response_mask].any()
        for row, (sequence, mask) in enumerate(zip(ids, masks)):
            expected, entropy = reference_scores(model, sequence, mask, temperature=0.7)
            real = batch.attention_mask[row].bool()
            assert torch.allclose(scores.logprobs[row][real], expected, atol=1e-4, rtol=0)
            assert torch.allclose(scores.entropy[row][real], entropy, atol=1e-4, rtol=0)


def test_inserted_tokens_are_never_scored(model, tokenizer):
    prompt = prompt_ids(tokenizer, [system_message("searcher"), task_message("x")])
    generated = encode_text(tokenizer, "<search>Paris</search>")
    inserted = turn_continuation_ids(tokenizer, generated, [INFO])
    ids = prompt + generated + inserted
    mask = [0] * len(prompt) + [1] * len(generated) + [0] * len(inserted)
    scores = Teacher(model).score(pad_batch([ids], [mask], tokenizer.pad_token_id))
    scored = scores.logprobs[0].nonzero().squeeze(1).tolist()
    assert scored == list(range(len(prompt), len(prompt) + len(generated)))


def test_padding_value_does_not_matter(model, tokenizer, searcher_calls):
    ids, masks, _ = zip(*searcher_calls)
    first = Teacher(model).score(pad_batch(ids, masks, pad_id=0, side="left"))
    second = Teacher(model).score(pad_batch(ids, masks, pad_id=17, side="left"))
    assert torch.allclose(first.logprobs, second.logprobs, atol=1e-6, rtol=0)


def test_student_scoring_has_gradients(tokenizer, searcher_calls):
    student = build_tiny_model(tokenizer, TinyModelConfig(seed=1)).train()
    ids, masks, _ = zip(*searcher_calls)
    scores = score_tokens(student, pad_batch(ids, masks, tokenizer.pad_token_id), with_entropy=True)
    (scores.logprobs.sum() + scores.entropy.sum()).backward()
    assert student.get_input_embeddings().weight.grad.abs().sum() > 0


def test_bad_masks_are_clear_errors(model, tokenizer):
    with pytest.raises(ValueError, match="first token"):
        Teacher(model).score(pad_batch([[1, 2, 3]], [[1, 1, 1]], tokenizer.pad_token_id))
    with pytest.raises(ValueError, match="sequence 0"):
        pad_batch([[1, 2, 3]], [[0, 1]], tokenizer.pad_token_id)
    batch = pad_batch([[1, 2, 3], [1]], [[0, 1, 1], [0]], tokenizer.pad_token_id)
    batch.response_mask[1, 2] = True
    with pytest.raises(ValueError, match="padding"):
        Teacher(model).score(batch)


@pytest.mark.slow
@pytest.mark.parametrize("side", ["left", "right"])
def test_token_tree_scoring_equals_whole_row_scoring(model, tokenizer, searcher_calls, side):
    """Answerer-like rows (n continuations of one prompt), multi-turn rows, rows that are prefixes
    of other rows, a repeated row and rows that share only their system prompt: token trees score
    what whole-row forwards score (to 1e-5), in one tree or in many, in blocks of any size, with or
    without share keys."""
    sampler = HFPolicy(model, tokenizer, SamplingConfig(temperature=1.0, max_new_tokens=10), seed=9)
    sequences, masks = [list(ids) for ids, _, _ in searcher_calls], [list(m) for _, m, _ in searcher_calls]
    for task in ("capital of France", "a much longer task about the author of Hamlet and the year"):
        prompt = prompt_ids(tokenizer, [system_message("answerer"), task_message(task)])
        for candidate in sampler.generate([prompt], n=4)[0]:
            sequences.append(prompt + candidate.token_ids)
            masks.append([0] * len(prompt) + [1] * len(candidate.token_ids))
    sequences.append(sequences[3] + [5, 6, 7] + sequences[3][len(sequences[3]) - 2 :])  # row 3 is its prefix
    masks.append(masks[3] + [0, 0, 0, 1, 1])
    sequences.append(list(sequences[4]))  # a repeated row
    masks.append(list(masks[4]))
    turn = searcher_calls[0][1].index(0, searcher_calls[0][1].index(1))  # row 0 after its first turn
    sequences.append(sequences[0][:turn])
    masks.append(masks[0][:turn])
    batch = pad_batch(sequences, masks, tokenizer.pad_token_id, side=side)
    teacher = build_tiny_model(tokenizer, TinyModelConfig(seed=3))
    whole = Teacher(teacher, share_prefixes=False).score(batch, with_entropy=True)
    keys = [row % 2 for row in range(len(sequences))]
    for (options, share_keys), by_layer in itertools.product(
        (
            ({}, None),
            ({"tree_block": 7}, None),
            ({"max_batch_tokens": 200, "pack_tokens": 100}, None),
            ({"pack_tokens": 150}, keys),
        ),
        (True, False),
    ):
        shared_teacher = Teacher(teacher, **options)
        assert shared_teacher.last_layer_at_predictors
        shared_teacher.last_layer_at_predictors = by_layer
        packs = [
            tree
            for tree in _token_trees(batch, list(range(len(sequences))), share_keys, shared_teacher.pack_tokens)
            if len(tree.paths) > 1
        ]
        assert packs and sum(len(p.ids) for p in packs) < sum(len(sequences[r]) for p in packs for r in p.paths)
        shared = shared_teacher.score(batch, with_entropy=True, share_keys=share_keys)
        assert torch.allclose(shared.logprobs, whole.logprobs, atol=1e-5, rtol=0)
        assert torch.allclose(shared.entropy, whole.entropy, atol=1e-5, rtol=0)
        assert (shared.logprobs[~batch.response_mask] == 0).all()

    shared_teacher = Teacher(teacher, pack_tokens=100)
    chosen = torch.tensor([1, 4, 5, 11, 12])
    partial = shared_teacher.score(batch, rows=chosen)
    assert torch.allclose(partial.logprobs[chosen], whole.logprobs[chosen], atol=1e-5, rtol=0)
    others = torch.ones(len(sequences), dtype=torch.bool)
    others[chosen] = False
    assert (partial.logprobs[others] == 0).all()


@pytest.mark.slow
@pytest.mark.parametrize(("family", "attention"), [("llama", "sdpa"), ("llama", "eager"), ("qwen2", "sdpa")])
def test_other_plain_decoders_run_the_last_layer_at_predictors_only(tokenizer, searcher_calls, family, attention):
    """Other plain decoders (Llama; Qwen2, with attention biases; grouped-query heads): their token
    trees run the last layer at the predicting tokens only and score what whole rows score."""
    ids, masks, _ = zip(*searcher_calls)
    rows = [*ids, ids[0] + ids[1][5:]]  # the last row shares row 0 whole
    masks = [*masks, masks[0] + masks[1][5:]]
    batch = pad_batch(rows, masks, tokenizer.pad_token_id)
    config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[
        family
    ]
    config = config_class(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        attn_implementation=attention,
    )
    torch.manual_seed(0)
    model = model_class(config).eval()
    teacher = Teacher(model)
    assert teacher.share_prefixes and teacher.last_layer_at_predictors
    whole = Teacher(model, share_prefixes=False).score(batch, with_entropy=True)
    trees = teacher.score(batch, with_entropy=True)
    assert torch.allclose(trees.logprobs, whole.logprobs, atol=1e-5, rtol=0)
    assert torch.allclose(trees.entropy, whole.entropy, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_eager_attention_trees_match_sdpa(tokenizer, searcher_calls):
    """Token trees under the eager attention score what they score under sdpa."""
    ids, masks, _ = zip(*searcher_calls)
    batch = pad_batch(ids, masks, tokenizer.pad_token_id)
    sdpa = build_tiny_model(tokenizer, TinyModelConfig(seed=3))
    eager = build_tiny_model(tokenizer, TinyModelConfig(seed=3))
    eager.config._attn_implementation = "eager"
    assert Teacher(eager).share_prefixes and Teacher(sdpa).share_prefixes
    assert torch.allclose(Teacher(eager).score(batch).logprobs, Teacher(sdpa).score(batch).logprobs, atol=1e-5, rtol=0)


def test_teacher_rows_are_the_rows_the_losses_read():
    from maopd.envs.actions import ANSWERER, LEADER, SEARCHER
    from maopd.training.teacher import teacher_rows

    roles = torch.tensor([LEADER, SEARCHER, SEARCHER, ANSWERER])
    assert teacher_rows(roles, teacher_roles=("searcher",), kl_in_reward=False, kl_loss=False).tolist() == [
        False,
        True,
        True,
        False,
    ]
    assert teacher_rows(roles, teacher_roles=(), kl_in_reward=True, kl_loss=False).tolist() == [
        True,
        False,
        False,
        True,
    ]
    assert teacher_rows(roles, teacher_roles=("searcher",), kl_in_reward=True, kl_loss=False).all()
    assert teacher_rows(roles, teacher_roles=(), kl_in_reward=False, kl_loss=True).all()


def test_reference_rows_are_the_rows_the_kl_terms_read():
    from maopd.envs.actions import ANSWERER, LEADER, SEARCHER
    from maopd.training.teacher import reference_rows

    roles = torch.tensor([LEADER, SEARCHER, ANSWERER])
    assert reference_rows(roles, kl_in_reward=True, kl_loss=False).tolist() == [True, False, True]
    assert reference_rows(roles, kl_in_reward=False, kl_loss=True).all()
    assert not reference_rows(roles, kl_in_reward=False, kl_loss=False).any()


class _RecordingTeacher:
    """Scores every asked row with its own constant and records which rows it was asked for."""

    def __init__(self, value):
        self.value, self.calls = value, []

    def score(self, batch, rows, share_keys):
        self.calls.append(rows.tolist())
        logprobs = torch.zeros(batch.input_ids.shape)
        logprobs[rows] = self.value
        return SimpleNamespace(logprobs=logprobs)


def test_frozen_models_score_each_row_with_the_model_a_term_reads():
    from maopd.envs.actions import ANSWERER, LEADER, SEARCHER
    from maopd.training.teacher import FrozenModels
    from maopd.training.token_scoring import TokenBatch

    roles = torch.tensor([LEADER, SEARCHER, ANSWERER])
    batch = TokenBatch(torch.ones(3, 2, dtype=torch.long), torch.ones(3, 2), torch.ones(3, 2))
    # one model that is both: the union of the rows, scored once, one tensor for both terms
    both = _RecordingTeacher(-1.0)
    scores = FrozenModels(both, both).score(
        batch, roles, ("searcher",), kl_in_reward=True, kl_loss=False, share_keys=[0, 0, 0]
    )
    assert both.calls == [[True, True, True]] and scores.teacher is scores.reference
    # π_0 distils the Searchers, π_T is the Leader/Answerer KL reference
    pi0, pi_t = _RecordingTeacher(-1.0), _RecordingTeacher(-2.0)
    scores = FrozenModels(pi0, pi_t).score(
        batch, roles, ("searcher",), kl_in_reward=True, kl_loss=False, share_keys=[0, 0, 0]
    )
    assert pi0.calls == [[False, True, False]] and pi_t.calls == [[True, False, True]]
    assert scores.teacher[:, 0].tolist() == [0.0, -1.0, 0.0] and scores.reference[:, 0].tolist() == [-2.0, 0.0, -2.0]
    assert scores.teacher_rows.tolist() == [False, True, False]
    # a reference without a Teacher (no OPD): only the reference scores
    scores = FrozenModels(None, pi_t).score(
        batch, roles, ("searcher",), kl_in_reward=True, kl_loss=False, share_keys=[0, 0, 0]
    )
    assert scores.teacher is None and scores.reference_rows.tolist() == [True, False, True]
