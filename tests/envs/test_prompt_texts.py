"""The fixed texts the environment writes (role prompts, the critic's prompt, last-turn notices) hold no action.

They name the tags a role may use by the opening tag alone, so neither the project's parser nor a
naive tag matcher over the whole chat reads an action or a retrieved passage out of them.
"""

import re

import pytest

from maopd.envs import prompts
from maopd.envs.actions import ROLE_ACTION_KINDS, parse_action, strict_answer
from maopd.envs.roles import LEADER_ROLE

NAIVE_TAG = re.compile(r"<(\w+)>.*?</\1>", re.DOTALL)
TEXTS = {
    **{f"role:{role}": text for role, text in prompts.ROLE_PROMPTS.items()},
    "critic": prompts.CRITIC_PROMPT,
    "critic:formatted": prompts.critic_message("q", "s", "r")["content"],
    **{f"notice:{role}": text for role, text in prompts.LAST_TURN_NOTICE.items()},
}


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_text_holds_no_complete_action(name):
    text = TEXTS[name]
    for role in ROLE_ACTION_KINDS:
        parsed = parse_action(text, role)
        assert parsed.kind is None, (role, parsed)
    assert strict_answer(text) is None
    assert not prompts.has_verdict(text) and prompts.parse_judgement(text) == 0.0
    assert NAIVE_TAG.search(text) is None
    assert "</" not in text
    assert "<information>" not in text


def test_role_prompts_still_name_every_action_of_their_role():
    for role, text in prompts.ROLE_PROMPTS.items():
        for kind in ROLE_ACTION_KINDS[role]:
            assert f"<{kind}>" in text, (role, kind)
    assert "<judge>" in prompts.CRITIC_PROMPT
    assert "the word all" in LEADER_ROLE.prompt  # <select> holding all hands over every report
    for role in ("searcher", "solver"):
        assert "information block" in prompts.ROLE_PROMPTS[role]
