"""The continuous decode engine gives the chunked path's records, whatever its slots and refills."""

import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from maopd.agents.chat_tokens import encode_text
from maopd.agents.decode_engine import DecodeEngine, PrefixStore
from maopd.agents.hf_policy import HFPolicy
from maopd.agents.sampling import SamplingConfig, StopMatcher
from maopd.agents.tiny_model import build_tiny_model
from tests.draws import assert_same_draws


def random_prompts(tokenizer, count, seed=0, longest=60):
    rng = random.Random(seed)
    vocab = len(tokenizer)
    return [[rng.randrange(3, vocab) for _ in range(rng.randrange(2, longest))] for _ in range(count)]


def boost(model, token_ids, amount):
    def hook(module, args, output):
        output.logits[..., token_ids] += amount
        return output

    return model.register_forward_hook(hook)


def generate(model, tokenizer, prompts, n, engine, slots, sampling, **kwargs):
    policy = HFPolicy(model, tokenizer, sampling, seed=0, max_batch_size=slots, engine=engine, **kwargs)
    return policy.generate(prompts, n=n, seeds=list(range(1000, 1000 + len(prompts))))


def assert_same(expected, got, atol=1e-5):
    assert len(expected) == len(got)
    for per_prompt_a, per_prompt_b in zip(expected, got):
        assert len(per_prompt_a) == len(per_prompt_b)
        for a, b in zip(per_prompt_a, per_prompt_b):
            assert_same_draws(vars(a), vars(b), atol)


@pytest.mark.slow
@pytest.mark.parametrize("slots", [3, 7, 64])
def test_continuous_engine_matches_the_chunked_path_with_refills_stops_and_eos(model, tokenizer, slots):
    prompts = random_prompts(tokenizer, 17)
    prompts.append(list(range(3, 3 + 70)))  # over max_input_tokens: prompt_too_long, no tokens
    sampling = SamplingConfig(temperature=1.0, top_p=0.95, max_new_tokens=24, max_input_tokens=64)
    close = encode_text(tokenizer, "</search>")
    handles = [boost(model, close, 3.0), boost(model, [tokenizer.eos_token_id], 2.5)]
    try:
        chunked = generate(model, tokenizer, prompts, 2, "chunked", 5, sampling)
        continuous = generate(model, tokenizer, prompts, 2, "continuous", slots, sampling)
    finally:
        for handle in handles:
            handle.remove()
    reasons = [c.finish_reason for per_prompt in continuous for c in per_prompt]
    assert {"eos", "stop", "length", "prompt_too_long"} <= set(reasons)
    assert_same(chunked, continuous)


@pytest.mark.slow
def test_slot_count_and_refill_batching_do_not_change_records(model, tokenizer):
    prompts = random_prompts(tokenizer, 11, seed=1)
    sampling = SamplingConfig(temperature=0.8, top_p=0.9, max_new_tokens=16)
    stops = StopMatcher(tokenizer, sampling.stop_strings)
    seeds = list(range(len(prompts)))
    runs = [
        DecodeEngine(model, slots=slots, refill_fraction=fraction, max_prefill_tokens=budget).run(
            prompts, seeds, sampling, stops, [tokenizer.eos_token_id], 0
        )
        for slots, fraction, budget in ((1, 0.1, 16384), (4, 0.5, 16384), (5, 0.1, 40), (11, 1.0, 16384))
    ]
    for other in runs[1:]:
        assert_same([runs[0]], [other])


@pytest.mark.slow
def test_multi_token_stop_string_and_eager_attention(tokenizer):
    model = build_tiny_model(tokenizer)
    model.config._attn_implementation = "eager"
    prompts = random_prompts(tokenizer, 6, seed=2)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=20)
    first = generate(model, tokenizer, prompts[:1], 1, "chunked", 4, greedy)[0][0].token_ids
    stop_text = tokenizer.decode(first[5:8])
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=20, stop_strings=(stop_text,))
    chunked = generate(model, tokenizer, prompts, 2, "chunked", 4, sampling)
    continuous = generate(model, tokenizer, prompts, 2, "continuous", 3, sampling)
    assert_same(chunked, continuous)
    assert (
        generate(model, tokenizer, prompts[:1], 1, "continuous", 3, replace_stop(greedy, stop_text))[0][0].finish_reason
        == "stop"
    )


