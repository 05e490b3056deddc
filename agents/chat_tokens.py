"""Token-exact multi-turn chat: extend a call's ids without re-tokenizing what the model wrote.

A Searcher call is a multi-turn chat: the model writes a search, the environment answers with an
``<information>`` user message, the model continues. For training, the ids the model sampled must
stay exactly as sampled (decoding and re-encoding can merge them differently), so the next prompt
is built as ``prompt ids + generated ids + turn_continuation_ids(...)``, where the continuation is
the chat template's own text after an assistant message: its end-of-turn tokens, the new messages
and the generation prompt.

When the result equals ``apply_chat_template(all messages)`` (tested for ChatML/Qwen templates):

* Generation ended with the EOS token (``<|im_end|>``): the EOS is kept and not added again.
* Generation stopped at a stop string (``</search>``) or at the output limit, without EOS: the
  continuation starts with the end-of-turn token, which we append and the model did not sample.
  Such tokens are environment tokens: they get no log-prob and are masked out of the loss.

Where it differs, by design:

* The model's ids are not the canonical tokenization of their text (for example ``"ab"`` sampled
  as ``a``, ``b`` although the tokenizer encodes it as ``ab``): we keep the sampled ids, the full
  re-render would not.
* Text the model wrote after a stop string is not in our ids (generation stopped there), and a
  template that rewrites earlier assistant turns (Qwen3 drops ``<think>`` blocks of past turns)
  renders them differently: our ids hold what the model really saw.

The continuation is cut from the template at the end of a placeholder assistant message and must
begin on a token boundary (a special token such as ``<|im_end|>``); ``turn_continuation_ids``
checks this and raises for templates where the cut would split a token.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

_PLACEHOLDER = "\u2063MAOPD_ASSISTANT_CONTENT\u2063"
_DEFAULT_HISTORY = ({"role": "system", "content": "s"}, {"role": "user", "content": "u"})


def render_text(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]], add_generation_prompt: bool
) -> str:
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt)
    if not isinstance(text, str):
        raise TypeError(f"chat template rendered {type(text).__name__}, not text")
    return text


def encode_text(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Encode template-rendered text: special tokens come from the template, never added here."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_ids(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]]) -> list[int]:
    """The ids of a call's first prompt: the chat template with the generation prompt."""
    return encode_text(tokenizer, render_text(tokenizer, messages, add_generation_prompt=True))


def end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The token that closes an assistant turn (the EOS of chat models, ``<|im_end|>`` for Qwen)."""
    if tokenizer.eos_token_id is None:
        raise ValueError("tokenizer has no eos_token; cannot tell where an assistant turn ends")
    return int(tokenizer.eos_token_id)


def turn_continuation_ids(
    tokenizer: PreTrainedTokenizerBase,
    generated_ids: Sequence[int],
    new_messages: Sequence[dict[str, str]],
    history: Sequence[dict[str, str]] | None = None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """The ids to append after ``generated_ids`` so that the model next sees ``new_messages``.

    ``history`` holds the messages before the assistant turn; templates whose rendering of a turn
    depends on earlier messages need it, plain ChatML does not. If ``generated_ids`` already end
    with the end-of-turn token, that token is not repeated.
    """
    before = list(history) if history else list(_DEFAULT_HISTORY)
    assistant = {"role": "assistant", "content": _PLACEHOLDER}
    full = render_text(tokenizer, [*before, assistant, *new_messages], add_generation_prompt)
    cut = full.find(_PLACEHOLDER)
    if cut < 0 or full.count(_PLACEHOLDER) != 1:
        raise ValueError("chat template does not render assistant content verbatim exactly once")
    suffix = full[cut + len(_PLACEHOLDER) :]
    _check_token_boundary(tokenizer, full[:cut] + "x", suffix)
    ids = encode_text(tokenizer, suffix)
    end = end_of_turn_id(tokenizer)
    if generated_ids and generated_ids[-1] == end and ids and ids[0] == end:
        ids = ids[1:]
    return ids


def _starts_with_split_token(tokenizer: PreTrainedTokenizerBase, text: str) -> bool:
    """Whether ``text`` starts with a special token that the tokenizer splits out of raw text before
    tokenizing the pieces around it (not normalized, no lstrip, not single-word): a cut there is a
    token boundary whatever precedes it."""
    return any(
        token.special and not (token.normalized or token.lstrip or token.single_word) and text.startswith(token.content)
        for token in tokenizer.added_tokens_decoder.values()
    )


def _check_token_boundary(tokenizer: PreTrainedTokenizerBase, before: str, suffix: str) -> None:
    """Raise if encoding ``before + suffix`` in one piece would merge tokens across the cut."""
    if _starts_with_split_token(tokenizer, suffix):
        return  # a boundary by construction: skip the two encodes below, which every turn would pay
    whole = encode_text(tokenizer, before + suffix)
    tail = encode_text(tokenizer, suffix)
    if whole[len(whole) - len(tail) :] != tail:
        raise ValueError(
            "the chat template's text after an assistant message does not start on a token "
            "boundary; token-exact continuation is not possible with this tokenizer/template"
        )
