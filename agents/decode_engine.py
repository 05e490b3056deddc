"""Continuous-batching decode over a preallocated per-slot KV cache (the HF path's default engine).

``DecodeEngine.run`` generates one candidate per (prompt, seed) row, like ``maopd.agents.sampling.
sample_rows``, but instead of cutting the rows into fixed chunks whose batches shrink as rows
finish, it keeps a fixed number of *slots* busy: a preallocated KV cache of ``slots`` rows ×
``capacity`` columns per layer (``SlotKVCache``), one decode forward per step over the slots, and
as soon as a row finishes (EOS, stop string, ``max_new_tokens``) its slot is refilled with the
next waiting row. A refill is a left-padded prefill of the admitted rows whose keys and values are
written into their slots; each slot then carries its own first valid column, next write column
and next position id, so rows at different positions share one decode step through a per-row 4D
attention mask (HF's ``StaticCache`` writes every row at the same column, which cannot do this).

A finished row's keys and values (prompt and generated ids) are kept in a ``PrefixStore``; a later
prompt that starts with them (a multi-turn call's next turn: previous prompt + generated ids +
inserted ids, token-exactly) is admitted by ``extend``: the stored columns are copied into its slot
and only the rest of the prompt is prefilled, attending over the copied prefix.

Records are those of ``sample_rows``: both draw through ``maopd.agents.sampling.SampledRows``, where each
row takes its uniforms from its own generator (so a row's tokens do not depend on which rows share
its step or which slot it got), with the same inverse-CDF sampler, log-probs at the generated
tokens, stops, ``max_input_tokens`` and ``prompt_too_long``. Padding and slot assignment change a
row's floating-point sums in their last bits only (tested against the chunked path to 1e-5).

Shapes: with ``compile`` set, every decode step has ``slots`` rows and an attention width that is a
power of two (at least 256, at most the capacity), so ``torch.compile`` (``mode="reduce-overhead"``:
CUDA graphs on GPU) sees a handful of static shapes; the cache tensors are marked as static
addresses, as HF's ``StaticCache`` does. Without it (the CPU default) a step runs over the occupied
slots only (finished rows are compacted down when nothing waits) and attends over the columns in
use, rounded up to 64.

Supported: causal LMs whose attention layers call ``cache.update(keys, values, layer_idx, ...)``
(the protocol of ``maopd.agents.kv_cache``) and accept a 4D mask (Llama, Qwen, Mistral families) with
the ``sdpa`` or ``eager`` attention.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from maopd.agents.kv_cache import MASK_ATTENTION, EngineKVCache, additive_mask, attention_implementation, cache_keyword
from maopd.agents.last_layer import is_plain_decoder, last_layer, layers_but_last
from maopd.agents.sampling import Candidate, SampledRows, SamplingConfig, StopMatcher, default_forward_tokens


class SlotKVCache(EngineKVCache):
    """Keys/values of ``slots`` rows × ``capacity`` columns per layer, allocated at the first write.

    Before each forward the engine sets ``mode``: ``"prefill"`` writes the keys of batch row
    ``owners[i]`` into columns ``[0, width)`` of slot ``rows[i]`` (rows with the same prompt share one
    prefill row) and attends over the batch itself; ``"extend"`` first copies stored prefixes into
    their slots, writes batch row ``owners[i]`` at its ``columns`` of slot ``rows[i]`` and attends
    over the first ``width`` columns of the slots ``readers``; ``"decode"`` writes the
    one new key of slot s (s < batch) at column ``columns[s]`` and attends over the first ``width``
    columns of the first batch slots; ``"read"`` writes nothing and attends over the first ``width``
    columns of the slots ``readers``.
    """

    is_compileable = True

    def __init__(self, slots: int, capacity: int, static_addresses: bool = False):
        super().__init__(static_addresses)
        self.slots, self.capacity = slots, capacity
        self.mode = "prefill"
        self.rows: torch.Tensor | None = None
        self.owners: torch.Tensor | None = None
        self.columns: torch.Tensor | None = None
        self.reused: list = []  # extend mode: (slot, ``read``'s copies, length) to put in first
        self.readers: torch.Tensor | None = None
        self.width = 0

    def buffer_shape(self, key_states: torch.Tensor) -> tuple[int, ...]:
        return (self.slots, key_states.shape[1], self.capacity, key_states.shape[3])

    def write(self, keys, values, key_states, value_states, layer_idx: int) -> None:
        if self.mode == "prefill":
            width = key_states.shape[2]
            keys[self.rows, :, :width] = key_states[self.owners]
            values[self.rows, :, :width] = value_states[self.owners]
        elif self.mode == "extend":
            # Slot rows[i] gets its reused prefix's keys in columns [0, length), then batch row
            # owners[i]'s keys at columns[owners[i]] (right after the prefix).
            for slot, (stored_keys, stored_values), length in self.reused:
                keys[slot, :, :length] = stored_keys[layer_idx][:, :length]
                values[slot, :, :length] = stored_values[layer_idx][:, :length]
            columns = self.columns[self.owners]
            keys[self.rows[:, None], :, columns] = key_states[self.owners].transpose(1, 2)
            values[self.rows[:, None], :, columns] = value_states[self.owners].transpose(1, 2)
        elif self.mode == "decode":
            slots = torch.arange(key_states.shape[0], device=key_states.device)
            keys[slots, :, self.columns] = key_states[:, :, 0]
            values[slots, :, self.columns] = value_states[:, :, 0]

    def attended(self, keys, values, key_states, value_states) -> tuple[torch.Tensor, torch.Tensor]:
        if self.mode == "prefill":
            return key_states, value_states
        if self.mode in ("extend", "read"):  # batch row b attends over the slot readers[b]
            return keys[self.readers, :, : self.width], values[self.readers, :, : self.width]
        batch = key_states.shape[0]
        return keys[:batch, :, : self.width], values[:batch, :, : self.width]

    def move_slot(self, source: int, target: int, columns: slice) -> None:
        for store in (self.keys, self.values):
            for buffer in store:
                buffer[target, :, columns] = buffer[source, :, columns]

    def read(self, slot: int, columns: slice) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Copies of the keys and of the values of ``slot`` at ``columns``, one per layer."""
        return [k[slot, :, columns].clone() for k in self.keys], [v[slot, :, columns].clone() for v in self.values]


