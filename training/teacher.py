"""The frozen Teacher π_T of Stage II: log π_T(a_t | h_t) on the Searchers' generated tokens.

For each Searcher response the Teacher is evaluated on the same role prompt, subtask, retrieved
passages and generated prefix as the student (paper, Stage II, Eq. (3)-(5)). That is one prefill
over the student's recorded token ids; the response mask selects the generated tokens and
excludes the retriever's passages, the chat-template tokens and padding (the mask M_t).

The reference of the KL terms (the Leader/Answerer KL-in-reward, a KL loss) is a ``Teacher`` too:
π_T in every variant of the paper, the same model as the OPD Teacher except in "w/ base-model
teacher", whose Teacher is π_0: two frozen models then (``FrozenModels``).

Use the temperature at which the student's log-probs (π_old) were recorded, so that a Teacher
identical to the student gives a log-ratio of zero (exactly with whole-row scoring, to float
rounding with shared prefixes; tested).

Cost: ``score`` runs only the rows it is asked for (``rows``; ``FrozenModels.score`` asks for the
rows a training step's losses read), and runs each distinct prefix once. A team batch repeats a lot: the
G trajectories of a question start with the same Leader prompt, an Answerer call's n candidates
share their prompt, role prompts share their system message, and a row can be a prefix of another.
Rows with the same share key are packed into token trees (``maopd.agents.prefix_tree``), which hold each
distinct prefix once; a row's scores are read from its tree at its tokens and equal those of one
forward per row up to float rounding (tested to 1e-5). For the plain decoders
(``maopd.agents.last_layer``) a tree's last layer runs at the tokens that predict a scored token only,
and a row that shares nothing with its neighbours is a tree of one row too; for other models such
a row is scored by a plain causal forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from maopd.agents.kv_cache import MASK_ATTENTION, attention_implementation
from maopd.agents.last_layer import is_plain_decoder
from maopd.agents.prefix_tree import TokenTree, break_even_pack_tokens, pack_token_trees, tree_logprobs
from maopd.agents.sampling import default_forward_tokens
from maopd.envs.actions import ANSWERER, LEADER
from maopd.training.advantages import role_rows
from maopd.training.token_scoring import TokenBatch, TokenScores, _check, score_tokens


def reference_rows(role_ids: torch.Tensor, kl_in_reward: bool, kl_loss: bool) -> torch.Tensor:
    """The rows whose KL-reference log-probs a step reads: Leaders and Answerers for the
    KL-in-reward, every row for a KL loss term."""
    if kl_loss:
        return torch.ones(len(role_ids), dtype=torch.bool)
    if kl_in_reward:
        return (role_ids == LEADER) | (role_ids == ANSWERER)
    return torch.zeros(len(role_ids), dtype=torch.bool)


def teacher_rows(
    role_ids: torch.Tensor, teacher_roles: Sequence[str], kl_in_reward: bool, kl_loss: bool
) -> torch.Tensor:
    """The rows a model that is both the Teacher and the KL reference scores: those of the roles
    whose estimator reads the Teacher (``teacher_roles``; the Searchers, for OPD) and the
    ``reference_rows``."""
    return reference_rows(role_ids, kl_in_reward, kl_loss) | role_rows(role_ids, teacher_roles)


@dataclass
class FrozenScores:
    """The frozen models' log-probs of one batch, each on the rows it scored (0 elsewhere): the
    Teacher's (``teacher``, None when no estimator reads it) and the KL reference's (``reference``, None without a
    KL term). When one model is both, both name the same tensor and the same rows."""

    teacher: torch.Tensor | None = None
    teacher_rows: torch.Tensor | None = None  # [N] bool
    reference: torch.Tensor | None = None
    reference_rows: torch.Tensor | None = None  # [N] bool


@dataclass
class FrozenModels:
    """The Teacher (of the Searchers' OPD, Eq. 5, in the paper) and the reference of the KL terms;
    one object when one model is both (``maopd.training.model_loading.load_frozen_models``)."""

    teacher: Teacher | None
    reference: Teacher | None

    def score(
        self,
        batch: TokenBatch,
        role_ids: torch.Tensor,
        teacher_roles: Sequence[str],
        kl_in_reward: bool,
        kl_loss: bool,
        share_keys: Sequence[int],
    ) -> FrozenScores:
        """Each model's log-probs on the rows a step reads from it: the Teacher's on the rows of
        ``teacher_roles`` (``TrainConfig.teacher_roles``), the reference's on ``reference_rows``; a
        model that is both scores their union once."""
        if self.teacher is not None and self.teacher is self.reference:
            rows = teacher_rows(role_ids, teacher_roles, kl_in_reward, kl_loss)
            logprobs = self.teacher.score(batch, rows=rows, share_keys=share_keys).logprobs.cpu()
            return FrozenScores(logprobs, rows, logprobs, rows)
        scores = FrozenScores()
        if self.teacher is not None:
            scores.teacher_rows = role_rows(role_ids, teacher_roles)
            scores.teacher = self.teacher.score(batch, rows=scores.teacher_rows, share_keys=share_keys).logprobs.cpu()
        if self.reference is not None:
            scores.reference_rows = reference_rows(role_ids, kl_in_reward, kl_loss)
            scores.reference = self.reference.score(
                batch, rows=scores.reference_rows, share_keys=share_keys
            ).logprobs.cpu()
        return scores


class Teacher:
    """A frozen causal LM that scores recorded token sequences; it never samples or trains.

    Whole rows are scored in groups of similar length, each group cut to its own columns, at most
    ``max_batch_tokens`` padded positions per forward (default 4,096 on CPU, 16,384 elsewhere): one
    call over a whole ``TeamBatch`` (short Answerer calls next to long Leader histories) then costs
    about its real tokens, not rows × longest row. ``share_prefixes`` (default, for models with the
    sdpa or eager attention) scores rows as token trees of at most ``pack_tokens`` tokens (default:
    ``break_even_pack_tokens`` of the model, at most ``max_batch_tokens``), run in blocks of
    ``tree_block`` queries. ``last_layer_at_predictors`` (set for plain decoders) runs a
    tree's last layer at the tokens that predict a scored token only.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        temperature: float = 1.0,
        chunk_tokens: int = 4096,
        max_batch_tokens: int | None = None,
        share_prefixes: bool = True,
        pack_tokens: int | None = None,
        tree_block: int = 256,
    ):
        self.model = model.eval().requires_grad_(False)
        self.temperature = temperature
        self.chunk_tokens = chunk_tokens
        self.max_batch_tokens = default_forward_tokens(model) if max_batch_tokens is None else max_batch_tokens
        self.share_prefixes = share_prefixes and attention_implementation(model) in MASK_ATTENTION
        self.pack_tokens = (
            min(break_even_pack_tokens(model.config), self.max_batch_tokens) if pack_tokens is None else pack_tokens
        )
        self.tree_block = tree_block
        self.last_layer_at_predictors = is_plain_decoder(model)

    @torch.inference_mode()
    def score(
        self,
        batch: TokenBatch,
        with_entropy: bool = False,
        rows: torch.Tensor | Sequence[int] | None = None,
        share_keys: Sequence[int] | None = None,
    ) -> TokenScores:
        """log π_T at every response-masked token of ``batch`` (0 elsewhere), optionally entropy.

        ``rows`` (indices or a boolean mask) limits the scoring to those rows; the others hold 0.
        ``share_keys`` (one per row of the batch): only rows with equal keys share prefixes. The
        trainer passes the question, so how a row is scored does not depend on which other
        questions are in the batch (a rank's share or the whole batch): the scores then match
        across data-parallel layouts as whole-row scores do.
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
        whole_rows = selected.tolist()
        if self.share_prefixes:
            trees = _token_trees(batch, whole_rows, share_keys, self.pack_tokens)
            whole_rows = []
            if not self.last_layer_at_predictors:
                # A tree of one row shares nothing: a causal forward scores it faster. Run layer by
                # layer, its tree saves the last layer at the tokens that predict nothing.
                whole_rows = [row for tree in trees if len(tree.paths) == 1 for row in tree.paths]
                trees = [tree for tree in trees if len(tree.paths) > 1]
            self._score_trees(batch, trees, logprobs, entropy)
        self._score_rows(batch, torch.tensor(whole_rows, dtype=torch.long), logprobs, entropy)
        return TokenScores(logprobs=logprobs, mask=batch.response_mask.bool(), entropy=entropy)

    def _score_rows(self, batch, selected, logprobs, entropy) -> None:
        """Whole-row forwards, in groups of similar length."""
        device = next(self.model.parameters()).device
        lengths = batch.attention_mask.sum(dim=-1)
        order = selected[torch.argsort(lengths[selected], descending=True, stable=True)]
        start = 0
        while start < len(order):
            count = max(1, self.max_batch_tokens // max(int(lengths[order[start]]), 1))
            rows = order[start : start + count]
            columns = batch.attention_mask[rows].any(dim=0).nonzero().squeeze(1)
            span = slice(int(columns.min()), int(columns.max()) + 1) if len(columns) else slice(0, 1)
            group = TokenBatch(
                batch.input_ids[rows, span], batch.attention_mask[rows, span], batch.response_mask[rows, span]
            )
            scores = score_tokens(
                self.model, group.to(device), self.temperature, entropy is not None, self.chunk_tokens
            )
            logprobs[rows, span] = scores.logprobs.cpu()
            if entropy is not None:
                entropy[rows, span] = scores.entropy.cpu()
            start += count

    def _score_trees(self, batch, trees, logprobs, entropy) -> None:
        """Token trees, in forwards of at most ``max_batch_tokens`` padded tokens."""
        trees = sorted(trees, key=lambda tree: -len(tree.ids))
        start = 0
        while start < len(trees):
            count = max(1, self.max_batch_tokens // len(trees[start].ids))
            self._score_tree_batch(batch, trees[start : start + count], logprobs, entropy)
            start += count

    def _score_tree_batch(self, batch, trees, logprobs, entropy) -> None:
        """Score the rows of ``trees`` in one batch of trees: each response-masked column of a row
        is read from the tree node of the token before it."""
        tree_of, node_of, out_rows, out_cols = [], [], [], []
        for i, tree in enumerate(trees):
            for row, path in tree.paths.items():
                columns = batch.response_mask[row].nonzero().squeeze(1)
                # Token t of the row is predicted by the hidden state of its token t - 1.
                first = _real_columns(batch, row).start + 1
                node_of += [path[c - first] for c in columns.tolist()]
                tree_of += [i] * len(columns)
                out_rows.append(torch.full_like(columns, row))
                out_cols.append(columns)
        out_rows, out_cols = torch.cat(out_rows), torch.cat(out_cols)
        values, entropies = tree_logprobs(
            self.model,
            trees,
            torch.tensor(tree_of),
            torch.tensor(node_of),
            batch.input_ids[out_rows, out_cols],
            temperature=self.temperature,
            block=self.tree_block,
            chunk_tokens=self.chunk_tokens,
            last_layer_at_nodes=self.last_layer_at_predictors,
            with_entropy=entropy is not None,
        )
        logprobs.index_put_((out_rows, out_cols), values)
        if entropy is not None:
            entropy.index_put_((out_rows, out_cols), entropies)


def _real_columns(batch: TokenBatch, row: int) -> slice:
    """The batch columns of the row's real tokens, which must be contiguous (``pad_batch`` pads on
    one side)."""
    real = batch.attention_mask[row].nonzero().squeeze(1)
    return slice(int(real.min()), int(real.max()) + 1)


def _token_trees(batch: TokenBatch, rows: list[int], keys: Sequence[int] | None, pack_tokens: int) -> list[TokenTree]:
    """Token trees of the rows (with equal ``keys``, if given) of at most ``pack_tokens`` nodes (a
    longer row is a tree of its own); a row that shares no prefix with its neighbours is a tree of
    one row."""
    by_key: dict[object, list[tuple[list[int], int]]] = {}
    for row in rows:
        tokens = batch.input_ids[row, _real_columns(batch, row)].tolist()
        by_key.setdefault(keys[row] if keys is not None else None, []).append((tokens, row))
    return [tree for members in by_key.values() for tree in pack_token_trees(members, pack_tokens)]
