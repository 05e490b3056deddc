"""Running a decoder's last layer at chosen tokens only.

A forward that reads the output at a few tokens (a prefill reads its last token's logits; the
Teacher reads the tokens that predict a scored token) still needs every token's keys and values at
every layer, but the last layer's queries, attention and MLP only at the tokens it reads. For the
plain decoders (``PLAIN_DECODERS``: embeddings, rotary positions, decoder layers, final norm, in
that order) ``layers_but_last`` runs all layers but the last and stores that layer's keys and values
from its key and value projections alone, as its attention module computes them; ``last_layer``
then runs the last layer and the norm at the chosen tokens over the stored keys. A cache used this
way follows ``maopd.agents.kv_cache``'s protocol: its ``store(key_states, value_states, layer_idx)`` does
``update``'s writes, without the keys to attend over.
"""

from __future__ import annotations

import sys

import torch

from maopd.agents.kv_cache import cache_keyword

# Model types whose base model's forward is embed_tokens, rotary_emb, the decoder layers, norm.
PLAIN_DECODERS = ("llama", "qwen2", "qwen3")


def is_plain_decoder(model: torch.nn.Module) -> bool:
    """``model``'s base forward can run layer by layer: a ``PLAIN_DECODERS`` type, full attention in
    every layer, the modules under their usual names."""
    config, base = model.config, model.base_model
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if (
        getattr(config, "model_type", None) not in PLAIN_DECODERS
        or layer_types != {"full_attention"}
        or not all(hasattr(base, name) for name in ("embed_tokens", "rotary_emb", "layers", "norm"))
    ):
        return False
    attention = _layers(model)[-1].self_attn
    return all(hasattr(attention, name) for name in ("k_proj", "v_proj", "head_dim", "layer_idx")) and hasattr(
        sys.modules[type(attention).__module__], "apply_rotary_pos_emb"
    )


def _layers(model: torch.nn.Module):
    return model.base_model.layers[: model.config.num_hidden_layers]


def _output(layer_output) -> torch.Tensor:
    return layer_output[0] if isinstance(layer_output, tuple) else layer_output


def layers_but_last(
    model: torch.nn.Module, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache
) -> torch.Tensor:
    """The hidden states entering the last decoder layer at ``ids``; every layer's keys and values,
    the last one's included, go to ``cache``."""
    base, keyword = model.base_model, cache_keyword(model.base_model)
    *layers, last = _layers(model)
    hidden = base.embed_tokens(ids)
    rotary = base.rotary_emb(hidden, positions)
    for layer in layers:
        hidden = _output(
            layer(
                hidden,
                attention_mask=mask,
                position_ids=positions,
                position_embeddings=rotary,
                use_cache=True,
                **{keyword: cache},
            )
        )
    # The last layer's keys and values, as its attention module computes them (Qwen3 normalises
    # each key head), without its queries, attention and output projection.
    attention, states = last.self_attn, last.input_layernorm(hidden)
    heads = (*states.shape[:-1], -1, attention.head_dim)
    keys = attention.k_proj(states).view(heads)
    if hasattr(attention, "k_norm"):
        keys = attention.k_norm(keys)
    keys, values = keys.transpose(1, 2), attention.v_proj(states).view(heads).transpose(1, 2)
    cos, sin = rotary
    # The model's own rotary function; one key head stands in for the queries it also rotates.
    _, keys = sys.modules[type(attention).__module__].apply_rotary_pos_emb(keys[:, :1], keys, cos, sin)
    cache.store(keys, values, attention.layer_idx)
    return hidden


def last_layer(
    model: torch.nn.Module, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache
) -> torch.Tensor:
    """The final (normed) hidden states at tokens whose states entering the last layer are
    ``hidden``: that layer attends over the keys and values ``cache`` returns for it."""
    base = model.base_model
    out = _layers(model)[-1](
        hidden,
        attention_mask=mask,
        position_ids=positions,
        position_embeddings=base.rotary_emb(hidden, positions),
        use_cache=True,
        **{cache_keyword(base): cache},
    )
    return base.norm(_output(out))
