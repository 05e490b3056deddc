import pytest

from maopd.agents.chat_tokens import encode_text, end_of_turn_id, prompt_ids, turn_continuation_ids
from maopd.agents.tokenizer import train_tokenizer
from maopd.envs.prompts import feedback_message, system_message, task_message

INFO = {"role": "user", "content": "<information>\n[1] Paris: the capital of France.\n</information>"}
INFO_2 = {"role": "user", "content": "<information>\nNo results.\n</information>"}


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["The capital of France is Paris.", "Who wrote Hamlet? Shakespeare."])


def full_render(tokenizer, messages):
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"])


def build_incrementally(tokenizer, start, turns, with_eos):
    """Prompt ids, then per turn: the generated ids (canonical) and our continuation."""
    messages = list(start)
    ids = prompt_ids(tokenizer, messages)
    for generated_text, new_messages in turns:
        generated = encode_text(tokenizer, generated_text)
        if with_eos:
            generated.append(end_of_turn_id(tokenizer))
        ids += generated + turn_continuation_ids(tokenizer, generated, new_messages, history=messages)
        messages += [{"role": "assistant", "content": generated_text}, *new_messages]
    return ids, messages


@pytest.mark.parametrize("with_eos", [True, False], ids=["ended-with-eos", "stopped-at-tag"])
def test_searcher_history_equals_full_template(tokenizer, with_eos):
    start = [system_message("searcher"), task_message("capital of France")]
    turns = [
        ("I should search. <search>capital of France</search>", [INFO]),
        ("<search>France capital city</search>", [INFO_2]),
        ("no tag here", [feedback_message("no complete action tag", ("search", "report"))]),
    ]
    ids, messages = build_incrementally(tokenizer, start, turns, with_eos)
    assert ids == full_render(tokenizer, messages)


def test_eos_is_not_repeated_and_is_added_when_missing(tokenizer):
    end = end_of_turn_id(tokenizer)
    stopped = encode_text(tokenizer, "<search>q</search>")
    assert turn_continuation_ids(tokenizer, stopped, [INFO])[0] == end
    ended = stopped + [end]
    assert turn_continuation_ids(tokenizer, ended, [INFO]) == turn_continuation_ids(tokenizer, stopped, [INFO])[1:]


def test_sampled_ids_are_kept_even_when_not_canonical(tokenizer):
    """The documented difference: we keep what the model sampled, a re-render would merge it."""
    start = [system_message("searcher"), task_message("x")]
    text = "<search>capital</search>"
    split_ids = [i for ch in text.replace("<search>", "").replace("</search>", "") for i in encode_text(tokenizer, ch)]
    sampled = encode_text(tokenizer, "<search>") + split_ids + encode_text(tokenizer, "</search>")
    assert tokenizer.decode(sampled) == text and sampled != encode_text(tokenizer, text)
    prompt = prompt_ids(tokenizer, start)
    ids = prompt + sampled + turn_continuation_ids(tokenizer, sampled, [INFO])
    assert ids[: len(prompt) + len(sampled)] == prompt + sampled
    assert ids != full_render(tokenizer, [*start, {"role": "assistant", "content": text}, INFO])


def test_template_without_verbatim_content_is_rejected(tokenizer):
    odd = train_tokenizer(["x"])
    odd.chat_template = "{% for m in messages %}{{ m['role'] }}{% endfor %}"
    with pytest.raises(ValueError, match="verbatim"):
        turn_continuation_ids(odd, [1], [INFO])


def test_a_cut_inside_a_word_is_rejected(tokenizer):
    """A template that glues the next message to the assistant's text: "x" + "ylophone" merge."""
    odd = train_tokenizer(["xylophone xylophone xyz"] * 20)
    odd.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match="token boundary"):
        turn_continuation_ids(odd, [1], [{"role": "user", "content": "ylophone"}])


def test_a_cut_at_a_special_token_is_encoded_once(tokenizer, monkeypatch):
    """ChatML's continuation starts with <|im_end|>, split out before tokenizing: no boundary re-encode."""
    from maopd.agents import chat_tokens

    encoded = []
    monkeypatch.setattr(chat_tokens, "encode_text", lambda tok, text: encoded.append(text) or encode_text(tok, text))
    ids = turn_continuation_ids(tokenizer, encode_text(tokenizer, "<search>q</search>"), [INFO])
    assert len(encoded) == 1 and ids[0] == end_of_turn_id(tokenizer)
