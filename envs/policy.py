"""The ``Policy`` protocol: act on a batch of pending agent turns at once.

Every policy (scripted, misbehaving, HF transformers, vLLM, OpenAI-compatible) implements
``act(turns) -> outputs``, one ``AgentOutput`` per ``AgentTurn``. Policies can be mixed per role
with ``RoleRouter``, for example an LLM Searcher under a scripted Leader.

An ``AgentTurn`` is exactly what the environment gives the acting agent: its role prompt and chat
history (``messages``), the action kinds allowed now, and how many answer candidates to produce.
``env.turn(agent)`` builds one from the environment's observation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from envs.actions import ROLES

# The paper's evaluation sampling (Appendix B); every evaluation default in the project reads these.
EVAL_TEMPERATURE = 0.6
EVAL_TOP_P = 0.95


@dataclass(frozen=True)
class AgentTurn:
    agent: str
    role: str
    messages: tuple[dict[str, str], ...]
    allowed: tuple[str, ...]
    num_candidates: int = 1
    call_id: str = ""

    @property
    def task(self) -> str:
        """The first user message: the question (or subtask) this call works on."""
        return next((m["content"] for m in self.messages if m["role"] == "user"), "")


@dataclass
class AgentOutput:
    """One policy output: ``texts`` holds one text per requested candidate.

    Token counts are optional (scripted policies have none). LLM policies also fill ``extra``
    with token-level data (prompt ids, generated ids, log-probs) that the rollout collector keeps.
    """

    texts: list[str]
    input_tokens: int | None = None
    output_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.texts[0] if self.texts else ""


@runtime_checkable
class Policy(Protocol):
    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]: ...


class RoleRouter:
    """A team policy that sends each turn to the policy of its role, batching per role."""

    def __init__(self, policies: Mapping[str, Policy]):
        missing = set(ROLES) - set(policies)
        if missing:
            raise ValueError(f"RoleRouter needs a policy for every role; missing {sorted(missing)}")
        self.policies = dict(policies)

    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        outputs: list[AgentOutput | None] = [None] * len(turns)
        for role, policy in self.policies.items():
            indices = [i for i, turn in enumerate(turns) if turn.role == role]
            if indices:
                for i, output in zip(indices, policy.act([turns[i] for i in indices])):
                    outputs[i] = output
        return outputs  # type: ignore[return-value]
