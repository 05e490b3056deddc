"""The ``Policy`` protocol: act on a batch of pending agent turns at once.

Every policy (scripted, misbehaving, HF transformers, vLLM, OpenAI-compatible) implements
``act(turns) -> outputs``, one ``AgentOutput`` per ``AgentTurn``. Policies can be mixed per role
with ``RoleRouter``, for example an LLM Searcher under a scripted Leader.

The return-length contract: ``act`` returns exactly one ``AgentOutput`` per turn, in the turns'
order, each holding one text per requested candidate (``turn.num_candidates``). Where outputs
enter an environment (``run_episode``, ``RoleRouter``, the single-role env) their count is checked;
a policy named on the command line (``maopd.envs.policy_loading``) has every output checked.
Either way a broken contract is a ``PolicyOutputError``, one line naming the policy.

An ``AgentTurn`` is exactly what the environment gives the acting agent: its role prompt and chat
history (``messages``), the action kinds allowed now, how many answer candidates to produce, and,
as separate fields for policies that are not models, the bare task and the instructions given
with it. ``env.turn(agent)`` builds one.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from maopd.base.config import check_fields, checked
from maopd.base.errors import UserError
from maopd.base.limits import INPUT_TOKENS, NEW_TOKENS
from maopd.envs import team
from maopd.envs.roles import TEAM_ROLES


@dataclass
class SamplingSettings:
    """How a policy samples, each default and range written once: the defaults are the paper's
    evaluation sampling (Appendix B). ``maopd.agents.sampling.SamplingConfig`` extends it; every other
    config that carries one of these settings declares it with ``maopd.base.config.field_like``."""

    temperature: float = checked(
        0.6, ge=0, note="0 is greedy", help="Sampling temperature; 0 takes the most likely token (greedy)."
    )
    top_p: float = checked(
        0.95,
        gt=0,
        le=1,
        help="Nucleus sampling: tokens are drawn from the most likely ones whose probabilities add up to top_p; "
        "1 samples from the whole distribution.",
    )
    max_new_tokens: int = checked(
        512,
        ge=1,
        **NEW_TOKENS.constraint(),
        help="The most tokens one model output may have; generation stops there (finish reason 'length').",
    )
    max_input_tokens: int = checked(
        8192,
        ge=1,
        **INPUT_TOKENS.constraint(),
        help="The longest prompt, in tokens, a model call runs; a longer one is not run (finish reason "
        "'prompt_too_long') rather than truncated.",
    )

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class AgentTurn:
    """One pending turn. ``messages`` is exactly what the model reads; ``task`` is the bare
    question or subtask of the call (no ``Question:``/``Task:`` label, tag look-alikes escaped as
    in ``messages``) and ``instructions`` what the environment's first message adds to it (the
    Leader's team size and wave limit; '' for the other roles)."""

    agent: str
    role: str
    messages: tuple[dict[str, str], ...]
    allowed: tuple[str, ...]
    num_candidates: int = 1
    call_id: str = ""
    task: str = ""
    instructions: str = ""


MAX_TOKEN_COUNT = 2**53  # exact in a float: every JSON reader gets the same number


