import json

import pytest
import torch

from maopd.agents.chat_tokens import encode_text, prompt_ids
from maopd.agents.hf_policy import HFPolicy
from maopd.agents.sampling import SamplingConfig, StopMatcher, sample_next_tokens
from maopd.agents.tiny_model import build_tiny_model
from maopd.envs import cascade_search_v1, hierarchical_search_v1
from maopd.envs.episode import run_episode
from maopd.envs.policy import AgentTurn, Policy
from maopd.envs.prompts import system_message, task_message
from maopd.training.token_scoring import pad_batch, score_tokens
from tests.draws import assert_same_draws

TASKS = [
    "capital of France",
    "who wrote Hamlet",
    "the tallest mountain",
    "a",
    "river through Paris",
    "author of the play Hamlet and its year",
    "b c",
    "largest ocean on Earth",
]


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [prompt_ids(tokenizer, [system_message("searcher"), task_message(t)]) for t in TASKS]


def policy(model, tokenizer, **sampling):
    return HFPolicy(model, tokenizer, SamplingConfig(**{"max_new_tokens": 32, **sampling}), seed=3)


def rescore(model, prompts, candidates, temperature):
    sequences = [p + c.token_ids for p, c in zip(prompts, candidates)]
    masks = [[0] * len(p) + [1] * len(c.token_ids) for p, c in zip(prompts, candidates)]
    batch = pad_batch(sequences, masks, pad_id=0)
    with torch.no_grad():
        scores = score_tokens(model, batch, temperature)
    return [scores.logprobs[row][batch.response_mask[row]].tolist() for row in range(len(prompts))]


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [1, 8])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_logprobs_match_a_rescore(model, tokenizer, prompts, batch_size, temperature):
    sampler = policy(model, tokenizer, temperature=temperature, top_p=0.95)
    chosen = prompts[:batch_size]
    candidates = [c for per_prompt in sampler.generate(chosen, n=1) for c in per_prompt]
    assert sum(len(c.token_ids) for c in candidates) > batch_size
    for recorded, rescored in zip((c.logprobs for c in candidates), rescore(model, chosen, candidates, temperature)):
        assert torch.allclose(torch.tensor(recorded), torch.tensor(rescored), atol=1e-4, rtol=0)


@pytest.mark.slow
def test_batching_and_padding_are_invisible(model, tokenizer, prompts):
    sampler = policy(model, tokenizer, temperature=1.0, max_new_tokens=24)
    prompts = prompts[:5]
    seeds = list(range(100, 100 + len(prompts)))
    together = sampler.generate(prompts, n=2, seeds=seeds)
    for prompt, seed, expected in zip(prompts, seeds, together):
        alone = sampler.generate([prompt], n=2, seeds=[seed])[0]
        for a, b in zip(alone, expected):
            assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)
    small_batches = HFPolicy(model, tokenizer, sampler.sampling, max_batch_size=3)
    assert [[c.token_ids for c in p] for p in small_batches.generate(prompts, n=2, seeds=seeds)] == (
        [[c.token_ids for c in p] for p in together]
    )


@pytest.mark.slow
def test_candidates_differ_and_runs_reproduce_from_seed(model, tokenizer, prompts):
    first = policy(model, tokenizer, temperature=1.0).generate(prompts[:1], n=4)[0]
    again = policy(model, tokenizer, temperature=1.0).generate(prompts[:1], n=4)[0]
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    assert len({tuple(c.token_ids) for c in first}) > 1


def boost(model, token_ids, amount):
    """Shift the logits of ``token_ids`` by ``amount`` until the returned handle is removed."""

    def hook(module, args, output):
        output.logits[..., token_ids] += amount
        return output

    return model.register_forward_hook(hook)


@pytest.mark.slow
def test_stops_at_closing_tag_token(model, tokenizer, prompts):
    close = encode_text(tokenizer, "</search>")
    handle = boost(model, close, 6.0)
    try:
        candidates = policy(model, tokenizer, temperature=1.0).generate(prompts, n=1)
    finally:
        handle.remove()
    stopped = [c for (c,) in candidates if c.finish_reason == "stop"]
    assert len(stopped) >= 6
    assert all(c.token_ids[-1] == close[0] and close[0] not in c.token_ids[:-1] for c in stopped)


