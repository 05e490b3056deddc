"""Comparing sampled records of two computations of the same model, seeds and prompts."""

import torch


def assert_same_draws(a: dict, b: dict, atol: float = 1e-5) -> None:
    """``a`` and ``b`` (``token_ids``, ``logprobs``, ``finish_reason``) are the same draws: equal
    token for token with log-probabilities within ``atol``, up to a position where the two drew
    different tokens of the same probability (log-probabilities within ``atol``). Batch shapes
    change logits by float rounding, which can order two near-tied tokens either way in the
    sampler's CDF; the draws then legitimately differ from that token on. A different token of a
    different probability is a real difference and fails."""
    ids_a, ids_b = a["token_ids"], b["token_ids"]
    assert len(a["logprobs"]) == len(ids_a) and len(b["logprobs"]) == len(ids_b)
    split = next((i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), None)
    end = min(len(ids_a), len(ids_b)) if split is None else split
    shared = torch.tensor(a["logprobs"][:end]), torch.tensor(b["logprobs"][:end])
    assert torch.allclose(*shared, atol=atol, rtol=0)
    if split is None:
        assert ids_a == ids_b and a["finish_reason"] == b["finish_reason"]
    else:
        assert abs(a["logprobs"][split] - b["logprobs"][split]) <= atol, f"different draws at token {split}"
