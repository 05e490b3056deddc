"""``HFPolicy``: the ``Policy`` protocol over any Hugging Face causal LM and its tokenizer.

``act(turns)`` renders each turn's messages with the tokenizer's chat template, samples
``turn.num_candidates`` continuations per turn in one batch (see ``maopd.agents.sampling`` for how
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
for the rollout collector's token-exact multi-turn calls (``maopd.agents.chat_tokens``).

Engines: ``engine="continuous"`` (default) sends all rows of a call through one
``maopd.agents.decode_engine.DecodeEngine``: ``max_batch_size`` KV-cache slots, a finished row's slot
refilled at once with the next waiting row, the decode step optionally under ``torch.compile``
(``compile="reduce-overhead"`` on GPU: CUDA graphs); a prompt that continues an earlier row of the
policy (a multi-turn call's next turn) reuses that row's stored keys and values. ``engine="chunked"``:
``maopd.agents.sampling.sample_rows`` over fixed chunks of ``max_batch_size`` rows that shrink as rows
finish. Both give the same records, up to float rounding in the log-probs (tested to 1e-5).

Seeds: unless given, each prompt takes the next seed of the policy's own stream (from ``seed``),
in order, so a run is reproducible from its seed, and cutting the same turns into batches
differently does not change any record.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from maopd.agents.decode_engine import DecodeEngine
from maopd.agents.sampling import Candidate, SamplingConfig, StopMatcher, sample_rows
from maopd.agents.token_policy import TokenPolicy, candidate_seed

ENGINES = ("continuous", "chunked")


class HFPolicy(TokenPolicy):
    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        sampling: SamplingConfig | None = None,
        seed: int = 0,
        max_batch_size: int = 32,
        engine: str = "continuous",
        compile: str | None = None,
    ):
        if tokenizer.chat_template is None:
            raise ValueError("HFPolicy needs a tokenizer with a chat template")
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be a positive integer")
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
        if compile and engine != "continuous":
            raise ValueError("compile needs engine='continuous'")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingConfig()
        self.max_batch_size = max_batch_size
        self.engine = engine
        # One engine per policy, so a compiled decode step is compiled once, not per call.
        self.decoder = DecodeEngine(model, slots=max_batch_size, compile=compile) if engine == "continuous" else None
        self.init_seeds(seed)
        self.eos_ids = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos_ids))

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
        if self.decoder is not None:
            candidates = self.decoder.run(
                [prompt_ids_batch[p] for p, _ in rows],
                [candidate_seed(seeds[p], j) for p, j in rows],
                sampling,
                stops,
                self.eos_ids,
                self.pad_id,
            )
            results = dict(zip(rows, candidates))
            return [[results[(p, j)] for j in range(count)] for p, count in enumerate(counts)]
        results: dict[tuple[int, int], Candidate] = {}
        for start in range(0, len(rows), self.max_batch_size):
            chunk = rows[start : start + self.max_batch_size]
            candidates = sample_rows(
                self.model,
                [prompt_ids_batch[p] for p, _ in chunk],
                [candidate_seed(seeds[p], j) for p, j in chunk],
                sampling,
                stops,
                self.eos_ids,
                self.pad_id,
            )
            results.update(zip(chunk, candidates))
        return [[results[(p, j)] for j in range(count)] for p, count in enumerate(counts)]

    def release_cache(self) -> None:
        """Free the decode engine's kept KV cache (only a compiled engine keeps one between calls)
        and its stored prefixes."""
        if self.decoder is not None:
            self.decoder.release()


def _eos_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """The tokenizer's EOS plus any the model's generation config lists (Qwen lists two)."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if config_eos is not None:
        ids |= set(config_eos) if isinstance(config_eos, (list, tuple)) else {config_eos}
    if not ids:
        raise ValueError("neither the tokenizer nor the model defines an EOS token")
    return {int(i) for i in ids}