def test_stops_at_multi_token_stop_string(model, tokenizer, prompts):
    greedy = policy(model, tokenizer, temperature=0.0).generate(prompts[:1])[0][0].token_ids
    stop_text = tokenizer.decode(greedy[6:9])
    assert len(encode_text(tokenizer, stop_text)) > 1
    stopped = policy(model, tokenizer, temperature=0.0, stop_strings=(stop_text,)).generate(prompts[:1])[0][0]
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == greedy[: len(stopped.token_ids)] and len(stopped.token_ids) <= 9
    assert stop_text in tokenizer.decode(stopped.token_ids)
    assert stop_text not in tokenizer.decode(stopped.token_ids[:-1])


def test_eos_length_and_too_long_prompts(model, tokenizer, prompts):
    eos = tokenizer.eos_token_id
    handle = boost(model, [eos], 50.0)
    try:
        ((ended,),) = policy(model, tokenizer).generate(prompts[:1])
    finally:
        handle.remove()
    assert ended.finish_reason == "eos" and ended.token_ids == [eos]

    handle = boost(model, [eos, *StopMatcher(tokenizer, SamplingConfig().stop_strings).token_ids], -1e4)
    try:
        ((long,),) = policy(model, tokenizer, max_new_tokens=7).generate(prompts[:1])
    finally:
        handle.remove()
    assert long.finish_reason == "length" and len(long.token_ids) == 7 == len(long.logprobs)

    short, too_long = policy(model, tokenizer, max_input_tokens=len(prompts[3])).generate([prompts[3], prompts[5]])
    assert short[0].token_ids and too_long[0].finish_reason == "prompt_too_long" and too_long[0].token_ids == []


@pytest.mark.slow
def test_tiny_top_p_is_greedy(model, tokenizer, prompts):
    greedy = policy(model, tokenizer, temperature=0.0).generate(prompts[:3])
    nucleus = policy(model, tokenizer, temperature=1.0, top_p=1e-6).generate(prompts[:3])
    assert [c.token_ids for (c,) in greedy] == [c.token_ids for (c,) in nucleus]


@pytest.mark.slow
def test_act_fills_agent_outputs(model, tokenizer):
    team_policy = policy(model, tokenizer, temperature=1.0)
    assert isinstance(team_policy, Policy)
    turns = [
        AgentTurn(
            "searcher_1",
            "searcher",
            (system_message("searcher"), task_message(t)),
            ("search", "report"),
            num_candidates=n,
        )
        for t, n in (("capital of France", 1), ("who wrote Hamlet", 3))
    ]
    outputs = team_policy.act(turns)
    assert [len(o.texts) for o in outputs] == [1, 3]
    for turn, output in zip(turns, outputs):
        assert output.extra["prompt_ids"] == prompt_ids(tokenizer, turn.messages)
        assert output.input_tokens == len(output.extra["prompt_ids"])
        candidates = output.extra["candidates"]
        assert output.output_tokens == sum(len(c["token_ids"]) for c in candidates)
        for text, candidate in zip(output.texts, candidates):
            assert text == tokenizer.decode(candidate["token_ids"], skip_special_tokens=True)
            assert len(candidate["logprobs"]) == len(candidate["token_ids"])
    # Acting on the same turns one by one consumes the same seeds, so gives the same records.
    one_by_one = policy(model, tokenizer, temperature=1.0)
    for alone, together in zip((one_by_one.act([turn])[0] for turn in turns), outputs):
        assert alone.extra["seed"] == together.extra["seed"]
        for a, b in zip(alone.extra["candidates"], together.extra["candidates"], strict=True):
            assert_same_draws(a, b)