def token_count(value: Any, name: str = "token count") -> int | None:
    """``value`` as a token count: None (unknown) or a non-negative whole number, else ValueError.

    NaN, infinities, negative numbers, fractions, booleans and strings are refused, so that a
    record's counters are always valid JSON integers.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # one error type for any bad count
        raise ValueError(f"{name} must be a non-negative integer or None, got {value!r}")  # noqa: TRY004
    if isinstance(value, numbers.Integral):
        ok = 0 <= value <= MAX_TOKEN_COUNT
    else:
        ok = math.isfinite(value) and 0 <= value <= MAX_TOKEN_COUNT and value == int(value)
    if not ok:
        raise ValueError(f"{name} must be a non-negative integer (at most 2**53) or None, got {value!r}")
    return int(value)


def safe_token_count(value: Any) -> int:
    """``token_count`` for untrusted input: anything invalid (or unknown) counts as 0."""
    try:
        return token_count(value) or 0
    except (ValueError, OverflowError):
        return 0


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

    def __post_init__(self) -> None:
        self.input_tokens = token_count(self.input_tokens, "AgentOutput.input_tokens")
        self.output_tokens = token_count(self.output_tokens, "AgentOutput.output_tokens")

    @property
    def text(self) -> str:
        return self.texts[0] if self.texts else ""


@runtime_checkable
class Policy(Protocol):
    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]: ...


class PolicyOutputError(UserError, ValueError):
    """A policy's ``act`` broke the return-length contract; the message names the policy and what
    it returned."""


def checked_outputs(name: str, turns: Sequence[AgentTurn], outputs: Any, every_output: bool = False) -> list:
    """``outputs`` as a list, after checking that ``act`` of the policy ``name`` returned one output
    per turn; with ``every_output``, also that each is an ``AgentOutput`` whose ``texts`` are
    strings, one per requested candidate. ``PolicyOutputError`` otherwise."""
    contract = "act(turns) returns one AgentOutput per turn, in the turns' order, with one text per candidate"
    if not isinstance(outputs, (list, tuple)):
        raise PolicyOutputError(f"policy {name} returned a {type(outputs).__name__}; {contract}")
    if len(outputs) != len(turns):
        raise PolicyOutputError(f"policy {name} returned {len(outputs)} output(s) for {len(turns)} turn(s); {contract}")
    if not every_output:
        return list(outputs)
    for index, (turn, output) in enumerate(zip(turns, outputs)):
        where = f"policy {name} returned for turn {index} ({turn.agent})"
        if not isinstance(output, AgentOutput):
            raise PolicyOutputError(f"{where} a {type(output).__name__}; {contract}")
        texts = output.texts
        if not isinstance(texts, (list, tuple)) or not all(isinstance(text, str) for text in texts):
            raise PolicyOutputError(f"{where} texts that are not a list of strings; {contract}")
        if len(texts) != turn.num_candidates:
            raise PolicyOutputError(f"{where} {len(texts)} texts for {turn.num_candidates} candidate(s); {contract}")
    return list(outputs)


class RoleRouter:
    """A team policy that sends each turn to the policy of its role, batching per role.

    ``roles`` are the roles it must be able to play, checked when it is built: by default the
    team's (``TEAM_ROLES``, the cascade and the hierarchy), so a team router needs no solver;
    ``maopd.envs.workflows.workflow_roles("single")`` for the single agent alone. A turn of a role
    without a policy goes to ``others`` (for example ``RolesByRule``), and without one is a
    ValueError naming the role.
    """

    def __init__(self, policies: Mapping[str, Policy], roles: Iterable[str] = TEAM_ROLES, others: Policy | None = None):
        missing = set(roles) - set(policies)
        if missing:
            raise ValueError(f"RoleRouter needs a policy for every role it plays; missing {sorted(missing)}")
        self.policies = dict(policies)
        self.others = others

    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        unrouted = sorted({turn.role for turn in turns} - set(self.policies))
        if unrouted and self.others is None:
            raise ValueError(f"RoleRouter has no policy for role {unrouted[0]!r}; it plays {sorted(self.policies)}")
        outputs: list[AgentOutput | None] = [None] * len(turns)
        routes = {**self.policies, **dict.fromkeys(unrouted, self.others)}
        for role, policy in routes.items():
            indices = [i for i, turn in enumerate(turns) if turn.role == role]
            if indices:
                routed = [turns[i] for i in indices]
                name = f"{type(policy).__name__} (RoleRouter's {role})"
                for i, output in zip(indices, checked_outputs(name, routed, policy.act(routed))):
                    outputs[i] = output
        return outputs  # type: ignore[return-value]


class RolesByRule:
    """Plays each role by its declared rule (``maopd.envs.team.Role.rule``): what a scripted team
    does for a role it was not written for."""

    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        outputs = []
        for turn in turns:
            rule = team.role(turn.role).rule
            if rule is None:
                raise ValueError(f"role {turn.role!r} declares no rule, so a scripted team cannot play it")
            outputs.append(AgentOutput([rule(turn) for _ in range(turn.num_candidates)]))
        return outputs
