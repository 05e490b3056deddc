"""The frozen Teacher π_T of Stage II: log π_T(a_t | h_t) on the Searchers' generated tokens.

For each Searcher response the Teacher is evaluated on the same role prompt, subtask, retrieved
passages and generated prefix as the student (paper, Stage II, Eq. (3)-(5)). That is one prefill
over the student's recorded token ids; the response mask selects the generated tokens and
excludes the retriever's passages, the chat-template tokens and padding (the mask M_t).

Use the temperature at which the student's log-probs (π_old) were recorded, so that a Teacher
identical to the student gives a log-ratio of exactly zero (tested).

Cost: ``score`` runs only the rows it is asked for (``rows``; ``teacher_rows`` says which rows a
training step's losses read), and rows that start with the same prompt (the n candidates of an
Answerer call, the G trajectories' first Leader call of a question) share one prefill of that
prompt: the prompt is run once into a KV cache, which is repeated for each row, and only the rows'
continuations are run over it. Scores equal those of one forward per row up to float rounding
(~1e-6, tested to 1e-5).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from agents.sampling import _cache_keyword, default_forward_tokens
from training.losses import ANSWERER, LEADER, SEARCHER
from training.token_scoring import TokenBatch, TokenScores, _check, score_tokens


def teacher_rows(role_ids: torch.Tensor, searcher_opd: bool, kl_in_reward: bool, kl_loss: bool) -> torch.Tensor:
    """The rows whose Teacher log-probs a step reads: Searchers for OPD, Leaders and Answerers for
    the KL-in-reward, every row for a KL loss term."""
    if kl_loss:
        return torch.ones(len(role_ids), dtype=torch.bool)
    needed = torch.zeros(len(role_ids), dtype=torch.bool)
    if searcher_opd:
        needed |= role_ids == SEARCHER
    if kl_in_reward:
        needed |= (role_ids == LEADER) | (role_ids == ANSWERER)
    return needed


class Teacher:
    """A frozen causal LM that scores recorded token sequences; it never samples or trains.

    Rows are scored in groups of similar length, each group cut to its own columns, at most
    ``max_batch_tokens`` padded positions per forward (default 4,096 on CPU, 16,384 elsewhere): one call over a whole ``TeamBatch`` (short
    Answerer calls next to long Leader histories) then costs about its real tokens, not
    rows × longest row. ``share_prefixes`` (default) scores rows that share their prompt as one
    prefill of the prompt plus the rows' continuations, where the prompt is at least
    ``share_min_prefix_ratio`` of the longest continuation.
    """

    def __init__(self, model: torch.nn.Module, temperature: float = 1.0, chunk_tokens: int = 4096,
                 max_batch_tokens: int | None = None, share_prefixes: bool = True,
                 share_min_prefix_ratio: float = 0.5):
        self.model = model.eval().requires_grad_(False)
        self.temperature = temperature
        self.chunk_tokens = chunk_tokens
        # CPU: 4,096-token forwards score a TeamBatch ~1.6x faster than 16,384-token ones (their
        # attention tensors stay in cache).
        self.max_batch_tokens = default_forward_tokens(model) if max_batch_tokens is None else max_batch_tokens
        self.share_prefixes = share_prefixes
        # A group shares its prompt's prefill only if the prompt is at least this fraction of its
        # longest continuation: the cached continuation pass costs more per token than a
        # whole-row forward (measured on CPU: sharing every group was no faster than none; this
        # rule, 0.5, scored a TeamBatch in ~0.65x the time of either).
        self.share_min_prefix_ratio = share_min_prefix_ratio

    @torch.inference_mode()
    def score(self, batch: TokenBatch, with_entropy: bool = False,
              rows: torch.Tensor | Sequence[int] | None = None,
              share_keys: Sequence[int] | None = None) -> TokenScores:
        """log π_T at every response-masked token of ``batch`` (0 elsewhere), optionally entropy.

        ``rows`` (indices or a boolean mask) limits the scoring to those rows; the others hold 0.
        ``share_keys`` (one per row of the batch): only rows with equal keys share a prompt's
        prefill. The trainer passes the question, so whether a row is scored through a shared
        prefill does not depend on which other questions are in the batch (a rank's share or the
        whole batch): the scores then match across data-parallel layouts as whole-row scores do.
        """
        _check(batch)
        logprobs = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
        entropy = torch.zeros_like(logprobs) if with_entropy else None
        if rows is None:
            selected = torch.arange(len(batch.input_ids))
        else:
            rows = torch.as_tensor(rows)
            selected = rows.nonzero().squeeze(1) if rows.dtype == torch.bool else rows.long()
        selected = selected[batch.response_mask[selected].any(dim=-1)]  # rows with nothing to score cost nothing
        singles = selected.tolist()
        if self.share_prefixes:
            groups, singles = _prefix_groups(batch, singles, share_keys)
            worth = [g for g in groups if g.prefix_length >= self.share_min_prefix_ratio * g.longest_continuation]
            singles += [row for g in groups if g not in worth for row in g.rows]
            groups = worth
            self._score_shared(batch, groups, logprobs, entropy)
        self._score_rows(batch, torch.tensor(singles, dtype=torch.long), logprobs, entropy)
        return TokenScores(logprobs=logprobs, mask=batch.response_mask.bool(), entropy=entropy)

    def _score_rows(self, batch, selected, logprobs, entropy) -> None:
        """Whole-row forwards, in groups of similar length."""
        device = next(self.model.parameters()).device
        lengths = batch.attention_mask.sum(dim=-1)
        order = selected[torch.argsort(lengths[selected], descending=True, stable=True)]
        start = 0
        while start < len(order):
            count = max(1, self.max_batch_tokens // max(int(lengths[order[start]]), 1))
            rows = order[start:start + count]
            columns = batch.attention_mask[rows].any(dim=0).nonzero().squeeze(1)
            span = slice(int(columns.min()), int(columns.max()) + 1) if len(columns) else slice(0, 1)
            group = TokenBatch(batch.input_ids[rows, span], batch.attention_mask[rows, span],
                               batch.response_mask[rows, span])
            scores = score_tokens(self.model, group.to(device), self.temperature, entropy is not None, self.chunk_tokens)
            logprobs[rows, span] = scores.logprobs.cpu()
            if entropy is not None:
                entropy[rows, span] = scores.entropy.cpu()
            start += count

    def _score_shared(self, batch, groups, logprobs, entropy) -> None:
        """Each group: one prefill of the shared prompt, its cache repeated for the group's rows."""
        groups = sorted(groups, key=lambda g: -(g.prefix_length + g.longest_continuation))
        start = 0
        while start < len(groups):
            chosen = [groups[start]]
            while start + len(chosen) < len(groups):
                candidate = chosen + [groups[start + len(chosen)]]
                cost = len(candidate) * max(g.prefix_length for g in candidate) + sum(
                    len(g.rows) for g in candidate) * max(g.longest_continuation for g in candidate)
                if cost > self.max_batch_tokens:
                    break
                chosen = candidate
            self._score_group_batch(batch, chosen, logprobs, entropy)
            start += len(chosen)

    def _score_group_batch(self, batch, groups, logprobs, entropy) -> None:
        model = self.model
        device = next(model.parameters()).device
        if getattr(model.config, "final_logit_softcapping", None):
            raise NotImplementedError("models with logit soft-capping are not supported")
        scale = self.temperature if self.temperature > 0 else 1.0
        # The shared prompts, left-padded: the last column is every prompt's last token.
        width = max(g.prefix_length for g in groups)
        prefix_ids = torch.zeros((len(groups), width), dtype=torch.long)
        prefix_mask = torch.zeros((len(groups), width), dtype=torch.long)
        for i, g in enumerate(groups):
            prefix_ids[i, width - g.prefix_length:] = torch.tensor(g.prompt, dtype=torch.long)
            prefix_mask[i, width - g.prefix_length:] = 1
        positions = (prefix_mask.cumsum(dim=-1) - 1).clamp(min=0)
        cache = DynamicCache(config=model.config)
        keyword = _cache_keyword(model.base_model)
        hidden = model.base_model(input_ids=prefix_ids.to(device), attention_mask=prefix_mask.to(device),
                                  position_ids=positions.to(device), use_cache=True, **{keyword: cache}).last_hidden_state
        last_prefix_hidden = hidden[:, -1]
        # Each row continues its group's prompt: repeat the prompt's cache once per row.
        owner = torch.tensor([i for i, g in enumerate(groups) for _ in g.rows])
        rows = [r for g in groups for r in g.rows]
        cache.batch_select_indices(owner.to(device))
        cont_width = max(g.longest_continuation for g in groups)
        cont_ids = torch.zeros((len(rows), cont_width), dtype=torch.long)
        cont_mask = torch.zeros((len(rows), cont_width), dtype=torch.long)
        cont_response = torch.zeros((len(rows), cont_width), dtype=torch.bool)
        begins = [b for g in groups for b in g.begins]
        ends = [e for g in groups for e in g.ends]
        for k, (row, begin, end) in enumerate(zip(rows, begins, ends)):
            cont_ids[k, :end - begin] = batch.input_ids[row, begin:end]
            cont_mask[k, :end - begin] = 1
            cont_response[k, :end - begin] = batch.response_mask[row, begin:end].bool()
        prefix_lengths = torch.tensor([g.prefix_length for g in groups])[owner]
        cont_positions = prefix_lengths[:, None] + torch.arange(cont_width)[None, :]
        full_mask = torch.cat([prefix_mask[owner], cont_mask], dim=1)
        cont_hidden = model.base_model(input_ids=cont_ids.to(device), attention_mask=full_mask.to(device),
                                       position_ids=cont_positions.to(device), use_cache=True,
                                       **{keyword: cache}).last_hidden_state
        # Continuation token t is predicted by the hidden state before it: the prompt's last one
        # for t = 0, the continuation's t - 1 otherwise.
        predictors_all = torch.cat([last_prefix_hidden[owner.to(device)][:, None], cont_hidden[:, :-1]], dim=1)
        k_index, t_index = cont_response.nonzero(as_tuple=True)
        predictors = predictors_all[k_index.to(device), t_index.to(device)]
        targets = cont_ids[k_index, t_index].to(device)
        head = model.get_output_embeddings()
        values, entropies = [], []
        for start in range(0, len(targets), self.chunk_tokens):
            chunk_logprobs = torch.log_softmax(head(predictors[start:start + self.chunk_tokens]).float() / scale, dim=-1)
            values.append(chunk_logprobs.gather(1, targets[start:start + self.chunk_tokens, None]).squeeze(1))
            if entropy is not None:
                entropies.append(-(chunk_logprobs.exp() * chunk_logprobs).sum(dim=-1))
        out_rows = torch.tensor(rows)[k_index]
        out_cols = torch.tensor(begins)[k_index] + t_index
        logprobs.index_put_((out_rows, out_cols), torch.cat(values).cpu())
        if entropy is not None:
            entropy.index_put_((out_rows, out_cols), torch.cat(entropies).cpu())


