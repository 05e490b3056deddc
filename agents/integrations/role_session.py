"""One model call of one role, driven action by action; the other roles are played by a ``Policy``.

The text-mode core of the TRL and OpenEnv adapters. A *session* plays one episode of a text search
environment (``maopd.envs.workflows``) in which the learner plays **one call** of its role, the
unit a chat model is trained on:

==========  ==============================  ============================================================
role        workflows                       the learner's call
==========  ==============================  ============================================================
searcher    hierarchical (default), cascade the first Searcher assignment (``searcher_0@w1``)
answerer    hierarchical (default), cascade the Answerer's call
leader      hierarchical                    the Leader's call (every delegation round and its selection)
solver      single                          the single agent's call
==========  ==============================  ============================================================

Every other call (the other roles, and in the hierarchy the other Searcher assignments) is played
by ``others`` (default: the SynthWiki expert team, ``maopd.agents.expert_team``). ``act(text)``
takes the learner's output, lets the others act until the learner's call acts again or ends, and
returns what the environment added to the call in answer (retrieved passages, reports, a
format-failure feedback; '' when it added nothing, as after a report). Once the call ends the rest of the
episode is played at once, so ``record`` and ``reward`` (the call's reward from the record:
``searcher_calls`` entry, Answerer mean, Leader, solver) are known. ``finish()`` ends a call the
learner left open with empty outputs, each a format failure, as the environment scores an output
with no action.

``TOOL_PROMPTS`` and ``tool_action`` are the tool-calling view of the same call: each action kind
of the role is a tool with one argument (``search(query)``, ``report(text)``, ``answer(text)``,
``delegate(subtasks)``, ``select(reports)``), rendered to exactly one action of that kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from maopd.envs.actions import neutralize_tags
from maopd.envs.option.single_role import MAX_SKIPPED_EPISODES
from maopd.envs.policy import AgentTurn, Policy
from maopd.envs.records import WorkflowRecord
from maopd.envs.search_env import SearchEnv
from maopd.envs.team import ACTION_KINDS, EXTRA_ACTION_KINDS
from maopd.envs.workflows import check_workflow, env_module, workflow_roles

DEFAULT_WORKFLOW = {
    "leader": "hierarchical",
    "searcher": "hierarchical",
    "answerer": "hierarchical",
    "solver": "single",
}
ROLES = tuple(DEFAULT_WORKFLOW)

# The role prompts for a model that acts through tools instead of writing action tags.
TOOL_PROMPTS = {
    "leader": (
        "You are the Leader of a search team. Break the question into simple subtasks and call the delegate "
        "tool with them, one subtask per Searcher; it answers with their reports. Use facts from earlier "
        "reports to write later subtasks. When the reports suffice, call the select tool with the report "
        "numbers, or the word all, to hand them to the Answerer."
    ),
    "searcher": (
        "You are a Searcher. Find the facts your task asks for. Call the search tool with a query; it answers "
        "with the passages found. When you know the facts, call the report tool with a short report of them."
    ),
    "answerer": (
        "You are the Answerer. Answer the question using the reports: call the answer tool with only the "
        "answer, as a short phrase."
    ),
    "solver": (
        "Answer the question. Call the search tool with a query; it answers with the passages found. When you "
        "know the answer, call the answer tool with only the answer, as a short phrase."
    ),
}
CALL_OVER = "Your call is over."


def tool_action(kind: str, content: str | Sequence[str]) -> str:
    """The text action a tool call of ``kind`` stands for: exactly one tag of that kind, tag
    look-alikes in ``content`` escaped (``delegate`` takes a list of subtasks, one per line)."""
    if kind not in (*ACTION_KINDS, *EXTRA_ACTION_KINDS):
        raise ValueError(f"unknown action kind {kind!r}")
    if isinstance(content, (list, tuple)):
        content = "\n".join(str(part) for part in content)
    elif not isinstance(content, str):
        content = str(content)
    return f"<{kind}>{neutralize_tags(content)}</{kind}>"


def since_last_output(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """The messages of a call after its last output (all of them before its first)."""
    outputs = [i for i, message in enumerate(messages) if message["role"] == "assistant"]
    return list(messages[outputs[-1] + 1 :] if outputs else messages)


def tool_view(turn: AgentTurn) -> str:
    """What a tool-calling model reads at the start of ``turn``'s call: its role's tool prompt, then
    the environment's first message (the question or task; the Answerer's reports)."""
    first = [m["content"] for m in turn.messages if m["role"] == "user"][:1]
    return "\n\n".join([TOOL_PROMPTS[turn.role], *first])


def call_reward(record: WorkflowRecord, role: str, call_id: str) -> float:
    """The reward of call ``call_id`` of ``role`` in a finished workflow ``record``."""
    rewards = record.rewards
    if role == "searcher":
        searcher_calls = [call.call_id for call in record.searcher_calls()]
        return float(rewards.searcher_calls[searcher_calls.index(call_id)])
    if role == "answerer":
        return float(np.mean(rewards.answerer)) if rewards.answerer else 0.0
    return float(rewards.leader if role == "leader" else rewards.roles[role])


class RoleSession:
    """One call of ``role`` in ``workflow``; keyword options are the environment's (``SearchEnvConfig``)."""

    def __init__(
        self,
        role: str = "searcher",
        workflow: str | None = None,
        *,
        others: Policy | None = None,
        seed: int | None = None,
        **env_options: Any,
    ):
        if role not in ROLES:
            raise ValueError(f"role={role!r} is invalid; expected one of {ROLES}")
        workflow = check_workflow(workflow or DEFAULT_WORKFLOW[role])
        if role not in workflow_roles(workflow):
            raise ValueError(f"role={role!r} does not play in workflow={workflow!r} (roles {workflow_roles(workflow)})")
        self.role, self.workflow = role, workflow
        self.env: SearchEnv = env_module(workflow).raw_env(**env_options)
        if role == "answerer" and self.env.config.num_candidates != 1:
            raise ValueError("num_candidates: the learner's call writes one candidate; leave num_candidates at 1")
        if others is None and len(workflow_roles(workflow)) > 1:
            from maopd.agents.expert_team import expert_team

            others = expert_team()
        self.others = others
        self._rng = np.random.default_rng(seed)
        self.agent: str | None = None
        self.call_id: str | None = None
        self.actions = 0  # outputs the learner gave in this episode

    # ----- the episode ----------------------------------------------------------------------------
    def reset(
        self,
        *,
        question: Any = None,
        question_index: int | None = None,
        seed: int | None = None,
    ) -> AgentTurn:
        """Start an episode and play the others up to the learner's first turn, which is returned.

        ``question`` (a ``Question`` or a dict with ``question`` and ``golden_answers``) or
        ``question_index`` picks the question; otherwise the session's generator draws one. An
        episode in which the learner's role never acts is redrawn (a given question raises).
        """
        if question is not None and question_index is not None:
            raise ValueError("pass question or question_index, not both")
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        options = {"question": question} if question is not None else {}
        if question_index is not None:
            options = {"question_index": question_index}
        for _ in range(MAX_SKIPPED_EPISODES):
            self.agent = self.call_id = None
            self.actions = 0
            self.env.reset(seed=int(self._rng.integers(2**31)), options=options or None)
            if self._advance():
                return self.turn
            if options:
                break
        raise RuntimeError(f"the {self.role} role did not act in the episode{'s drawn' if not options else ''}")

    def _is_learner(self, agent: str) -> bool:
        if self.call_id is None:
            return self.env.role_of(agent) == self.role
        return agent == self.agent and self.env.turn(agent).call_id == self.call_id

    def _advance(self) -> bool:
        """Let the others act until the learner's call acts (True) or the episode ends (False)."""
        env = self.env
        while acting := env.acting_agents():
            if self._is_learner(acting[0]):
                if self.call_id is None:
                    self.agent, self.call_id = acting[0], env.turn(acting[0]).call_id
                return True
            batch = []
            for agent in acting:
                if self._is_learner(agent):
                    break
                batch.append(agent)
            for output in self.others.act([env.turn(agent) for agent in batch]):
                env.step(output)
        return False

    # ----- the learner's call -----------------------------------------------------------------
    @property
    def call_open(self) -> bool:
        """Whether the learner's call acts now (False before ``reset`` and once the call ended)."""
        return self.agent is not None and self.agent in self.env.acting_agents() and self._is_learner(self.agent)

    @property
    def turn(self) -> AgentTurn:
        """The learner's turn now: what it reads and may do. RuntimeError once its call ended."""
        if not self.call_open:
            raise RuntimeError(f"the {self.role}'s call is not acting (call reset() to start an episode)")
        return self.env.turn(self.agent)

    def act(self, action: Any) -> str:
        """The learner's output (text, or ``AgentOutput``); returns the text the environment added
        to the call in answer, messages joined by a blank line ('' when it added nothing)."""
        seen = len(self.turn.messages)
        self.actions += 1
        self.env.step(action)
        if self._advance():
            messages = self.env.turn(self.agent).messages
        else:
            messages = next(call for call in self.record.calls if call.call_id == self.call_id).messages
        # the learner's output is messages[seen]; what follows is the environment's answer
        return "\n\n".join(message["content"] for message in messages[seen + 1 :])

    def finish(self) -> WorkflowRecord:
        """End the episode: a call left open gets empty outputs (format failures) until it ends."""
        if self.agent is None:
            raise RuntimeError("finish() before reset(): call reset() first")
        while self.call_open:
            self.act("")
        return self.record

    @property
    def done(self) -> bool:
        return getattr(self.env, "record", None) is not None

    @property
    def record(self) -> WorkflowRecord:
        """The finished episode's workflow record (``maopd.envs.records``); RuntimeError before the end."""
        if not self.done:
            raise RuntimeError("the episode has not ended: the learner's call is still open (see finish())")
        return self.env.record

    @property
    def reward(self) -> float:
        """The learner's call's reward from the record (``call_reward``)."""
        return call_reward(self.record, self.role, self.call_id)