def _power_of_two_at_least(value: int, floor: int) -> int:
    width = floor
    while width < value:
        width *= 2
    return width


_HASH_BASE = np.uint64(0x100000001B3)  # FNV-64's prime; uint64 arithmetic wraps modulo 2**64


def _prefix_hashes(tokens: Sequence[int]) -> np.ndarray:
    """``hashes[L]``: a 64-bit hash of ``tokens[:L]``, for every L (a hit is checked token by token)."""
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(len(tokens), _HASH_BASE, dtype=np.uint64))
        terms = (np.asarray(tokens, dtype=np.uint64) + np.uint64(1)) * powers
        return np.concatenate([np.zeros(1, dtype=np.uint64), np.cumsum(terms, dtype=np.uint64)])


class PrefixStore:
    """The keys and values of finished rows (prompt + generated ids, all but the last id, which was
    sampled but never run), for later prompts that start with them: a multi-turn call's next prompt
    is its previous prompt + generated ids + inserted ids, token-exactly (``maopd.agents.chat_tokens``),
    so only the inserted ids need a prefill. At most ``budget_bytes``; the least recently used
    entries go first. Cleared when the model's weights change (a parameter's storage or in-place
    version counter differs), so a stored prefix never outlives the weights that computed it.
    """

    def __init__(self, budget_bytes: int):
        self.budget_bytes = budget_bytes
        self.entries: OrderedDict[tuple[int, int], tuple[list[int], tuple, int]] = OrderedDict()
        self.lengths: dict[int, int] = {}  # stored length -> entries of that length
        self.bytes = 0
        self.weights: tuple | None = None

    def clear(self) -> None:
        self.entries.clear()
        self.lengths.clear()
        self.bytes = 0

    def check_weights(self, model: torch.nn.Module) -> bool:
        """Empty the store if ``model``'s weights changed since the last check; say whether they did."""
        weights = tuple((p.data_ptr(), p._version) for p in model.parameters())
        changed = weights != self.weights
        if changed:
            self.clear()
            self.weights = weights
        return changed

    def find(self, prompt: Sequence[int]) -> tuple[tuple, int] | None:
        """The longest stored prefix of ``prompt``: its keys/values and how many of its columns to
        reuse (at most all but the prompt's last token, which must run to give the first logits)."""
        if not self.entries:
            return None
        hashes = _prefix_hashes(prompt)
        for length in sorted(self.lengths, reverse=True):
            if length > len(prompt):
                continue
            key = (length, int(hashes[length]))
            entry = self.entries.get(key)
            if entry is not None and entry[0] == list(prompt[:length]):
                self.entries.move_to_end(key)
                reused = min(length, len(prompt) - 1)
                return (entry[1], reused) if reused > 0 else None
        return None

    def add(self, tokens: list[int], stored: tuple) -> None:
        size = sum(t.numel() * t.element_size() for part in stored for t in part)
        key = (len(tokens), int(_prefix_hashes(tokens)[-1]))
        if size > self.budget_bytes or key in self.entries:
            return
        while self.bytes + size > self.budget_bytes:
            (length, _), (_, _, old) = self.entries.popitem(last=False)
            self._count(length, -1)
            self.bytes -= old
        self.entries[key] = (tokens, stored, size)
        self._count(len(tokens), 1)
        self.bytes += size

    def _count(self, length: int, change: int) -> None:
        self.lengths[length] = self.lengths.get(length, 0) + change
        if not self.lengths[length]:
            del self.lengths[length]


