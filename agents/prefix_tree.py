"""Token trees: rows that share prefixes run as one packed sequence, each distinct prefix once.

A ``TokenTree`` holds rows (token sequences) as nodes, each distinct prefix's last token once, in
depth-first order; a node attends to exactly its own prefix (a 4D attention mask) at the position
it has in its row. A causal LM's hidden state at a token depends only on its prefix, so what a row
reads from the tree at its nodes equals what one forward per row gives, up to float rounding.
``pack_token_trees`` builds trees from rows; ``tree_logprobs`` runs a batch of trees through a
model and returns the log-probs of chosen next tokens at chosen nodes.

In depth-first order a node's prefix lies before it and its subtree is the run of nodes right
after it (``TokenTree.subtree_ends``): node q attends to node k iff k <= q < ends[k]. The trees
run in blocks of queries, each over the keys of its own nodes' prefixes only, gathered from the
columns before it (``TreeCache``), so a tree's attention costs about what its rows' own attention
would, not the dense square of the tree. Only the nodes that are read need the last layer's
output: for the plain decoders (``maopd.agents.last_layer``) the last layer runs its queries, attention
and MLP at those nodes only.

Supported: causal LMs with an attention of ``maopd.agents.kv_cache.MASK_ATTENTION`` (sdpa, eager) and no
logit soft-capping.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from maopd.agents.kv_cache import EngineKVCache, additive_mask, cache_keyword
from maopd.agents.last_layer import last_layer, layers_but_last


def break_even_pack_tokens(config) -> int:
    """The tree size at which a token's attention over a whole tree (the mask hides most of it but
    the dense kernels still compute it) costs as much as its linear layers: larger trees share more
    but waste more attention. Small models break even at small trees; a large model's linear
    layers dominate, so its trees can be long."""
    hidden = config.hidden_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    linear = hidden * (2 * heads + 2 * kv_heads) * head_dim + 3 * hidden * config.intermediate_size
    return linear // (2 * heads * head_dim)


class TokenTree:
    """Rows packed as a tree: ``ids``/``positions`` hold each distinct prefix's last token once, in
    depth-first order; ``paths[row][t]`` is the node of the row's token t."""

    __slots__ = ("ends", "ids", "paths", "positions")

    def __init__(self):
        self.ids: list[int] = []
        self.positions: list[int] = []
        self.ends: list[int | None] = []  # the node just past each node's subtree (None: still open)
        self.paths: dict[int, list[int]] = {}

    def add(self, row: int, tokens: list[int], shared: int, previous_path: list[int]) -> list[int]:
        """Add a row that shares its first ``shared`` tokens with the previous row (``previous_path``);
        rows come in sorted order, so the previous row's nodes past them have no later descendant."""
        for node in previous_path[shared:]:
            self.ends[node] = len(self.ids)
        path = previous_path[:shared] + list(range(len(self.ids), len(self.ids) + len(tokens) - shared))
        self.ids += tokens[shared:]
        self.positions += range(shared, len(tokens))
        self.ends += [None] * (len(tokens) - shared)
        self.paths[row] = path
        return path

    def subtree_ends(self) -> list[int]:
        return [len(self.ids) if end is None else end for end in self.ends]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def pack_token_trees(rows: Sequence[tuple[list[int], int]], max_nodes: int) -> list[TokenTree]:
    """``rows`` ((tokens, row id) pairs) as token trees of at most ``max_nodes`` nodes (a longer row
    is a tree of its own); a row that shares no prefix with its neighbours is a tree of one row."""
    # Sorted by tokens, a row's longest common prefix with any earlier row is the one with the row
    # just before it, so each row adds exactly its tokens not yet in the tree.
    trees, tree, previous, path = [], None, [], []
    for tokens, row in sorted(rows):
        shared = _common_prefix(tokens, previous) if tree is not None else 0
        if tree is not None and (shared == 0 or len(tree.ids) + len(tokens) - shared > max_nodes):
            trees.append(tree)
            tree, shared, path = None, 0, []
        if tree is None:
            tree = TokenTree()
        path = tree.add(row, tokens, shared, path)
        previous = tokens
    if tree is not None:
        trees.append(tree)
    return trees


class TreeCache(EngineKVCache):
    """Keys and values of a batch of token trees run block by block: ``store`` writes a block's
    keys at its columns ``block``; ``update`` also returns, per tree, the columns ``attend`` (its
    queries' prefixes: an index per tree, or a slice of columns for all trees)."""

    def __init__(self, width: int):
        super().__init__()
        self.width = width
        self.block: slice | None = slice(0, 0)  # the columns the queries' keys go to (None: stored already)
        self.attend: torch.Tensor | slice = slice(0, 0)

    def buffer_shape(self, key_states: torch.Tensor) -> tuple[int, ...]:
        return (key_states.shape[0], key_states.shape[1], self.width, key_states.shape[3])

    def write(self, keys, values, key_states, value_states, layer_idx: int) -> None:
        if self.block is not None:
            keys[:, :, self.block] = key_states
            values[:, :, self.block] = value_states

    def attended(self, keys, values, key_states, value_states) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(self.attend, slice):
            return keys[:, :, self.attend], values[:, :, self.attend]
        index = self.attend[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])
        return keys.gather(2, index), values.gather(2, index)


