"""Batched token sampling with a KV cache, recording the log-prob of every sampled token.

``sample_rows`` generates one continuation per row (a prompt's token ids plus a seed). It is our
own loop over ``model(..., past_key_values=...)`` rather than ``model.generate`` so that what is
recorded is exactly what was sampled:

* **Log-probs** are ``log softmax(logits / temperature)`` of the sampled token: the policy's
  temperature-scaled distribution, *before* top-p truncation. That is the π_old of PPO, since a
  trainer recomputes it with one forward pass and the same temperature (``maopd.training.token_scoring``
  does; re-scoring matches these log-probs, tested). The token itself is drawn from the top-p
  truncated, renormalised distribution, as vLLM and the paper's evaluation do; like verl we do not
  correct for that truncation. Temperature 0 means greedy decoding, and the recorded log-probs are
  then those of the untempered policy.
* **Batching is invisible**: each row draws its uniforms from its own generator, seeded by the
  row's seed, and samples by inverse CDF over the vocabulary sorted by probability (stable sort;
  in the vocabulary's own order when top-p is 1 and nothing is truncated).
  A row's tokens therefore depend only on its prompt and seed, not on the other rows or on padding.
  Left padding changes the floating-point sums of a row in their last bits, which changes a token
  only if its uniform lies that close to a CDF boundary.
* **Stops**: a row ends at an EOS token (kept, ``finish_reason="eos"``), at a stop string such as
  ``</search>`` (``"stop"``; matched by token id when the string is one token, else by decoding the
  row's last tokens, so any tokenizer works; the token that completes the string is kept whole),
  or after ``max_new_tokens`` (``"length"``). Prompts longer than ``max_input_tokens`` are not run
  (``"prompt_too_long"``, no tokens) rather than silently truncated.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedTokenizerBase

from maopd.agents.kv_cache import cache_keyword
from maopd.envs.actions import STOP_STRINGS
from maopd.envs.policy import SamplingSettings

FINISH_REASONS = ("eos", "stop", "length", "prompt_too_long")


@dataclass
class SamplingConfig(SamplingSettings):
    """Per-call sampling settings; the defaults are the paper's evaluation settings."""

    stop_strings: tuple[str, ...] = STOP_STRINGS

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stop_strings = tuple(self.stop_strings)
        if any(not isinstance(s, str) or not s for s in self.stop_strings):
            raise ValueError("SamplingConfig.stop_strings must be non-empty strings")


@dataclass
class Candidate:
    """One sampled continuation: its token ids, their log-probs, and why it ended."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"

    def as_dict(self) -> dict:
        return asdict(self)


class StopMatcher:
    """Tells whether a row's generated ids now end a stop string."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stop_strings: Iterable[str]):
        self.tokenizer = tokenizer
        self.token_ids: set[int] = set()
        self.strings: list[str] = []
        for stop in stop_strings:
            ids = tokenizer(stop, add_special_tokens=False)["input_ids"]
            if len(ids) == 1 and tokenizer.decode(ids) == stop:
                self.token_ids.add(ids[0])
            else:
                self.strings.append(stop)
        # A token holds at least one byte, so a stop string of b bytes spans at most b tokens;
        # one more token covers a string that starts inside a token.
        self.window = max((len(s.encode()) for s in self.strings), default=0) + 1

    def stopped(self, generated: Sequence[int]) -> bool:
        if generated[-1] in self.token_ids:
            return True
        if not self.strings:
            return False
        # Earlier tokens cannot hold a whole stop string: generation would have ended there.
        tail = self.tokenizer.decode(generated[-self.window :])
        return any(stop in tail for stop in self.strings)


