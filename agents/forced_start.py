"""``ForcedStart``: a policy whose first output in each call of one role begins with a given text.

Measurements that ask what a model does once a decision is taken for it (does the Searcher know
the answer if it reports without searching? what does the team score when the Searcher must
search?) force the start of that decision and let the model write the rest. The forced text is
appended to the call's first prompt ids as its own encoding (an action tag is one token of
``maopd.agents.tokenizer``'s tokenizers, so the ids are those of the model writing it) and put back in
front of the decoded continuation, so the environment reads the whole action.

Every other turn, the role's later turns included, is played by the wrapped policy's ``act``.
Forced outputs carry texts and token counts only, no token-level record (``extra``): they are for
measurements, not for training.
"""

from __future__ import annotations

from collections.abc import Sequence

from maopd.agents.chat_tokens import encode_text, prompt_ids
from maopd.agents.token_policy import TokenPolicy
from maopd.envs.policy import AgentOutput, AgentTurn


def is_first_output(turn: AgentTurn) -> bool:
    """Whether ``turn`` asks for the first output of its call (no assistant message yet)."""
    return not any(message["role"] == "assistant" for message in turn.messages)


class ForcedStart:
    """``policy``, except that each ``role`` call's first output begins with ``start``."""

    def __init__(self, policy: TokenPolicy, role: str, start: str):
        if not start:
            raise ValueError("ForcedStart needs a non-empty start text")
        self.policy = policy
        self.role = role
        self.start = start
        self.start_ids = encode_text(policy.tokenizer, start)

    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        forced = [i for i, turn in enumerate(turns) if turn.role == self.role and is_first_output(turn)]
        rest = sorted(set(range(len(turns))) - set(forced))
        outputs: list[AgentOutput | None] = [None] * len(turns)
        if rest:
            for i, output in zip(rest, self.policy.act([turns[i] for i in rest])):
                outputs[i] = output
        if forced:
            tokenizer = self.policy.tokenizer
            prompts = [prompt_ids(tokenizer, turns[i].messages) + self.start_ids for i in forced]
            results = self.policy.generate(prompts, [turns[i].num_candidates for i in forced])
            for i, prompt, candidates in zip(forced, prompts, results):
                texts = [self.start + tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in candidates]
                generated = sum(len(c.token_ids) for c in candidates)
                outputs[i] = AgentOutput(texts, input_tokens=len(prompt), output_tokens=generated)
        return outputs  # type: ignore[return-value]
