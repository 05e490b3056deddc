"""Property-based fuzzing of the action parser and tag neutralization (docs/reliability.md).

The strategies here generate what RL policies emit on bad days: random Unicode (lone surrogates
included), NUL bytes, nested and unbalanced tags, case and spacing variants, code fences,
thousands of subtasks, empty and whitespace-only contents, and 1 MB outputs. tests/envs/test_fuzz_envs.py
reuses them to drive whole episodes.
"""

import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maopd.envs.actions import (
    ACTION_KINDS,
    ROLE_ACTION_KINDS,
    STRUCTURAL_TAGS,
    neutralize_tags,
    parse_action,
    strict_answer,
)
from maopd.envs.prompts import LAST_TURN_NOTICE, ROLE_PROMPTS
from tests.adversarial import INJECTION_PAYLOADS

# CI runs >= 10,000 examples in all (these three tests plus test_fuzz_envs.py); set
# MAOPD_FUZZ_SCALE=10 for a deeper run.
FUZZ_SCALE = float(os.environ.get("MAOPD_FUZZ_SCALE", "1"))


def fuzz_settings(examples: int) -> settings:
    return settings(max_examples=max(1, int(examples * FUZZ_SCALE)), deadline=None)


TAG_NAMES = ACTION_KINDS + STRUCTURAL_TAGS
ROLES = tuple(ROLE_ACTION_KINDS)
MEGABYTE = 1_000_000
# Precomputed so that each example costs a slice, not a megabyte of generation.
HUGE_OUTPUTS = (
    "x" * MEGABYTE,
    "<answer>" + "a" * MEGABYTE + "</answer>",
    "y" * MEGABYTE + "<search>late</search>",
    "<report>" + "long report " * (MEGABYTE // 12) + "</report>",
)
MANY_SUBTASKS = "<delegate>\n" + "\n".join(f"{i}. subtask {i}" for i in range(3000)) + "\n</delegate>"

unicode_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
TAG_VARIANTS = tuple(
    variant
    for name in TAG_NAMES
    for variant in (f"<{name}>", f"</{name}>", f"<{name.upper()}>", f"< {name} >", f"</ {name}>", f"<{name}")
)
SPECIAL_FRAGMENTS = (
    "",
    " ",
    "\n",
    "\t \n",
    "\x00",
    "\x00" * 8,
    "```",
    "```python\n",
    "\ufeff",
    "\u202e",
    "1.",
    "- ",
    "all",
    "3, 1",
    "0",
)
fragments = st.one_of(
    unicode_text,
    st.sampled_from(TAG_VARIANTS),
    st.sampled_from(SPECIAL_FRAGMENTS),
    st.sampled_from(INJECTION_PAYLOADS),
    st.sampled_from([*ROLE_PROMPTS.values(), *LAST_TURN_NOTICE.values()]),
)
# Balanced (possibly nested) action tags around mixed content.
nested = st.recursive(
    fragments,
    lambda inner: st.tuples(st.sampled_from(ACTION_KINDS), st.lists(inner, max_size=3)).map(
        lambda pair: f"<{pair[0]}>{''.join(pair[1])}</{pair[0]}>"
    ),
    max_leaves=5,
)
garbage = st.lists(nested, max_size=5).map("".join)


def valid_action(kind: str) -> st.SearchStrategy[str]:
    """A well-formed action of ``kind`` (content free of tags, so the action is its own last tag)."""
    plain = st.text(st.characters(codec="utf-8", exclude_characters="<>"), max_size=30).map(lambda text: f"q{text}")
    content = {"select": st.sampled_from(["all", "1", "1, 2", "2 3", "*"])}.get(kind, plain)
    return content.map(lambda text: f"<{kind}>{text}</{kind}>")


def outputs(role: str) -> st.SearchStrategy[str]:
    """Any text a policy of ``role`` might write: garbage, huge, or a valid action after garbage."""
    actions = st.one_of([valid_action(kind) for kind in ROLE_ACTION_KINDS[role]])
    with_action = st.tuples(garbage, actions).map("".join)
    return st.one_of(garbage, with_action, st.sampled_from(HUGE_OUTPUTS), st.just(MANY_SUBTASKS))


ROLE_ALLOWED = [
    (role, allowed)
    for role, kinds in ROLE_ACTION_KINDS.items()
    for allowed in ([kinds] if len(kinds) == 1 else [kinds, *((kind,) for kind in kinds)])
]
role_allowed_output = st.one_of(
    [st.tuples(st.just(role), st.just(allowed), outputs(role)) for role, allowed in ROLE_ALLOWED]
)
role_kind_action = st.one_of(
    [
        st.tuples(st.just(role), st.just(kind), valid_action(kind))
        for role, kinds in ROLE_ACTION_KINDS.items()
        for kind in kinds
    ]
)
TAG_LOOKALIKE = re.compile(r"<\s*/?\s*(" + "|".join(TAG_NAMES) + r")\s*>", re.IGNORECASE)


@pytest.mark.slow
@fuzz_settings(2500)
@given(role_allowed_output, st.integers(16, 8192))
def test_parser_never_raises_and_reports_consistently(role_allowed_text, max_chars):
    role, allowed, text = role_allowed_text
    parsed = parse_action(text, role, allowed, max_chars)
    assert parsed.valid == (parsed.kind is not None) == (parsed.error is None)
    assert parsed.truncated == (len(text) > max_chars)
    if parsed.truncated:
        assert not parsed.valid
    if not parsed.valid:
        assert isinstance(parsed.error, str) and parsed.error
        return
    assert parsed.kind in allowed
    assert parsed.content == parsed.content.strip() and parsed.content in text
    if parsed.kind in ("search", "report"):
        assert parsed.content
    if parsed.kind == "delegate":
        assert parsed.subtasks and all(task and task == task.strip() and "\n" not in task for task in parsed.subtasks)
    if parsed.kind == "select" and parsed.selection is not None:
        assert parsed.selection and len(set(parsed.selection)) == len(parsed.selection)
        assert all(isinstance(n, int) and n >= 0 for n in parsed.selection)
    if parsed.kind == "answer":
        assert parsed.content == strict_answer(text)


@pytest.mark.slow
@fuzz_settings(2000)
@given(garbage, role_kind_action)
def test_a_valid_action_after_any_garbage_is_the_action(prefix, role_kind_action):
    """The last-complete-tag rule: whatever came before, a trailing valid action is what counts."""
    role, kind, action = role_kind_action
    parsed = parse_action(prefix + action, role, max_chars=len(prefix) + len(action))
    assert parsed.valid and parsed.kind == kind
    assert parsed.content == action[len(kind) + 2 : -len(kind) - 3].strip()


@pytest.mark.slow
@fuzz_settings(2500)
@given(
    st.lists(st.one_of(nested, st.sampled_from(INJECTION_PAYLOADS)), max_size=6).map("".join), st.sampled_from(ROLES)
)
def test_neutralized_text_can_never_act(text, role):
    """Environment-inserted text is neutralized; echoing it verbatim is never an action."""
    safe = neutralize_tags(text)
    assert not TAG_LOOKALIKE.search(safe)
    assert neutralize_tags(safe) == safe
    parsed = parse_action(safe, role, max_chars=max(16, len(safe)))
    assert not parsed.valid and parsed.error.startswith("no complete action tag")
    assert strict_answer(safe) is None


def test_an_echoed_notice_does_not_swallow_the_following_action():
    """An unclosed opening tag (here from the Leader's last-turn notice, echoed by the model) does
    not swallow the following action: a valid selection stays valid."""
    echoed = f"{LAST_TURN_NOTICE['leader']} <select>all</select>"
    assert parse_action(echoed, "leader").selection is None and parse_action(echoed, "leader").valid
    assert strict_answer("<answer> maybe… <answer>Paris</answer>") == "Paris"
    assert parse_action("<search><search>nested</search></search>", "searcher").content == "nested"
