"""The team vocabulary: a role is an object, a workflow is a declaration, both registered once.

A ``Role`` says what the one shared model is told when it plays the role (its system prompt and
last-turn notice), which action tags it may write (``maopd.envs.actions`` parses them), and
whether it writes several answer candidates per request. A ``Workflow`` declares a team: its
name, its PettingZoo environment's name, its roles, whether it is one of the paper's teams, its
budget in environment steps, and its program, the ``SearchEnv`` subclass that says who acts when
and how a step's actions resolve. Everything else reads them from here:

* ``maopd.envs.actions`` parses a role's output by ``role(name).actions``;
* ``maopd.envs.prompts`` writes a role's system message and last-turn notice from its ``Role``;
* ``maopd.envs.workflows`` lists the registered workflows, their roles and environment modules;
* a workflow's program takes its environment name and budgets from its declaration
  (``SearchEnv.declaration``), and ``pettingzoo_api`` gives its module ``env`` and ``parallel_env``.

A new role is one ``register_role(Role(...))``; its id in training batches (``role_id``) is its
place in the registry, so the roles of the built-in teams keep theirs. A new workflow is a module
holding its roles, its declaration and its program, plus one line in
``maopd.envs.workflows.WORKFLOW_MODULES`` (or one ``register_workflow`` call at run time): see
docs/environments.md, "A new team".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# The action tags of the built-in teams' roles, in the order of an observation's ``action_mask``.
ACTION_KINDS = ("search", "report", "delegate", "select", "answer")
# Further tags a role may write: the judge's ``yes``/``no`` verdict, the Prompted Critic's tag, for a
# role that judges. A workflow whose roles use one appends it to its ``action_mask``
# (``Workflow.action_kinds``), so the built-in workflows' observations keep their shape.
EXTRA_ACTION_KINDS = ("judge",)
_ROLE_NAME = re.compile(r"^[a-z][a-z0-9]*$")


@dataclass(frozen=True)
class Role:
    """One role of a team, played by the shared model when its system prompt is ``prompt``."""

    name: str
    # The system message that makes the shared model play the role; None for a role whose first
    # user message carries its instructions (a role asked as the Prompted Critic's judge is).
    prompt: str | None
    actions: tuple[str, ...]
    # The notice appended to the role's last message when the budget leaves it one kind of action;
    # None for a role that acts once (its single action is already its last).
    last_turn_notice: str | None = None
    # Whether a request to the role asks for ``num_candidates`` texts (the Answerer's candidates).
    candidates: bool = False
    # Its rule-based play, the output for one ``maopd.envs.policy.AgentTurn`` (not imported: the
    # policy module builds on this one): how the scripted, expert and noisy teams (``maopd.agents``)
    # play a role they were not written for. None: they cannot.
    rule: Callable[[Any], str] | None = field(default=None, compare=False)
    # Its option-mode menu (``maopd.envs.option``), as "module:function", imported when first asked
    # for (the option mode builds on this module): function(turn, MenuContext) -> list[Option].
    # None: the role has no menu, and a workflow with it has no option mode.
    menu: str | None = None

    def __post_init__(self) -> None:
        # an agent's role is the part of its name before the first "_" (``searcher_2``)
        if not _ROLE_NAME.match(self.name):
            raise ValueError(f"Role name {self.name!r}: lowercase letters and digits, starting with a letter")
        known = (*ACTION_KINDS, *EXTRA_ACTION_KINDS)
        if not self.actions or any(kind not in known for kind in self.actions):
            raise ValueError(f"Role {self.name!r}: actions must be some of {known}, got {self.actions!r}")


@dataclass(frozen=True)
class Workflow:
    """A team's declaration; its program (``SearchEnv`` subclass) points back at it."""

    name: str
    env_name: str  # the PettingZoo environment's name, ``<name>_v<version>``
    roles: tuple[Role, ...]
    max_steps: int  # the default budget in environment steps
    min_steps: int  # the least budget the program can finish in
    description: str = ""
    # The team's name in result tables, where its untrained form is "<system> base" and its trained
    # form "<system> + RL"; empty: the workflow's name.
    system: str = ""

    @property
    def system_name(self) -> str:
        return self.system or self.name

    @property
    def role_names(self) -> tuple[str, ...]:
        return tuple(role.name for role in self.roles)

    @property
    def action_kinds(self) -> tuple[str, ...]:
        """The kinds its observations' ``action_mask`` orders: ``ACTION_KINDS``, then each of
        ``EXTRA_ACTION_KINDS`` one of its roles writes."""
        extra = [kind for kind in EXTRA_ACTION_KINDS if any(kind in role.actions for role in self.roles)]
        return (*ACTION_KINDS, *extra)


_ROLES: dict[str, Role] = {}


def register_role(role: Role) -> Role:
    """Add ``role`` to the vocabulary (again with the same definition is a no-op); its id is the
    number of roles registered before it. A different role under a registered name is refused."""
    known = _ROLES.get(role.name)
    if known is not None and known != role:
        raise ValueError(f"role {role.name!r} is already registered with another definition")
    _ROLES.setdefault(role.name, role)
    return role


def role(name: str) -> Role:
    """The registered role ``name``; a ValueError naming the registered ones otherwise."""
    try:
        return _ROLES[name]
    except KeyError:
        raise ValueError(f"unknown role {name!r}; expected one of {sorted(_ROLES)}") from None


def role_names() -> tuple[str, ...]:
    """Every registered role, in registration order (the order of ``role_id``)."""
    return tuple(_ROLES)


def role_id(name: str) -> int:
    """``name``'s id in training batches: its place in the registry."""
    role(name)
    return list(_ROLES).index(name)
