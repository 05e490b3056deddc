"""The frozen Teacher π_T of Stage II: log π_T(a_t | h_t) on the Searchers' generated tokens.

For each Searcher response the Teacher is evaluated on the same role prompt, subtask, retrieved
passages and generated prefix as the student (paper, Stage II, Eq. (3)-(5)). That is one prefill
over the student's recorded token ids; the response mask selects the generated tokens and
excludes the retriever's passages, the chat-template tokens and padding (the mask M_t).

Use the temperature at which the student's log-probs (π_old) were recorded, so that a Teacher
identical to the student gives a log-ratio of exactly zero (tested).
"""

from __future__ import annotations

import torch

from training.token_scoring import TokenBatch, TokenScores, score_tokens


class Teacher:
    """A frozen causal LM that scores recorded token sequences; it never samples or trains."""

    def __init__(self, model: torch.nn.Module, temperature: float = 1.0, chunk_tokens: int = 4096):
        self.model = model.eval().requires_grad_(False)
        self.temperature = temperature
        self.chunk_tokens = chunk_tokens

    @torch.inference_mode()
    def score(self, batch: TokenBatch, with_entropy: bool = False) -> TokenScores:
        """log π_T at every response-masked token of ``batch`` (0 elsewhere), optionally entropy."""
        device = next(self.model.parameters()).device
        return score_tokens(
            self.model, batch.to(device), self.temperature, with_entropy, self.chunk_tokens
        )