class DecodeEngine:
    """Continuous batching of sampled rows over ``slots`` KV-cache rows; see the module docstring.

    ``compile``: ``None`` (eager), or a ``torch.compile`` mode (``"reduce-overhead"`` on GPU for
    CUDA graphs, ``"default"`` for inductor alone). ``max_prefill_tokens`` bounds the padded tokens
    of one refill prefill (default 4,096 on CPU, 16,384 elsewhere). ``refill_fraction``: a refill
    waits until this fraction of the slots is free (or every waiting row fits), so prefills are
    batched rather than one row at a time.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        slots: int = 64,
        compile: str | None = None,
        max_prefill_tokens: int | None = None,
        refill_fraction: float = 0.125,
        prefix_store_bytes: int = 1 << 30,
    ):
        if slots < 1:
            raise ValueError("DecodeEngine needs at least one slot")
        attention = attention_implementation(model)
        if attention not in MASK_ATTENTION:
            raise NotImplementedError(
                f"the continuous decode engine needs the sdpa or eager attention, not {attention!r}; "
                f"use HFPolicy(engine='chunked')"
            )
        self.model = model
        self.slots = slots
        self.compile = compile
        # Bounded prefills pad less, and on CPU their attention tensors stay in cache.
        self.max_prefill_tokens = default_forward_tokens(model) if max_prefill_tokens is None else max_prefill_tokens
        self.refill_fraction = refill_fraction
        self.cache_keyword = cache_keyword(model)
        self.last_layer_at_last_token = is_plain_decoder(model)
        # Totals over the engine's runs: decode steps, occupied slots summed over those steps
        # (their ratio is the mean live batch), forwards and their padded tokens, and the prompt
        # tokens taken from the prefix store.
        self.stats = {"decode_steps": 0, "live_row_steps": 0, "prefills": 0, "prefill_tokens": 0, "reused_tokens": 0}
        self.prefixes = PrefixStore(prefix_store_bytes)
        self.compile_error: str | None = None  # why the compiled step was given up, if it was
        self._compiled = None
        if compile:
            self._compiled = torch.compile(self._forward, mode=None if compile == "default" else compile, dynamic=False)
        self._cache: SlotKVCache | None = None

    def cache_for(self, slots: int, capacity: int) -> SlotKVCache:
        """A cache for one run. The engine keeps it and hands it out again while it fits
        (``release`` frees it, e.g. before a training update): compiled, so CUDA graphs see the
        same static buffers on every call; eager, so that a call does not pay for allocating and
        zeroing a cache. An eager cache grows to the largest run seen (an eager run uses
        only its first ``slots`` slots); what earlier runs left in it is never attended to."""
        cache = self._cache
        if self.compile:
            if cache is None or cache.slots != slots or cache.capacity < capacity:
                self._cache = cache = SlotKVCache(slots, capacity, static_addresses=True)
        elif cache is None or cache.slots < slots or cache.capacity < capacity:
            self._cache = cache = SlotKVCache(
                max(slots, cache.slots if cache else 0), max(capacity, cache.capacity if cache else 0)
            )
        return cache

    def release(self) -> None:
        """Free the kept KV cache (compiled engines keep it between calls) and the prefix store."""
        self._cache = None
        self.prefixes.clear()

    def _step(self, *args):
        """The decode forward: compiled if asked for, falling back to eager (with a warning and
        ``compile_error`` set) if the compiled step raises."""
        if self._compiled is not None:
            try:
                if hasattr(torch.compiler, "cudagraph_mark_step_begin"):
                    torch.compiler.cudagraph_mark_step_begin()
                return self._compiled(*args)
            except Exception as error:  # noqa: BLE001 - any compiler failure: decode eagerly instead
                self.compile_error = f"{type(error).__name__}: {error}"
                warnings.warn(
                    f"compiled decode step failed, decoding eagerly from now on: {self.compile_error}", stacklevel=2
                )
                self._compiled = None
        return self._forward(*args)

    def _mask(self, allowed: torch.Tensor) -> torch.Tensor:
        return additive_mask(allowed, next(self.model.parameters()).dtype)

    def _forward(self, input_ids, attention_mask, position_ids, cache):
        return self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_keyword: cache},
        ).logits[:, -1]

    def _prefill(self, input_ids, attention_mask, position_ids, cache, readers):
        """The last column's logits of a (left-padded) prefill or extend forward. A plain decoder
        runs its last layer at that column only (``maopd.agents.last_layer``), over the keys of the
        slots ``readers`` (one per batch row); a model with forward hooks (they may change its
        logits) runs whole."""
        if not self.last_layer_at_last_token or self.model._forward_hooks or self.model._forward_pre_hooks:
            return self._forward(input_ids, attention_mask, position_ids, cache)
        hidden = layers_but_last(self.model, input_ids, position_ids, attention_mask, cache)
        cache.mode, cache.readers, cache.width = "read", readers, attention_mask.shape[-1]
        out = last_layer(self.model, hidden[:, -1:], position_ids[:, -1:], attention_mask[:, :, -1:], cache)
        return self.model.get_output_embeddings()(out[:, -1])

    @torch.inference_mode()
    def run(
        self,
        prompts: Sequence[Sequence[int]],
        seeds: Sequence[int],
        sampling: SamplingConfig,
        stops: StopMatcher,
        eos_ids: Iterable[int],
        pad_id: int,
    ) -> list[Candidate]:
        """One candidate per (prompt, seed) row; rows are admitted shortest prefill first."""
        rows = SampledRows(prompts, seeds, sampling, stops, eos_ids, next(self.model.parameters()).device)
        if not rows.runnable:
            return rows.results
        try:
            _Run(self, prompts, rows, pad_id).loop()
        except FloatingPointError:
            if not self.compile:  # non-finite keys may be in the kept cache: the next run starts a new one
                self._cache = None
            raise
        return rows.results


class _Run:
    """The state of one ``DecodeEngine.run``: slots, the waiting queue and the cache."""

    def __init__(self, engine, prompts, rows: SampledRows, pad_id):
        self.engine, self.prompts, self.rows, self.pad_id = engine, prompts, rows, pad_id
        runnable, sampling = rows.runnable, rows.sampling
        self.device = next(engine.model.parameters()).device
        self.compiled = bool(engine.compile)
        self.slots = engine.slots if self.compiled else min(engine.slots, len(runnable))
        if engine.prefixes.check_weights(engine.model) and not self.compiled:
            # A kept eager cache starts over with new weights: nothing an earlier model left in
            # it (non-finite values after a diverged step included) can reach a masked column.
            engine._cache = None
        self.reuse = {}  # row -> (stored keys/values, columns reused) for prompts continuing a stored row
        for row in runnable:
            hit = engine.prefixes.find(prompts[row])
            if hit is not None:
                self.reuse[row] = hit
        longest = max(len(prompts[r]) for r in runnable)
        # A reusing row's prefill may write padding up to its longest new part past its prompt.
        extension = max((len(prompts[r]) - hit[1] for r, hit in self.reuse.items()), default=0)
        needed = longest + sampling.max_new_tokens + extension
        self.capacity = _power_of_two_at_least(needed, 256) if self.compiled else -(-needed // 64) * 64
        self.cache = engine.cache_for(self.slots, self.capacity)
        self.capacity = self.cache.capacity
        # pop() takes the next row: the shortest prefill first (a reusing row's prefill is its
        # prompt past the stored prefix), so that each prefill pads little; rows of equal length
        # keep their order, so an Answerer call's candidates stay together and share a prefill.
        self.waiting = sorted(runnable, key=self.prefill_length, reverse=True)
        # Per slot: the row it holds (-1: free), first valid cache column, next write column,
        # next position id, the token to feed next.
        self.row = [-1] * self.slots
        self.start = torch.zeros(self.slots, dtype=torch.long)
        self.column = torch.zeros(self.slots, dtype=torch.long)
        self.position = torch.zeros(self.slots, dtype=torch.long)
        self.token = torch.full((self.slots,), pad_id, dtype=torch.long)

    # -- bookkeeping ---------------------------------------------------------------------------
    def prefill_length(self, row: int) -> int:
        return len(self.prompts[row]) - (self.reuse[row][1] if row in self.reuse else 0)

    def record(self, slots: list[int], logits: torch.Tensor) -> None:
        """Sample the next token of each of ``slots`` from its row of ``logits``; free finished slots."""
        rows = [self.row[s] for s in slots]
        _, ended = self.rows.record(rows, logits)
        for slot, row, end in zip(slots, rows, ended):
            candidate = self.rows.results[row]
            if not end:
                self.token[slot] = candidate.token_ids[-1]
                continue
            self.row[slot] = -1
            # Columns [start, column) hold the prompt and every generated id but this last one.
            self.engine.prefixes.add(
                list(self.prompts[row]) + candidate.token_ids[:-1],
                self.cache.read(slot, slice(int(self.start[slot]), int(self.column[slot]))),
            )

    def free_slots(self) -> list[int]:
        return [s for s, row in enumerate(self.row) if row < 0]

    # -- prefill -------------------------------------------------------------------------------
    def admit(self) -> None:
        """Fill free slots with waiting rows, in left-padded prefills of at most max_prefill_tokens."""
        while self.waiting:
            free = self.free_slots()
            wanted = min(len(self.waiting), max(1, int(self.slots * self.engine.refill_fraction)))
            busy = len(free) < self.slots
            if not free or (busy and len(free) < wanted):
                return
            chosen: list[int] = []
            width = 0
            while self.waiting and len(chosen) < len(free):
                length = self.prefill_length(self.waiting[-1])
                if chosen and max(width, length) * (len(chosen) + 1) > self.engine.max_prefill_tokens:
                    break
                width = max(width, length)
                chosen.append(self.waiting.pop())
            fresh = [r for r in chosen if r not in self.reuse]
            continuing = [r for r in chosen if r in self.reuse]
            if fresh:
                self.prefill(free[: len(fresh)], fresh, max(len(self.prompts[r]) for r in fresh))
            if continuing:
                self.extend(free[len(fresh) : len(chosen)], continuing)

    def prefill(self, slots: list[int], rows: list[int], width: int) -> None:
        """Prefill ``rows`` into ``slots``; rows with identical prompts (an Answerer call's n
        candidates) share one prefill row, whose keys and values are copied into each slot."""
        unique: dict[tuple[int, ...], int] = {}
        owners = [unique.setdefault(tuple(self.prompts[r]), len(unique)) for r in rows]
        prompts = list(unique)
        count = len(prompts)
        ids = torch.full((count, width), self.pad_id, dtype=torch.long)
        lengths = torch.tensor([len(p) for p in prompts])
        for i, prompt in enumerate(prompts):
            ids[i, width - lengths[i] :] = torch.tensor(prompt, dtype=torch.long)
        first = width - lengths  # first real column of each prefill row
        columns = torch.arange(width)
        positions = (columns[None, :] - first[:, None]).clamp(min=0)
        keys_valid = columns[None, :] >= first[:, None]
        causal = columns[None, :, None] >= columns[None, None, :]  # [1, query, key]
        allowed = (causal & keys_valid[:, None, :]) | torch.eye(width, dtype=torch.bool)[None]
        self.engine.stats["prefills"] += 1
        self.engine.stats["prefill_tokens"] += count * width
        self.cache.mode = "prefill"
        self.cache.rows = torch.tensor(slots, device=self.device)
        self.cache.owners = torch.tensor(owners, device=self.device)
        readers = torch.tensor([slots[owners.index(u)] for u in range(count)], device=self.device)
        logits = self.engine._prefill(
            ids.to(self.device),
            self.engine._mask(allowed[:, None].to(self.device)),
            positions.to(self.device),
            self.cache,
            readers,
        )
        for slot, row, owner in zip(slots, rows, owners):
            self.row[slot] = row
            self.start[slot], self.column[slot], self.position[slot] = int(first[owner]), width, int(lengths[owner])
        self.record(slots, logits[owners])

    def extend(self, slots: list[int], rows: list[int]) -> None:
        """Admit rows whose prompts continue a stored prefix: the prefix's keys and values go into
        columns [0, reused) of the slot and only the rest of the prompt runs, left-padded, its
        tokens written right after the prefix (padding goes past the prompt, where decoding
        overwrites it). Rows with identical prompts share one batch row, as in ``prefill``."""
        unique: dict[tuple[int, ...], int] = {}
        owners = [unique.setdefault(tuple(self.prompts[r]), len(unique)) for r in rows]
        readers = [slots[owners.index(u)] for u in range(len(unique))]
        reused = torch.tensor([self.reuse[rows[owners.index(u)]][1] for u in range(len(unique))])
        lengths = torch.tensor([len(p) for p in unique]) - reused
        width = int(lengths.max())
        pads = width - lengths
        ids = torch.full((len(unique), width), self.pad_id, dtype=torch.long)
        for u, prompt in enumerate(unique):
            ids[u, int(pads[u]) :] = torch.tensor(prompt[int(reused[u]) :], dtype=torch.long)
        offsets = torch.arange(width)[None, :] - pads[:, None]  # index within the new tokens
        real = offsets >= 0
        columns = torch.where(real, reused[:, None] + offsets, reused[:, None] + lengths[:, None] - offsets - 1)
        positions = columns * real
        attended = int(columns.max()) + 1
        span = torch.arange(attended)
        # A real token attends to the prefix and the new tokens up to itself, a padding one to itself.
        allowed = torch.where(
            real[:, :, None], span[None, None, :] <= columns[:, :, None], span[None, None, :] == columns[:, :, None]
        )
        self.engine.stats["prefills"] += 1
        self.engine.stats["prefill_tokens"] += len(unique) * width
        self.engine.stats["reused_tokens"] += int(reused.sum())
        self.cache.mode, self.cache.width = "extend", attended
        self.cache.rows = torch.tensor(slots, device=self.device)
        self.cache.owners = torch.tensor(owners, device=self.device)
        self.cache.readers = torch.tensor(readers, device=self.device)
        self.cache.columns = columns.to(self.device)
        self.cache.reused = [(slot, *self.reuse[row]) for slot, row in zip(slots, rows)]
        logits = self.engine._prefill(
            ids.to(self.device),
            self.engine._mask(allowed[:, None].to(self.device)),
            positions.to(self.device),
            self.cache,
            self.cache.readers,
        )
        self.cache.reused = []
        for slot, row in zip(slots, rows):
            self.row[slot] = row
            self.start[slot] = 0
            self.column[slot] = self.position[slot] = len(self.prompts[row])
        self.record(slots, logits[owners])

    # -- decode --------------------------------------------------------------------------------
    def compact(self) -> None:
        """Eager mode, nothing waiting: move the highest occupied slots into lower free ones."""
        while True:
            occupied = [s for s, row in enumerate(self.row) if row >= 0]
            free = self.free_slots()
            if not occupied or not free or free[0] > occupied[-1]:
                return
            source, target = occupied[-1], free[0]
            self.cache.move_slot(source, target, slice(int(self.start[source]), int(self.column[source])))
            for state in (self.start, self.column, self.position, self.token):
                state[target] = state[source]
            self.row[target], self.row[source] = self.row[source], -1

    def decode(self) -> None:
        occupied = [s for s, row in enumerate(self.row) if row >= 0]
        batch = self.slots if self.compiled else occupied[-1] + 1
        columns = self.column[:batch]
        needed = int(columns.max()) + 1
        if self.compiled:
            width = min(_power_of_two_at_least(needed, 256), self.capacity)
        else:
            width = min(-(-needed // 64) * 64, self.capacity)
        span = torch.arange(width)
        allowed = (span[None, :] >= self.start[:batch, None]) & (span[None, :] <= columns[:, None])
        self.cache.mode, self.cache.width = "decode", width
        self.cache.columns = columns.to(self.device)
        logits = self.engine._step(
            self.token[:batch, None].to(self.device),
            self.engine._mask(allowed[:, None, None, :].to(self.device)),
            self.position[:batch, None].to(self.device),
            self.cache,
        )
        self.engine.stats["decode_steps"] += 1
        self.engine.stats["live_row_steps"] += len(occupied)
        self.column[occupied] += 1
        self.position[occupied] += 1
        self.record(occupied, logits[occupied])

    def loop(self) -> None:
        while True:
            self.admit()
            if all(row < 0 for row in self.row):
                if not self.waiting:
                    return
                continue
            if not self.compiled and not self.waiting:
                self.compact()
            self.decode()
