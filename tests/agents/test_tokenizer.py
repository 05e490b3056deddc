import filecmp

import pytest
from transformers import AutoTokenizer

from maopd.agents.tokenizer import IM_END, PAD_TOKEN, TAG_TOKENS, train_tokenizer
from maopd.envs.prompts import system_message, task_message
from maopd.envs.roles import SEARCHER_ROLE

TEXTS = ["The capital of France is Paris.", "Hamlet was written by William Shakespeare."]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS)


def test_every_tag_is_one_token_and_survives_decoding(tokenizer):
    for tag in TAG_TOKENS:
        ids = tokenizer.encode(tag, add_special_tokens=False)
        assert len(ids) == 1, tag
    text = "<search>capital of France</search>"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.convert_ids_to_tokens([ids[0], ids[-1]]) == ["<search>", "</search>"]
    assert tokenizer.decode(ids + [tokenizer.eos_token_id], skip_special_tokens=True) == text


def test_any_text_round_trips_byte_level(tokenizer):
    text = "naïve café — 東京 🙂 \t\n<answer> x </answer>"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_eos_pad_and_chatml_template(tokenizer):
    assert tokenizer.eos_token == IM_END and tokenizer.pad_token == PAD_TOKEN
    messages = [system_message("searcher"), task_message("capital of France")]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        f"<|im_start|>system\n{SEARCHER_ROLE.prompt}<|im_end|>\n"
        "<|im_start|>user\nTask: capital of France<|im_end|>\n<|im_start|>assistant\n"
    )


def test_training_is_deterministic_to_the_byte(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    train_tokenizer(TEXTS).save_pretrained(first)
    train_tokenizer(TEXTS).save_pretrained(second)
    names = sorted(p.name for p in first.iterdir())
    assert "tokenizer.json" in names
    match, mismatch, errors = filecmp.cmpfiles(first, second, names, shallow=False)
    assert mismatch == [] and errors == [] and sorted(match) == names


def test_save_and_reload_with_auto_tokenizer(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = "Paris <search>who wrote Hamlet?</search><|im_end|>"
    assert reloaded.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)
    messages = [system_message("leader"), task_message("x")]
    assert reloaded.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
        tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    )
    assert (reloaded.eos_token_id, reloaded.pad_token_id, len(reloaded)) == (
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        len(tokenizer),
    )


def test_vocab_size_bounds_and_grows_with_text():
    small = train_tokenizer(vocab_size=600)
    assert len(small) <= 600
    assert len(train_tokenizer(TEXTS * 5, vocab_size=2000)) > len(train_tokenizer(vocab_size=2000))


def test_bad_input_is_a_clear_error():
    with pytest.raises(TypeError, match=r"texts\[\d+\] is int"):
        train_tokenizer(["ok", 3])
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(vocab_size=100)
    with pytest.raises(ValueError, match="at least one text"):
        train_tokenizer([], include_defaults=False)


def test_digits_are_one_token_each(tokenizer):
    ids = tokenizer.encode("4,355,000 in 1988", add_special_tokens=False)
    pieces = [tokenizer.decode([i]) for i in ids]
    assert [p for p in pieces if p.strip().isdigit()] == list("4355000") + list("1988")
    assert tokenizer.decode(ids) == "4,355,000 in 1988"