def descending_order(probs: torch.Tensor) -> torch.Tensor:
    """The permutation of ``probs.sort(dim=-1, descending=True, stable=True)`` for non-negative
    float32 probabilities. On CPU it is computed as two stable 16-bit radix passes over the values'
    bits (a non-negative float orders as its bit pattern), which cost less than torch's CPU sort of
    a few dozen rows of a vocabulary (docs/llm_policy.md)."""
    if probs.device.type != "cpu" or probs.dtype != torch.float32:
        return probs.sort(dim=-1, descending=True, stable=True).indices
    keys = ~probs.numpy().view(np.uint32)  # ascending keys = descending probabilities
    by_low = np.argsort((keys & 0xFFFF).astype(np.uint16), axis=-1, kind="stable")
    high = np.take_along_axis((keys >> 16).astype(np.uint16), by_low, axis=-1)
    return torch.from_numpy(np.take_along_axis(by_low, np.argsort(high, axis=-1, kind="stable"), axis=-1))


def sample_next_tokens(
    logits: torch.Tensor, uniforms: torch.Tensor, temperature: float, top_p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of ``logits`` (R, V) by inverse CDF with ``uniforms`` (R,).

    Returns the tokens and their log-probs under ``log_softmax(logits / temperature)`` (the
    untempered log-softmax when temperature is 0, which samples greedily).
    """
    logits = logits.float()
    if not torch.isfinite(logits).all():
        raise FloatingPointError("non-finite logits while sampling: the policy's weights or activations hold NaN/inf")
    if temperature == 0:
        logprobs = torch.log_softmax(logits, dim=-1)
        tokens = logits.argmax(dim=-1)
        return tokens, logprobs.gather(1, tokens[:, None]).squeeze(1)
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    probs = logprobs.exp()
    if top_p >= 1:  # nothing to truncate: the inverse CDF over the vocabulary in its own order
        cdf = probs.cumsum(dim=-1)
        index = torch.searchsorted(cdf, (uniforms.to(cdf) * cdf[:, -1])[:, None], right=True)
        # Float rounding can put a target at the very top of the CDF: take the last likely token.
        tokens = torch.minimum(index, (cdf < cdf[:, -1:]).sum(dim=-1, keepdim=True)).squeeze(1)
        return tokens, logprobs.gather(1, tokens[:, None]).squeeze(1)
    order = descending_order(probs)
    sorted_probs = probs.gather(1, order)
    # Keep the smallest prefix whose mass reaches top_p: a token is kept if the mass strictly
    # before it is below top_p, so the most likely token is always kept.
    kept = (sorted_probs.cumsum(dim=-1) - sorted_probs) < top_p
    cdf = (sorted_probs * kept).cumsum(dim=-1)
    targets = uniforms.to(cdf) * cdf[:, -1]
    index = torch.searchsorted(cdf, targets[:, None], right=True)
    # Float rounding can put a target at the very top of the CDF; stay inside the kept tokens.
    index = torch.minimum(index, kept.sum(dim=-1, keepdim=True) - 1)
    tokens = order.gather(1, index).squeeze(1)
    return tokens, logprobs.gather(1, tokens[:, None]).squeeze(1)


CPU_FORWARD_TOKENS = 4096  # on CPU smaller forwards run faster: their attention tensors stay in cache
GPU_FORWARD_TOKENS = 16384  # GPUs want large batches


def default_forward_tokens(model: torch.nn.Module) -> int:
    """Tokens per batched forward (a prefill, a Teacher scoring pass) for ``model``'s device."""
    on_cpu = next(model.parameters()).device.type == "cpu"
    return CPU_FORWARD_TOKENS if on_cpu else GPU_FORWARD_TOKENS


def row_uniforms(seeds: Sequence[int], steps: int) -> torch.Tensor:
    """(R, steps) uniforms; row r comes from its own CPU generator seeded with ``seeds[r]``."""
    rows = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(int(seed))
        rows.append(torch.rand(steps, generator=generator))
    return torch.stack(rows)


class SampledRows:
    """The candidates of one sampling call, one per (prompt, seed) row, as both engines draw them.

    ``results`` holds an empty ``Candidate`` per row and ``runnable`` the rows to run: a prompt over
    ``max_input_tokens`` is not run (``prompt_too_long``) rather than silently truncated; an empty
    prompt is an error. ``record`` draws the next token of some rows with each row's own uniforms,
    so a row's tokens do not depend on which rows share its forward.
    """

    def __init__(
        self,
        prompts: Sequence[Sequence[int]],
        seeds: Sequence[int],
        sampling: SamplingConfig,
        stops: StopMatcher,
        eos_ids: Iterable[int],
        device: torch.device,
    ):
        if len(prompts) != len(seeds):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")
        self.results = [Candidate() for _ in prompts]
        self.runnable: list[int] = []
        for row, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError(f"prompt {row} is empty; a prompt needs at least one token")
            if len(prompt) > sampling.max_input_tokens:
                self.results[row].finish_reason = "prompt_too_long"
            else:
                self.runnable.append(row)
        self.sampling, self.stops, self.eos = sampling, stops, set(eos_ids)
        self.uniform_row = {row: i for i, row in enumerate(self.runnable)}
        if self.runnable:
            self.uniforms = row_uniforms([seeds[r] for r in self.runnable], sampling.max_new_tokens).to(device)

    def record(self, rows: Sequence[int], logits: torch.Tensor) -> tuple[torch.Tensor, list[bool]]:
        """Sample the next token of each of ``rows`` from its row of ``logits`` and append it with
        its log-prob; return the tokens and which rows ended (EOS, a stop string, ``max_new_tokens``)."""
        steps = [len(self.results[r].token_ids) for r in rows]
        uniforms = self.uniforms[[self.uniform_row[r] for r in rows], steps]
        tokens, logprobs = sample_next_tokens(logits, uniforms, self.sampling.temperature, self.sampling.top_p)
        ended = []
        for row, token, logprob in zip(rows, tokens.tolist(), logprobs.tolist()):
            candidate = self.results[row]
            candidate.token_ids.append(token)
            candidate.logprobs.append(logprob)
            if token in self.eos:
                reason = "eos"
            elif self.stops.stopped(candidate.token_ids):
                reason = "stop"
            elif len(candidate.token_ids) == self.sampling.max_new_tokens:
                reason = "length"
            else:
                reason = None
            if reason is not None:
                candidate.finish_reason = reason
            ended.append(reason is not None)
        return tokens, ended


def _left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids.to(device), mask.to(device)


@torch.inference_mode()
def sample_rows(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    seeds: Sequence[int],
    sampling: SamplingConfig,
    stops: StopMatcher,
    eos_ids: Iterable[int],
    pad_id: int,
) -> list[Candidate]:
    """Generate one candidate per (prompt, seed) row, in one left-padded batch with a KV cache.

    Rows that finish are dropped from the batch (and from the cache) so they cost nothing more.
    """
    device = next(model.parameters()).device
    rows = SampledRows(prompts, seeds, sampling, stops, eos_ids, device)
    if not rows.runnable:
        return rows.results
    ids, mask = _left_pad([prompts[r] for r in rows.runnable], pad_id, device)
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
    active = list(rows.runnable)  # batch row -> row in `prompts`
    # The cache is filled in place by every forward call.
    cache = DynamicCache(config=model.config)
    cache_arg = {cache_keyword(model): cache}
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1, **cache_arg
    ).logits[:, -1]
    next_position = positions[:, -1] + 1
    while True:
        tokens, ended = rows.record(active, logits)
        if all(ended):
            return rows.results
        if any(ended):
            keep = torch.tensor([b for b, end in enumerate(ended) if not end], dtype=torch.long, device=device)
            cache.batch_select_indices(keep)
            active = [row for row, end in zip(active, ended) if not end]
            tokens, mask, next_position = tokens[keep], mask[keep], next_position[keep]
        mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=-1)
        logits = model(
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=next_position[:, None],
            use_cache=True,
            **cache_arg,
        ).logits[:, -1]
        next_position = next_position + 1