def tree_logprobs(
    model: torch.nn.Module,
    trees: Sequence[TokenTree],
    tree_of: torch.Tensor,
    node_of: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float,
    block: int,
    chunk_tokens: int,
    last_layer_at_nodes: bool,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The log-prob of token ``targets[i]`` after node ``node_of[i]`` of tree ``trees[tree_of[i]]``
    under ``log_softmax(logits / temperature)`` (temperature 0 reads as 1), and the entropy of that
    distribution if ``with_entropy``, on the CPU. The trees run in one batch, in blocks of
    ``block`` queries; the lm head runs over ``chunk_tokens`` nodes at a time.
    ``last_layer_at_nodes`` (plain decoders only) runs the last layer at the read nodes only."""
    device = next(model.parameters()).device
    if getattr(model.config, "final_logit_softcapping", None):
        raise NotImplementedError("models with logit soft-capping are not supported")
    scale = temperature if temperature > 0 else 1.0
    width = max(len(tree.ids) for tree in trees)
    ids = torch.zeros((len(trees), width), dtype=torch.long)
    positions = torch.zeros_like(ids)
    ends = torch.arange(1, width + 1).repeat(len(trees), 1)  # padding: a subtree of itself alone
    for i, tree in enumerate(trees):
        ids[i, : len(tree.ids)] = torch.tensor(tree.ids)
        positions[i, : len(tree.ids)] = torch.tensor(tree.positions)
        ends[i, : len(tree.ids)] = torch.tensor(tree.subtree_ends())
    ids, positions, ends = ids.to(device), positions.to(device), ends.to(device)
    dtype = next(model.parameters()).dtype
    cache = TreeCache(width)
    hidden = []
    for start in range(0, width, block):
        cache.block = slice(start, min(start + block, width))
        queries = torch.arange(cache.block.start, cache.block.stop, device=device).expand(len(trees), -1)
        mask = _attend_prefixes(cache, queries, ends[:, : cache.block.stop], dtype)
        if last_layer_at_nodes:
            hidden.append(layers_but_last(model, ids[:, cache.block], positions[:, cache.block], mask, cache))
        else:
            hidden.append(
                model.base_model(
                    input_ids=ids[:, cache.block],
                    position_ids=positions[:, cache.block],
                    attention_mask=mask,
                    use_cache=True,
                    **{cache_keyword(model.base_model): cache},
                ).last_hidden_state
            )
    hidden = torch.cat(hidden, dim=1)
    tree_of, node_of = tree_of.to(device), node_of.to(device)
    if last_layer_at_nodes:
        predictors = _last_layer_at(model, hidden, positions, ends, tree_of, node_of, cache)
    else:
        predictors = hidden[tree_of, node_of]
    targets = targets.to(device)
    head = model.get_output_embeddings()
    values, entropies = [], []
    for start in range(0, len(targets), chunk_tokens):
        chunk_logprobs = torch.log_softmax(head(predictors[start : start + chunk_tokens]).float() / scale, dim=-1)
        values.append(chunk_logprobs.gather(1, targets[start : start + chunk_tokens, None]).squeeze(1))
        if with_entropy:
            entropies.append(-(chunk_logprobs.exp() * chunk_logprobs).sum(dim=-1))
    return torch.cat(values).cpu(), torch.cat(entropies).cpu() if with_entropy else None


def _attend_prefixes(cache: TreeCache, queries: torch.Tensor, ends: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
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
    return additive_mask(allowed[:, None], dtype)


def _last_layer_at(model, hidden, positions, ends, tree_of, node_of, cache) -> torch.Tensor:
    """The final hidden states at the nodes (``tree_of``, ``node_of``): the last decoder layer and
    the norm run at the distinct nodes only, each tree's padded to one length, over the keys and
    values that ``layers_but_last`` stored."""
    width = hidden.shape[1]
    nodes, inverse = torch.unique(tree_of * width + node_of, return_inverse=True)
    trees, nodes = nodes // width, nodes % width
    per_tree = torch.bincount(trees, minlength=hidden.shape[0])
    starts = per_tree.cumsum(0) - per_tree
    slot = torch.arange(len(nodes), device=nodes.device) - starts[trees]
    # Each tree's nodes in ascending order, padded by repeating its last one.
    taken = torch.minimum(torch.arange(int(per_tree.max()), device=nodes.device), per_tree[:, None] - 1)
    queries = nodes[starts[:, None] + taken]
    tree_index = torch.arange(hidden.shape[0], device=nodes.device)[:, None]
    cache.block = None
    mask = _attend_prefixes(cache, queries, ends, next(model.parameters()).dtype)
    out = last_layer(model, hidden[tree_index, queries], positions.gather(1, queries), mask, cache)
    return out[trees, slot][inverse]
