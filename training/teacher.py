"""The frozen Teacher π_T of Stage II: log π_T(a_t | h_t) on the Searchers' generated tokens.

For each Searcher response the Teacher is evaluated on the same role prompt, subtask, retrieved
passages and generated prefix as the student (paper, Stage II, Eq. (3)-(5)). That is one prefill
over the student's recorded token ids; the response mask selects the generated tokens and
excludes the retriever's passages, the chat-template tokens and padding (the mask M_t).

Use the temperature at which the student's log-probs (π_old) were recorded, so that a Teacher
identical to the student gives a log-ratio of zero (exactly with whole-row scoring, to float
rounding with shared prefixes; tested).

Cost: ``score`` runs only the rows it is asked for (``rows``; ``teacher_rows`` says which rows a
training step's losses read), and runs each distinct prefix once. A team batch repeats a lot: the
G trajectories of a question start with the same Leader prompt, an Answerer call's n candidates
share their prompt, role prompts share their system message, and a row can be a prefix of another
(~40 k recorded tokens of a small CPU batch hold ~9 k distinct prefixes). Rows with the same share
key are sorted by their tokens and packed into *token trees*: a packed sequence that holds each
distinct prefix once, in which a token attends to exactly its own prefix (a 4D attention mask) at
the position it has in its row. A causal LM's hidden state at a token depends only on its prefix,
so a row's scores are read from the tree at its tokens and equal those of one forward per row up
to float rounding (tested to 1e-5 on short rows; on the small rollout benchmark's batch, 700-token
rows, at most 2e-5 and 1e-7 on average).

Only the tokens that predict a scored token need the last layer's output: for the plain decoders
(``agents.last_layer``) a tree's last layer runs its queries, attention and MLP at those tokens
only (~12% of the small benchmark batch's tree tokens). For those models a row that shares nothing
with its neighbours is a tree of one row too; for other models it is scored by a plain causal
forward.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import Cache

from agents.last_layer import is_plain_decoder, last_layer, layers_but_last
from agents.sampling import _cache_keyword, additive_mask, default_forward_tokens
from envs.actions import ANSWERER, LEADER, SEARCHER
from training.token_scoring import TokenBatch, TokenScores, _check, score_tokens

TREE_ATTENTION = ("sdpa", "eager")  # attention implementations that take an arbitrary 4D mask


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


def break_even_pack_tokens(config) -> int:
    """The tree size at which a token's attention over a whole tree (the mask hides most of it but
    the dense kernels still compute it) costs as much as its linear layers: larger trees share more
    but waste more attention. 768 for the shipped tiny model (measured best of 256-2,048 on CPU),
    ~30 k for a 7 B model, whose linear layers dominate."""
    hidden = config.hidden_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    linear = hidden * (2 * heads + 2 * kv_heads) * head_dim + 3 * hidden * config.intermediate_size
    return linear // (2 * heads * head_dim)


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
        # CPU: 4,096-token forwards score a TeamBatch ~1.6x faster than 16,384-token ones (their
        # attention tensors stay in cache).
        self.max_batch_tokens = default_forward_tokens(model) if max_batch_tokens is None else max_batch_tokens
        attention = getattr(model.config, "_attn_implementation", None) or "eager"
        self.share_prefixes = share_prefixes and attention in TREE_ATTENTION
        self.pack_tokens = (
            min(break_even_pack_tokens(model.config), self.max_batch_tokens) if pack_tokens is None else pack_tokens
        )
        self.tree_block = tree_block
        self.cache_keyword = _cache_keyword(model.base_model)
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

    def _score_trees(self, batch, packs, logprobs, entropy) -> None:
        """Token trees, in forwards of at most ``max_batch_tokens`` padded tokens."""
        packs = sorted(packs, key=lambda p: -len(p.ids))
        start = 0
        while start < len(packs):
            count = max(1, self.max_batch_tokens // len(packs[start].ids))
            self._score_tree_batch(batch, packs[start : start + count], logprobs, entropy)
            start += count

    def _score_tree_batch(self, batch, packs, logprobs, entropy) -> None:
        model = self.model
        device = next(model.parameters()).device
        if getattr(model.config, "final_logit_softcapping", None):
            raise NotImplementedError("models with logit soft-capping are not supported")
        scale = self.temperature if self.temperature > 0 else 1.0
        width = max(len(p.ids) for p in packs)
        ids = torch.zeros((len(packs), width), dtype=torch.long)
        positions = torch.zeros_like(ids)
        ends = torch.arange(1, width + 1).repeat(len(packs), 1)  # padding: a subtree of itself alone
        where_batch, where_node, out_rows, out_cols = [], [], [], []
        for i, pack in enumerate(packs):
            ids[i, : len(pack.ids)] = torch.tensor(pack.ids)
            positions[i, : len(pack.ids)] = torch.tensor(pack.positions)
            ends[i, : len(pack.ids)] = torch.tensor(pack.subtree_ends())
            for row, path in pack.paths.items():
                columns = batch.response_mask[row].nonzero().squeeze(1)
                # Token t of the row is predicted by the hidden state of its token t - 1.
                first = pack.first_column[row] + 1
                where_node += [path[c - first] for c in columns.tolist()]
                where_batch += [i] * len(columns)
                out_rows.append(torch.full_like(columns, row))
                out_cols.append(columns)
        # In depth-first order a node's prefix lies before it, so the trees run in blocks of
        # queries, each over the keys of its own nodes' prefixes only (gathered from the columns
        # before it): a tree's attention then costs about what its rows' own attention would,
        # not the dense square of the tree (on the small rollout benchmark's batch with the shipped
        # π_0, medians of five interleaved timings: blocks of 256 and 384 scored in 0.83-0.85x the
        # time of one block per tree, 128 in 0.91x; trees of 1,024 tokens were not faster).
        ids, positions, ends = ids.to(device), positions.to(device), ends.to(device)
        cache = _TreeCache(width)
        hidden = []
        for start in range(0, width, self.tree_block):
            block = slice(start, min(start + self.tree_block, width))
            cache.block = block
            queries = torch.arange(block.start, block.stop, device=device).expand(len(packs), -1)
            mask = self._attend_prefixes(cache, queries, ends[:, : block.stop])
            if self.last_layer_at_predictors:
                hidden.append(layers_but_last(model, ids[:, block], positions[:, block], mask, cache))
            else:
                hidden.append(
                    model.base_model(
                        input_ids=ids[:, block],
                        position_ids=positions[:, block],
                        attention_mask=mask,
                        use_cache=True,
                        **{self.cache_keyword: cache},
                    ).last_hidden_state
                )
        hidden = torch.cat(hidden, dim=1)
        out_rows, out_cols = torch.cat(out_rows), torch.cat(out_cols)
        where_batch, where_node = torch.tensor(where_batch, device=device), torch.tensor(where_node, device=device)
        if self.last_layer_at_predictors:
            predictors = self._last_layer(hidden, positions, ends, where_batch, where_node, cache)
        else:
            predictors = hidden[where_batch, where_node]
        targets = batch.input_ids[out_rows, out_cols].to(device)
        head = model.get_output_embeddings()
        values, entropies = [], []
        for start in range(0, len(targets), self.chunk_tokens):
            chunk_logprobs = torch.log_softmax(
                head(predictors[start : start + self.chunk_tokens]).float() / scale, dim=-1
            )
            values.append(chunk_logprobs.gather(1, targets[start : start + self.chunk_tokens, None]).squeeze(1))
            if entropy is not None:
                entropies.append(-(chunk_logprobs.exp() * chunk_logprobs).sum(dim=-1))
        logprobs.index_put_((out_rows, out_cols), torch.cat(values).cpu())
        if entropy is not None:
            entropy.index_put_((out_rows, out_cols), torch.cat(entropies).cpu())

    def _attend_prefixes(self, cache: _TreeCache, queries: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        """The additive mask of the nodes ``queries`` [trees, queries] (ascending in each tree)
        over the first columns of the trees, whose subtree ends are ``ends`` [trees, columns]
        (nodes in depth-first order): a node attends to node k iff it lies in k's subtree,
        k <= node < ends[k]. Sets ``cache.attend`` to the columns any query needs, in order (the
        rest, masked out, pads the trees to one width)."""
        # Column k is needed iff the first query at or after k lies in k's subtree (queries sorted).
        columns = torch.arange(ends.shape[1], device=ends.device).repeat(len(ends), 1)
        first = torch.searchsorted(queries.contiguous(), columns)
        needed = (first < queries.shape[1]) & (queries.gather(1, first.clamp(max=queries.shape[1] - 1)) < ends)
        count = int(needed.sum(dim=1).max())
        if count == ends.shape[1]:  # some tree needs every column: attend to them as they lie
            cache.attend, keys, key_ends = slice(0, count), columns[:, None, :], ends[:, None, :]
        else:
            cache.attend = torch.argsort((~needed).to(torch.uint8), dim=1, stable=True)[:, :count]
            keys, key_ends = cache.attend[:, None, :], ends.gather(1, cache.attend)[:, None, :]
        allowed = (keys <= queries[..., None]) & (queries[..., None] < key_ends)
        return additive_mask(allowed[:, None], next(self.model.parameters()).dtype)

    def _last_layer(self, hidden, positions, ends, where_batch, where_node, cache) -> torch.Tensor:
        """The final hidden states at the nodes (``where_batch``, ``where_node``): the last decoder
        layer and the norm run at the distinct nodes only, each tree's padded to one length, over
        the keys and values that ``layers_but_last`` stored."""
        width = hidden.shape[1]
        nodes, inverse = torch.unique(where_batch * width + where_node, return_inverse=True)
        trees, nodes = nodes // width, nodes % width
        per_tree = torch.bincount(trees, minlength=hidden.shape[0])
        starts = per_tree.cumsum(0) - per_tree
        slot = torch.arange(len(nodes), device=nodes.device) - starts[trees]
        # Each tree's nodes in ascending order, padded by repeating its last one.
        taken = torch.minimum(torch.arange(int(per_tree.max()), device=nodes.device), per_tree[:, None] - 1)
        queries = nodes[starts[:, None] + taken]
        tree_index = torch.arange(hidden.shape[0], device=nodes.device)[:, None]
        cache.block = None
        mask = self._attend_prefixes(cache, queries, ends)
        out = last_layer(self.model, hidden[tree_index, queries], positions.gather(1, queries), mask, cache)
        return out[trees, slot][inverse]


class _TreeCache(Cache):
    """Keys and values of a batch of token trees run block by block: ``store`` writes a block's
    keys at its columns; ``update`` also returns, per tree, the columns ``attend`` (its queries'
    prefixes: an index per tree, or a slice of columns for all trees)."""

    def __init__(self, width: int):
        # Not Cache.__init__, as in agents.decode_engine.SlotKVCache: no layer machinery needed.
        self.layers, self.layer_class_to_replicate, self.offloading = [], None, False
        self.width = width
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.block: slice | None = slice(0, 0)  # the columns the queries' keys go to (None: stored already)
        self.attend: torch.Tensor | slice = slice(0, 0)

    def store(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int) -> tuple:
        """Write the block's keys and values of layer ``layer_idx``; return that layer's buffers."""
        if layer_idx == len(self.keys):
            shape = (key_states.shape[0], key_states.shape[1], self.width, key_states.shape[3])
            self.keys.append(key_states.new_zeros(shape))
            self.values.append(value_states.new_zeros(shape))
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        if self.block is not None:
            keys[:, :, self.block] = key_states
            values[:, :, self.block] = value_states
        return keys, values

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        keys, values = self.store(key_states, value_states, layer_idx)
        if isinstance(self.attend, slice):
            return keys[:, :, self.attend], values[:, :, self.attend]
        index = self.attend[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])
        return keys.gather(2, index), values.gather(2, index)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are always passed explicitly


class _TokenTree:
    """Rows packed as a tree: ``ids``/``positions`` hold each distinct prefix's last token once, in
    depth-first order; ``paths[row][t]`` is the node of the row's token t."""

    __slots__ = ("ends", "first_column", "ids", "paths", "positions")

    def __init__(self):
        self.ids: list[int] = []
        self.positions: list[int] = []
        self.ends: list[int | None] = []  # the node just past each node's subtree (None: still open)
        self.paths: dict[int, list[int]] = {}
        self.first_column: dict[int, int] = {}  # the row's first real column in the batch

    def add(self, row: int, first_column: int, tokens: list[int], shared: int, previous_path: list[int]) -> list[int]:
        """Add a row that shares its first ``shared`` tokens with the previous row (``previous_path``);
        rows come in sorted order, so the previous row's nodes past them have no later descendant."""
        for node in previous_path[shared:]:
            self.ends[node] = len(self.ids)
        path = previous_path[:shared] + list(range(len(self.ids), len(self.ids) + len(tokens) - shared))
        self.ids += tokens[shared:]
        self.positions += range(shared, len(tokens))
        self.ends += [None] * (len(tokens) - shared)
        self.paths[row], self.first_column[row] = path, first_column
        return path

    def subtree_ends(self) -> list[int]:
        return [len(self.ids) if end is None else end for end in self.ends]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _token_trees(batch: TokenBatch, rows: list[int], keys: Sequence[int] | None, pack_tokens: int) -> list[_TokenTree]:
    """Token trees of the rows (with equal ``keys``, if given) of at most ``pack_tokens`` nodes (a
    longer row is a tree of its own); a row that shares no prefix with its neighbours is a tree of
    one row. A row's real tokens must be contiguous (``pad_batch`` pads on one side)."""
    by_key: dict[object, list[tuple[list[int], int, int]]] = {}
    for row in rows:
        real = batch.attention_mask[row].nonzero().squeeze(1)
        first, end = int(real.min()), int(real.max()) + 1
        by_key.setdefault(keys[row] if keys is not None else None, []).append(
            (batch.input_ids[row, first:end].tolist(), row, first)
        )
    trees = []
    for members in by_key.values():
        # Sorted by tokens, a row's longest common prefix with any earlier row is the one with the
        # row just before it, so each row adds exactly its tokens not yet in the tree.
        members.sort()
        tree, previous, path = None, [], []
        for tokens, row, first in members:
            shared = _common_prefix(tokens, previous) if tree is not None else 0
            if tree is not None and (shared == 0 or len(tree.ids) + len(tokens) - shared > pack_tokens):
                trees.append(tree)
                tree, shared, path = None, 0, []
            if tree is None:
                tree = _TokenTree()
            path = tree.add(row, first, tokens, shared, path)
            previous = tokens
        trees.append(tree)
    return trees
