"""``TokenPolicy``: what every token-level LLM policy shares, whatever engine decodes.

A subclass sets ``tokenizer`` (with a chat template), ``sampling`` and the seed stream
(``init_seeds``) and implements ``generate(prompt_ids_batch, n, seeds, sampling, **overrides)``,
which starts with ``request`` and returns one ``Candidate`` list per prompt.
This base turns turns into prompts, hands out seeds, checks a request and writes the records, so
``HFPolicy`` (transformers) and ``VLLMPolicy`` (a vLLM worker) give identical ``AgentOutput``s
for identical candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from transformers import PreTrainedTokenizerBase

from maopd.agents.chat_tokens import prompt_ids
from maopd.agents.sampling import SamplingConfig
from maopd.envs.policy import AgentOutput, AgentTurn


def candidate_seed(seed: int, index: int) -> int:
    """The seed of candidate ``index`` of a prompt whose seed is ``seed``."""
    state = np.random.SeedSequence([int(seed), int(index)]).generate_state(1, dtype=np.uint64)[0]
    return int(state >> np.uint64(1))


class TokenPolicy:
    tokenizer: PreTrainedTokenizerBase
    sampling: SamplingConfig

    def init_seeds(self, seed: int) -> None:
        """Start the policy's own seed stream: one seed per prompt, in request order."""
        self._seeds = np.random.default_rng(seed)

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
            outputs.append(
                AgentOutput(
                    texts=texts,
                    input_tokens=len(prompt),
                    output_tokens=sum(len(c.token_ids) for c in candidates),
                    extra={
                        "prompt_ids": list(prompt),
                        "candidates": [c.as_dict() for c in candidates],
                        "seed": seed,
                        "temperature": self.sampling.temperature,
                    },
                )
            )
        return outputs

    def release_cache(self) -> None:
        """Free what the engine keeps between calls, while it is not needed (by default nothing)."""

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
