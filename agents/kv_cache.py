"""The KV caches our engines drive: every forward passes explicit position ids and a 4D attention
mask, and the cache decides where a forward's keys and values go and which ones it attends over.

``maopd.agents.decode_engine.SlotKVCache`` (continuous decoding) and ``maopd.agents.prefix_tree.TreeCache``
(token trees) share one protocol, ``EngineKVCache``: ``store(key_states, value_states, layer_idx)``
writes a forward's keys and values of a layer and returns that layer's buffers; ``update``, what a
Hugging Face attention layer calls, is ``store`` plus the keys and values to attend over.
``maopd.agents.last_layer`` calls ``store`` alone for the layer whose queries it does not run.
"""

from __future__ import annotations

import inspect

import torch
from transformers import Cache

MASK_ATTENTION = ("sdpa", "eager")  # attention implementations that take an arbitrary 4D mask


def attention_implementation(model: torch.nn.Module) -> str:
    """The attention implementation ``model`` runs (``eager`` when its config names none)."""
    return getattr(model.config, "_attn_implementation", None) or "eager"


def cache_keyword(model: torch.nn.Module) -> str:
    """The keyword ``model.forward`` takes its cache by: ``cache`` in recent transformers,
    ``past_key_values`` in releases before the rename."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean attention mask (True: attend) as the additive mask HF models also accept: 0 where
    allowed, the dtype's minimum elsewhere. The eager attention needs it, and CPU sdpa runs faster
    with it than with the boolean mask. One multiply builds it, cheaper than zeros and a masked
    fill; the allowed entries are -0.0."""
    return (~allowed).to(dtype) * torch.finfo(dtype).min


class EngineKVCache(Cache):
    """The store/update protocol: per layer a key and a value buffer, allocated at the layer's first
    write with the shape ``buffer_shape`` gives; a subclass says where a forward's keys go
    (``write``) and what its queries attend over (``attended``)."""

    def __init__(self, static_addresses: bool = False):
        # Not Cache.__init__: its signature moves between transformers releases, and these caches
        # need none of its layer machinery.
        self.layers, self.layer_class_to_replicate, self.offloading = [], None, False
        self.static_addresses = static_addresses  # mark the buffers for torch.compile, as StaticCache does
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def buffer_shape(self, key_states: torch.Tensor) -> tuple[int, ...]:
        raise NotImplementedError

    def write(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
    ) -> None:
        raise NotImplementedError

    def attended(
        self, keys: torch.Tensor, values: torch.Tensor, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def store(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int) -> tuple:
        """Write the forward's keys and values of layer ``layer_idx``; return that layer's buffers."""
        if layer_idx == len(self.keys):
            shape = self.buffer_shape(key_states)
            for buffers, like in ((self.keys, key_states), (self.values, value_states)):
                buffer = like.new_zeros(shape)
                if self.static_addresses:
                    torch._dynamo.mark_static_address(buffer)
                buffers.append(buffer)
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        self.write(keys, values, key_states, value_states, layer_idx)
        return keys, values

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        keys, values = self.store(key_states, value_states, layer_idx)
        return self.attended(keys, values, key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are always passed explicitly