@pytest.mark.slow
def test_bfloat16_generation_rescores_within_bf16_tolerance(tokenizer, prompts):
    model = build_tiny_model(tokenizer, dtype=torch.bfloat16)
    candidates = [c for (c,) in policy(model, tokenizer, temperature=1.0).generate(prompts)]
    for recorded, rescored in zip((c.logprobs for c in candidates), rescore(model, prompts, candidates, 1.0)):
        assert torch.allclose(torch.tensor(recorded), torch.tensor(rescored), atol=0.1, rtol=0)


def test_bad_arguments_are_clear_errors(model, tokenizer, prompts):
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingConfig(temperature=-1)
    sampler = policy(model, tokenizer)
    with pytest.raises(ValueError, match="seeds"):
        sampler.generate(prompts[:2], seeds=[1])
    with pytest.raises(ValueError, match="empty"):
        sampler.generate([[]])
    with pytest.raises(ValueError, match="n must"):
        sampler.generate(prompts[:2], n=[1])


@pytest.mark.slow
@pytest.mark.parametrize("module", [cascade_search_v1, hierarchical_search_v1], ids=lambda m: m.__name__)
def test_plays_whole_episodes_in_the_environments(model, tokenizer, module):
    # a random model never finishes in time: force the finish, so that the Answerer plays too
    env = module.env(num_candidates=2, max_steps=5, force_finish=True)
    record = run_episode(env, policy(model, tokenizer, temperature=1.0, max_new_tokens=8), seed=0)
    json.dumps(record.to_json())
    assert 0 < record.counters.env_steps <= env.max_steps
    assert record.counters.input_tokens > 0 and record.counters.output_tokens > 0
    answerer_calls = [call for call in record.calls if call.role == "answerer"]
    assert answerer_calls and all(len(call.outputs) == 2 for call in answerer_calls)


def test_non_finite_logits_stop_sampling_with_a_clear_error():
    logits = torch.zeros(2, 5)
    logits[1, 3] = float("nan")
    with pytest.raises(FloatingPointError, match="non-finite logits"):
        sample_next_tokens(logits, torch.tensor([0.5, 0.5]), temperature=1.0, top_p=1.0)


def test_descending_order_is_torchs_stable_descending_sort():
    """The CPU radix order equals torch's stable sort: ties (equal probabilities, exact zeros, values
    equal in their high 16 bits) keep vocabulary order."""
    from maopd.agents.sampling import descending_order

    generator = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(64, 789, generator=generator) * 4, dim=-1)
    probs[0, ::3] = probs[0, 5]  # many exact ties
    probs[1, 100:200] = 0.0  # exact zeros (underflow)
    probs[2, :10] = (
        torch.tensor(0.25).view(torch.int32).add(torch.arange(10, dtype=torch.int32)).view(torch.float32)
    )  # same high bits
    assert torch.equal(descending_order(probs), probs.sort(dim=-1, descending=True, stable=True).indices)


@pytest.mark.parametrize("top_p", [1.0, 0.999999])
def test_inverse_cdf_draws_follow_the_distribution(top_p):
    """Top-p 1 samples over the vocabulary in its own order, top-p < 1 over the sorted one: both
    give each token its probability (evenly spaced uniforms hit a token as often as its mass), and
    a uniform at the very top of the CDF never lands on a token of zero probability."""
    logits = torch.tensor([[0.0, 2.0, -1.0, 1.0, -200.0, -200.0]])  # the last two underflow to 0
    probs = torch.softmax(logits, dim=-1)[0]
    draws = 20000
    uniforms = (torch.arange(draws, dtype=torch.float64) + 0.5) / draws
    tokens, logprobs = sample_next_tokens(logits.expand(draws, -1), uniforms.float(), temperature=1.0, top_p=top_p)
    assert torch.allclose(torch.bincount(tokens, minlength=6) / draws, probs, atol=1e-3)
    assert torch.allclose(logprobs, torch.log(probs[tokens]), atol=1e-6)
    top, _ = sample_next_tokens(logits, torch.tensor([1.0]), temperature=1.0, top_p=top_p)  # target = the CDF's top
    assert probs[top] > 0