class _Group:
    """Rows that share their prompt (the tokens before their first response token)."""

    __slots__ = ("begins", "ends", "prompt", "rows")

    def __init__(self, prompt: list[int], rows: list[int], begins: list[int], ends: list[int]):
        self.prompt, self.rows, self.begins, self.ends = prompt, rows, begins, ends

    @property
    def prefix_length(self) -> int:
        return len(self.prompt)

    @property
    def longest_continuation(self) -> int:
        return max(e - b for b, e in zip(self.begins, self.ends))


def _prefix_groups(batch: TokenBatch, rows: list[int],
                   keys: Sequence[int] | None = None) -> tuple[list[_Group], list[int]]:
    """Groups of 2+ rows (with equal ``keys``, if given) whose tokens before their first response
    token are identical, and the other rows. A row's real tokens must be contiguous (``pad_batch``
    pads on one side)."""
    by_prompt: dict[tuple, list[tuple[int, int, int]]] = {}
    for row in rows:
        real = batch.attention_mask[row].nonzero().squeeze(1)
        first, end = int(real.min()), int(real.max()) + 1
        begin = int(batch.response_mask[row].nonzero().min())
        prompt = tuple(batch.input_ids[row, first:begin].tolist())
        by_prompt.setdefault((keys[row] if keys is not None else None, prompt), []).append((row, begin, end))
    groups, singles = [], []
    for (_, prompt), members in by_prompt.items():
        if len(members) < 2:
            singles += [row for row, _, _ in members]
        else:
            groups.append(_Group(list(prompt), *(list(column) for column in zip(*members))))
    return groups, singles
