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
    """A frozen causal LM that scores recorded token sequences; it never samples or trains.

    Rows are scored in groups of similar length, each group cut to its own columns, at most
    ``max_batch_tokens`` padded positions per forward: one call over a whole ``TeamBatch`` (short
    Answerer calls next to long Leader histories) then costs about its real tokens, not
    rows × longest row.
    """

    def __init__(self, model: torch.nn.Module, temperature: float = 1.0, chunk_tokens: int = 4096,
                 max_batch_tokens: int = 16384):
        self.model = model.eval().requires_grad_(False)
        self.temperature = temperature
        self.chunk_tokens = chunk_tokens
        self.max_batch_tokens = max_batch_tokens

    @torch.inference_mode()
    def score(self, batch: TokenBatch, with_entropy: bool = False) -> TokenScores:
        """log π_T at every response-masked token of ``batch`` (0 elsewhere), optionally entropy."""
        device = next(self.model.parameters()).device
        logprobs = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
        entropy = torch.zeros_like(logprobs) if with_entropy else None
        lengths = batch.attention_mask.sum(dim=-1)
        order = torch.argsort(lengths, descending=True, stable=True)
        start = 0
        while start < len(order):
            count = max(1, self.max_batch_tokens // max(int(lengths[order[start]]), 1))
            rows = order[start:start + count]
            columns = batch.attention_mask[rows].any(dim=0).nonzero().squeeze(1)
            span = slice(int(columns.min()), int(columns.max()) + 1) if len(columns) else slice(0, 1)
            group = TokenBatch(batch.input_ids[rows, span], batch.attention_mask[rows, span],
                               batch.response_mask[rows, span])
            scores = score_tokens(self.model, group.to(device), self.temperature, with_entropy, self.chunk_tokens)
            logprobs[rows, span] = scores.logprobs.cpu()
            if entropy is not None:
                entropy[rows, span] = scores.entropy.cpu()
            start += count
        return TokenScores(logprobs=logprobs, mask=batch.response_mask.bool(), entropy=entropy)
