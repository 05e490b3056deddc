"""Team rollouts: token-exact records, exact masks, batching invariance, mixed teams."""

import pytest
import torch

from maopd.agents.chat_tokens import encode_text, render_text
from maopd.agents.expert_team import expert_team
from maopd.agents.hf_policy import HFPolicy
from maopd.agents.sampling import Candidate, SamplingConfig
from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model
from maopd.agents.tokenizer import train_tokenizer
from maopd.envs import cascade_search_v1, hierarchical_search_v1
from maopd.envs.synthwiki import load_default_world
from maopd.training.rollout import TeamRolloutCollector
from maopd.training.teacher import Teacher
from maopd.training.token_scoring import score_tokens


@pytest.fixture(scope="module")
def world():
    return load_default_world()


@pytest.fixture(scope="module")
def tokenizer(world):
    texts = [d.contents for d in world.corpus.documents[:400]] + [q.question for q in world.splits["train"][:200]]
    return train_tokenizer(texts, vocab_size=1200)


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, TinyModelConfig(seed=3))


def make_policy(model, tokenizer, max_new_tokens=8):
    return HFPolicy(model, tokenizer, SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens))


def hierarchy(**kw):
    return lambda: hierarchical_search_v1.env(max_steps=5, num_searchers=2, **kw)


@pytest.fixture(scope="module")
def sampled(world, tokenizer, model):
    """Two questions × two trajectories, two Answerer candidates: batch composition "many"."""
    collector = TeamRolloutCollector(hierarchy(num_candidates=2), make_policy(model, tokenizer))
    return collector.collect(world.splits["dev"][:2], 2, seed=7)


def assert_rescore_matches(batch, model, tokenizer):
    scores = score_tokens(model, batch.token_batch(tokenizer.pad_token_id), temperature=1.0)
    mask = scores.mask.bool()
    assert mask.sum() > 0
    torch.testing.assert_close(scores.logprobs[mask], batch.old_logprobs()[mask], atol=1e-4, rtol=0)


def test_recorded_logprobs_match_a_rescore(world, tokenizer, model, sampled):
    assert_rescore_matches(sampled, model, tokenizer)
    single = TeamRolloutCollector(hierarchy(), make_policy(model, tokenizer)).collect(
        world.splits["dev"][2:3], 1, seed=7
    )
    assert_rescore_matches(single, model, tokenizer)


def test_teacher_equal_to_student_gives_zero_log_ratio(tokenizer, model, sampled):
    tb = sampled.token_batch(tokenizer.pad_token_id)
    teacher = Teacher(model, temperature=1.0).score(tb)
    ratio = (teacher.logprobs - sampled.old_logprobs())[tb.response_mask.bool()]
    assert ratio.abs().max() < 1e-4


@pytest.mark.slow
def test_same_seed_same_records_whatever_the_batch(world, tokenizer, model, sampled):
    alone = TeamRolloutCollector(hierarchy(num_candidates=2), make_policy(model, tokenizer)).collect(
        world.splits["dev"][1:2], 2, seed=7, group_keys=[1]
    )
    for g in range(2):
        a = [s.input_ids for s in alone.sequences if s.trajectory == g]
        b = [s.input_ids for s in sampled.sequences if s.group == 1 and s.trajectory == g]
        assert a == b
        assert alone.record(0, g).candidates == sampled.record(1, g).candidates


class ScriptedGenerator:
    """A ``generate`` that emits the expert team's text as canonical token ids (log-prob 0).

    It lets the tests compare the collector's assembled ids with the chat template exactly.
    """

    def __init__(self, tokenizer, collector_ref):
        self.tokenizer = tokenizer
        self.team = expert_team()
        self.turns = collector_ref

    def generate(self, prompts, counts, seeds):
        outputs = self.team.act(self.turns.pop_turns())
        result = []
        for output, count in zip(outputs, counts):
            ids = encode_text(self.tokenizer, output.texts[0])
            result.append([Candidate(ids, [0.0] * len(ids), "stop") for _ in range(count)])
        return result


class RecordingCollector(TeamRolloutCollector):
    """Remembers the turns of each round so the scripted generator can answer them."""

    def _generate(self, keys, turns, *args):
        self._round = [turns[key] for key in keys]
        return super()._generate(keys, turns, *args)

    def pop_turns(self):
        return self._round


@pytest.mark.parametrize("module", [cascade_search_v1, hierarchical_search_v1], ids=lambda m: m.__name__)
def test_ids_and_masks_are_exactly_the_chat_and_the_generated_tokens(world, tokenizer, model, module):
    policy = make_policy(model, tokenizer)
    collector = RecordingCollector(lambda: module.env(num_candidates=2), policy)
    collector.policy = ScriptedGenerator(tokenizer, collector)
    questions = [q for q in world.splits["dev"] if q.metadata["hops"] == 2][:2]
    batch = collector.collect(questions, 1, seed=0)
    assert all(batch.record(b, 0).rewards.em == 1.0 for b in range(2))
    roles = {s.role for s in batch.sequences}
    assert roles == (
        {"searcher", "answerer", "leader"} if module is hierarchical_search_v1 else {"searcher", "answerer"}
    )
    end = tokenizer.eos_token_id
    for s in batch.sequences:
        calls = [c for c in batch.record(s.group, s.trajectory).calls if c.call_id == s.call_id]
        call = calls[0]
        outputs = call.outputs if s.role != "answerer" else [call.outputs[s.candidate]]
        # the masked tokens are exactly the role's own outputs, turn by turn
        generated = [t for t, m in zip(s.input_ids, s.response_mask) if m]
        assert generated == [i for text in outputs for i in encode_text(tokenizer, text)]
        # everything else is the chat template: role prompt, task, passages, turn boundaries
        messages = (
            call.messages if s.role != "answerer" else [*call.messages, {"role": "assistant", "content": outputs[0]}]
        )
        expected = encode_text(tokenizer, render_text(tokenizer, messages, add_generation_prompt=False))
        # our sequence stops after the last action tag: the template's closing <|im_end|>\n is not sampled
        assert expected[: len(s.input_ids)] == s.input_ids
        assert expected[len(s.input_ids)] == end
        # no retrieved passage token is ever in the loss
        info = [
            t
            for t, m in zip(s.input_ids, s.response_mask)
            if m and tokenizer.decode([t]) in ("<information>", "</information>")
        ]
        assert not info


def test_fixed_policy_roles_produce_no_sequences(world, tokenizer, model):
    collector = TeamRolloutCollector(
        hierarchy(), make_policy(model, tokenizer), fixed_policies={"leader": expert_team()}
    )
    batch = collector.collect(world.splits["dev"][:1], 2, seed=0)
    assert {s.role for s in batch.sequences} <= {"searcher", "answerer"}
    assert all(batch.record(0, g).counters.delegation_rounds >= 1 for g in range(2))
