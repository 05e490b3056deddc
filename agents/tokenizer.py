"""A small byte-level BPE tokenizer with a ChatML chat template, trained in-process.

Tiny test and demo models need a tokenizer that exists without any download. This module trains
one on the texts it is given (by default the role prompts and the environment's message
templates; callers add corpus passages and questions) and wraps it as a Hugging Face fast
tokenizer, so that ``AutoTokenizer.from_pretrained(dir)`` reloads it like any hub tokenizer.

Choices, and why:

* Byte-level BPE (as in GPT-2 and Qwen): every string encodes, whatever its characters, so text
  the tokenizer never saw in training still round-trips exactly.
* Digits are split one per token, as in Qwen, so that every number is spelled from the same ten
  tokens and a model copies an unseen value the way it copies a seen one.
* The chat template is Qwen's ChatML, ``<|im_start|>role\\n…<|im_end|>\\n``, with ``<|im_end|>``
  as the end-of-turn (EOS) token and ``<|endoftext|>`` as padding, like Qwen3 instruct models.
* Every action and structural tag (``<search>``, ``</search>``, …, ``</information>``) is an added
  token, so each tag is exactly one token and a closing tag can stop generation by token id.
  The tags are *not* special tokens: decoding with ``skip_special_tokens=True`` keeps them.
* Training is deterministic: the same texts give byte-identical files (tested).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from maopd.envs.actions import ACTION_KINDS
from maopd.envs.prompts import LAST_TURN_NOTICE, ROLE_PROMPTS

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
TAG_TOKENS = tuple(tag for kind in (*ACTION_KINDS, "information") for tag in (f"<{kind}>", f"</{kind}>"))

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Sentences in the shape of the environment's inserted messages, so that their frequent pieces
# ("Task:", "[Report 1]", …) get merges even when the caller passes no text of its own.
_TEMPLATE_TEXTS = (
    "Task: ",
    "Question: \nYou have 3 Searchers per wave and at most 4 waves.",
    "<information>\n[1] Title: text\n[2] Title: text\n[3] Title: text\n</information>",
    "<information>\nNo results.\n</information>",
    "Reports:\n[Report 1] (subtask) text\n[Report 2] (subtask) text",
    "Reports: none.",
    "Invalid action (no complete action tag). Use <search> or <report>.",
    (
        "<search>query</search> <report>facts</report> <delegate>subtask\nsubtask</delegate> "
        "<select>1, 2</select> <select>all</select> <answer>short phrase</answer>"
    ),
)


def default_texts() -> list[str]:
    """The role prompts, the last-turn notices and the shapes of the inserted messages."""
    return [*ROLE_PROMPTS.values(), *LAST_TURN_NOTICE.values(), *_TEMPLATE_TEXTS]


def train_tokenizer(
    texts: Iterable[str] = (), vocab_size: int = 4096, include_defaults: bool = True
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts`` (plus ``default_texts()``), with chat template.

    ``vocab_size`` is an upper bound: training stops early when the texts have no pair left to
    merge. Bytes form the base alphabet, so the result encodes any string.
    """
    corpus = [*default_texts(), *texts] if include_defaults else list(texts)
    if not corpus:
        raise ValueError("train_tokenizer needs at least one text")
    bad = next((i for i, text in enumerate(corpus) if not isinstance(text, str)), None)
    if bad is not None:
        raise TypeError(f"texts[{bad}] is {type(corpus[bad]).__name__}, not str")
    reserved = len(SPECIAL_TOKENS) + len(TAG_TOKENS) + len(pre_tokenizers.ByteLevel.alphabet())
    if vocab_size <= reserved:
        raise ValueError(f"vocab_size must exceed {reserved} (bytes, special and tag tokens)")

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    tokenizer.add_tokens([AddedToken(tag, normalized=False, special=False) for tag in TAG_TOKENS])
    return wrap_tokenizer(tokenizer)


def wrap_tokenizer(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    """The ``transformers`` view of a trained ``tokenizers.Tokenizer``, with the ChatML template."""
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast
