"""``HFPolicy``: the ``Policy`` protocol over any Hugging Face causal LM and its tokenizer.

``act(turns)`` renders each turn's messages with the tokenizer's chat template, samples
``turn.num_candidates`` continuations per turn in one batch (see ``agents.sampling`` for how
tokens and log-probs are drawn and recorded), and returns the decoded texts with the token-level
record in ``AgentOutput.extra``:

``extra["prompt_ids"]``   the prompt's token ids
``extra["candidates"]``   one dict per text: ``token_ids``, ``logprobs`` (temperature-scaled
                          policy, before top-p), ``finish_reason`` (eos/stop/length/
                          prompt_too_long)
``extra["seed"]``         the turn's seed; candidate j used ``candidate_seed(seed, j)``
``extra["temperature"]``  the temperature the log-probs were taken at

``input_tokens`` is the prompt length (once per call, however many candidates) and
``output_tokens`` the total of the candidates' ids, EOS included, as in the paper's records.

``generate(prompt_ids_batch, n, seeds)`` is the lower-level entry that takes token ids directly,
for the rollout collector's token-exact multi-turn calls (``agents.chat_tokens``).

Seeds: unless given, each prompt takes the next seed of the policy's own stream (from ``seed``),
in order, so a run is reproducible from its seed, and cutting the same turns into batches
differently does not change any record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from agents.chat_tokens import prompt_ids
from agents.sampling import Candidate, SamplingConfig, StopMatcher, sample_rows
from envs.policy import AgentOutput, AgentTurn


def candidate_seed(seed: int, index: int) -> int:
    """The seed of candidate ``index`` of a prompt whose seed is ``seed``."""
    state = np.random.SeedSequence([int(seed), int(index)]).generate_state(1, dtype=np.uint64)[0]
    return int(state >> np.uint64(1))


class HFPolicy:
    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        sampling: SamplingConfig | None = None,
        seed: int = 0,
        max_batch_size: int = 32,
    ):
        if tokenizer.chat_template is None:
            raise ValueError("HFPolicy needs a tokenizer with a chat template")
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be a positive integer")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingConfig()
        self.max_batch_size = max_batch_size
        self._seeds = np.random.default_rng(seed)
        self.eos_ids = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos_ids))

    def next_seeds(self, count: int) -> list[int]:
        """The next ``count`` seeds of the policy's stream."""
        return [int(s) for s in self._seeds.integers(0, 2**63 - 1, size=count)]

    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        prompts = [prompt_ids(self.tokenizer, turn.messages) for turn in turns]
        seeds = self.next_seeds(len(turns))
        per_turn = self.generate(prompts, [turn.num_candidates for turn in turns], seeds)
        outputs = []
        for prompt, seed, candidates in zip(prompts, seeds, per_turn):
            texts = [self.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in candidates]
            outputs.append(AgentOutput(
                texts=texts,
                input_tokens=len(prompt),
                output_tokens=sum(len(c.token_ids) for c in candidates),
                extra={
                    "prompt_ids": list(prompt),
                    "candidates": [c.as_dict() for c in candidates],
                    "seed": seed,
                    "temperature": self.sampling.temperature,
                },
            ))
        return outputs

    def request(
        self,
        prompt_ids_batch: Sequence[Sequence[int]],
        n: int | Sequence[int],
        seeds: Sequence[int] | None,
        sampling: SamplingConfig | None,
        **overrides,
    ) -> tuple[list[int], list[int], SamplingConfig]:
        """Checked per-prompt candidate counts, seeds and sampling settings of a ``generate`` call."""
        counts = [n] * len(prompt_ids_batch) if isinstance(n, int) else list(n)
        if len(counts) != len(prompt_ids_batch) or any(c < 1 for c in counts):
            raise ValueError("n must be a positive count, or one positive count per prompt")
        seeds = self.next_seeds(len(prompt_ids_batch)) if seeds is None else list(seeds)
        if len(seeds) != len(prompt_ids_batch):
            raise ValueError(f"{len(prompt_ids_batch)} prompts but {len(seeds)} seeds")
        return counts, seeds, replace(sampling or self.sampling, **overrides)

    def generate(
        self,
        prompt_ids_batch: Sequence[Sequence[int]],
        n: int | Sequence[int] = 1,
        seeds: Sequence[int] | None = None,
        sampling: SamplingConfig | None = None,
        **overrides,
    ) -> list[list[Candidate]]:
        """``n`` candidates for each prompt (``n`` may differ per prompt), as ``Candidate`` lists.

        ``sampling`` replaces the policy's settings for this call; keyword ``overrides`` (for
        example ``temperature=1.0``) change single fields of them.
        """
        counts, seeds, sampling = self.request(prompt_ids_batch, n, seeds, sampling, **overrides)
        stops = StopMatcher(self.tokenizer, sampling.stop_strings)

        rows = [(p, j) for p, count in enumerate(counts) for j in range(count)]
        # Similar lengths batch together, which saves padding; records do not depend on it.
        rows.sort(key=lambda row: len(prompt_ids_batch[row[0]]))
        results: dict[tuple[int, int], Candidate] = {}
        for start in range(0, len(rows), self.max_batch_size):
            chunk = rows[start:start + self.max_batch_size]
            candidates = sample_rows(
                self.model,
                [prompt_ids_batch[p] for p, _ in chunk],
                [candidate_seed(seeds[p], j) for p, j in chunk],
                sampling, stops, self.eos_ids, self.pad_id,
            )
            results.update(zip(chunk, candidates))
        return [[results[(p, j)] for j in range(count)] for p, count in enumerate(counts)]


def _eos_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """The tokenizer's EOS plus any the model's generation config lists (Qwen lists two)."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if config_eos is not None:
        ids |= set(config_eos) if isinstance(config_eos, (list, tuple)) else {config_eos}
    if not ids:
        raise ValueError("neither the tokenizer nor the model defines an EOS token")
    return {int(i) for i in ids}