def replace_stop(sampling, stop_text):
    return SamplingConfig(
        temperature=sampling.temperature, max_new_tokens=sampling.max_new_tokens, stop_strings=(stop_text,)
    )


@pytest.mark.slow
def test_compiled_decode_step_matches_on_cpu(model, tokenizer):
    """The GPU configuration (torch.compile, fixed slots, power-of-two widths) at tiny size on CPU,
    with inductor ("default"; "reduce-overhead" adds CUDA graphs, which need a GPU)."""
    torch._dynamo.reset()
    prompts = random_prompts(tokenizer, 9, seed=3, longest=30)
    sampling = SamplingConfig(temperature=1.0, top_p=0.95, max_new_tokens=12)
    chunked = generate(model, tokenizer, prompts, 1, "chunked", 4, sampling)
    policy = HFPolicy(model, tokenizer, sampling, seed=0, max_batch_size=4, compile="default")
    seeds = list(range(1000, 1000 + len(prompts)))
    assert_same(chunked, policy.generate(prompts, n=1, seeds=seeds), atol=1e-4)
    kept = policy.decoder._cache
    assert kept is not None and policy.decoder.compile_error is None
    # A second call reuses the kept cache (same static buffers for CUDA graphs); release frees it.
    assert_same(chunked[:5], policy.generate(prompts[:5], n=1, seeds=seeds[:5]), atol=1e-4)
    assert policy.decoder._cache is kept
    # Continued prompts start from stored prefixes, then decode in the compiled step.
    continued = [p + c.token_ids + [5, 6] for p, (c,) in zip(prompts[:5], chunked)]
    expected = generate(model, tokenizer, continued, 1, "chunked", 4, sampling)
    reused = policy.decoder.stats["reused_tokens"]
    assert_same(expected, policy.generate(continued, n=1, seeds=seeds[:5]), atol=1e-4)
    assert policy.decoder.stats["reused_tokens"] > reused and policy.decoder.compile_error is None
    policy.release_cache()
    assert policy.decoder._cache is None


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_continued_prompts_reuse_stored_prefixes_with_the_same_records(tokenizer, attention):
    """A multi-turn call's next prompt (prompt + generated ids + inserted ids) reuses the finished
    row's keys and values, so only the inserted ids run; the records equal the chunked path's.
    Changed weights empty the store."""
    model = build_tiny_model(tokenizer)
    model.config._attn_implementation = attention
    prompts = random_prompts(tokenizer, 8, seed=4)
    sampling = SamplingConfig(temperature=1.0, top_p=0.95, max_new_tokens=12)
    policy = HFPolicy(model, tokenizer, sampling, seed=0, max_batch_size=3)
    assert policy.decoder.last_layer_at_last_token  # prefills run the last layer at their last token only
    first = policy.generate(prompts, n=1, seeds=list(range(100, 108)))
    rng = random.Random(5)
    continued = [
        p + c.token_ids + [rng.randrange(3, len(tokenizer)) for _ in range(rng.randrange(1, 20))]
        for p, (c,) in zip(prompts, first)
    ]
    continued.append(list(continued[0]))  # identical prompts share one prefill row, as in prefill
    counts, seeds = [1] * 8 + [2], list(range(200, 209))
    chunked = HFPolicy(model, tokenizer, sampling, engine="chunked").generate(continued, n=counts, seeds=seeds)
    policy.decoder.stats["reused_tokens"] = 0
    assert_same(chunked, policy.generate(continued, n=counts, seeds=seeds))
    # Every stored prefix is reused (row 0's prompt again for the repeated prompt's candidates
    # that do not share its prefill: 3 slots admit them apart).
    stored = sum(len(p) + len(c.token_ids) - 1 for p, (c,) in zip(prompts, first))
    reused = policy.decoder.stats["reused_tokens"]
    assert stored <= reused <= stored + 2 * (len(prompts[0]) + len(first[0][0].token_ids) - 1)
    with torch.no_grad():
        next(model.parameters()).add_(0.0)  # an in-place update, as an optimizer step makes
    assert_same(chunked, policy.generate(continued, n=counts, seeds=seeds))
    assert policy.decoder.stats["reused_tokens"] == reused
    policy.release_cache()
    assert not policy.decoder.prefixes.entries


@pytest.mark.slow
def test_llama_prefills_run_the_last_layer_at_the_last_token(tokenizer):
    """Another plain decoder (Llama, grouped-query heads): fresh and continued prompts give the
    chunked path's records, and a forward hook on the model (it may change the logits) makes the
    engine run prefills whole."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    prompts = random_prompts(tokenizer, 6, seed=6)
    sampling = SamplingConfig(temperature=1.0, top_p=0.95, max_new_tokens=10)
    policy = HFPolicy(model, tokenizer, sampling, seed=0, max_batch_size=4)
    assert policy.decoder.last_layer_at_last_token
    first = policy.generate(prompts, n=2, seeds=list(range(1000, 1006)))
    assert_same(generate(model, tokenizer, prompts, 2, "chunked", 4, sampling), first)
    continued = [p + c.token_ids + [7, 8, 9] for p, (c, _) in zip(prompts, first)]
    assert_same(
        generate(model, tokenizer, continued, 1, "chunked", 4, sampling),
        policy.generate(continued, n=1, seeds=list(range(1000, 1006))),
    )
    assert policy.decoder.stats["reused_tokens"] > 0
    handle = boost(model, [tokenizer.eos_token_id], 50.0)
    try:
        assert all(c.token_ids == [tokenizer.eos_token_id] for (c,) in policy.generate(prompts, n=1))
    finally:
        handle.remove()


def test_prefix_store_budget_evicts_the_oldest_entries():
    store = PrefixStore(budget_bytes=3 * 4 * 8)  # three entries of 2 x 4 floats

    def kv():
        return [torch.zeros(1, 4)], [torch.zeros(1, 4)]

    for first in range(4):
        store.add([first, 7, 8], kv())
    assert store.find([0, 7, 8, 9]) is None and store.find([3, 7, 8, 9])[1] == 3
    assert store.find([3, 7, 8])[1] == 2  # the prompt's last token always runs
    assert store.find([3, 7]) is None and store.bytes == 3 * 4 * 8


@pytest.mark.slow
def test_eager_engine_keeps_its_cache_until_weights_change_or_a_run_fails(tokenizer):
    model = build_tiny_model(tokenizer)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6)
    policy = HFPolicy(model, tokenizer, sampling, seed=0, max_batch_size=4)
    prompts = random_prompts(tokenizer, 5, seed=6)
    policy.generate(prompts)
    kept = policy.decoder._cache
    policy.generate(prompts[:2])
    assert kept is not None and policy.decoder._cache is kept
    with torch.no_grad():
        next(model.parameters()).mul_(1.0)
    policy.generate(prompts[:2])
    assert policy.decoder._cache is not kept
    handle = boost(model, [5], float("nan"))
    try:
        with pytest.raises(FloatingPointError):
            policy.generate(prompts[:2])
    finally:
        handle.remove()
    assert policy.decoder._cache is None


def test_bad_engine_settings_are_clear_errors(model, tokenizer):
    with pytest.raises(ValueError, match="engine"):
        HFPolicy(model, tokenizer, engine="paged")
    with pytest.raises(ValueError, match="compile"):
        HFPolicy(model, tokenizer, engine="chunked", compile="default")
    with pytest.raises(ValueError, match="slot"):
        DecodeEngine(model, slots=0)
