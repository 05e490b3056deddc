"""TRL ``GRPOTrainer(environment_factory=…)`` classes for the single-role search environments.

TRL's contract (``trl`` 1.16): the factory returns an object with ``reset(**row)``, whose string is
appended to the prompt's last user message; its public methods are the tools the model may call
(their names, type hints and docstrings make the tool schema); ``get_reward()`` scores the finished
rollout. Here one rollout is one call of one role (``maopd.agents.integrations.role_session``), the
other roles played by ``others`` (default: the SynthWiki expert team):

=======================  ======================  =========================================
class                    tools                   workflows
=======================  ======================  =========================================
``SearcherEnvironment``  ``search``, ``report``  hierarchical (default), cascade
``AnswererEnvironment``  ``answer``              hierarchical (default), cascade
``LeaderEnvironment``    ``delegate``, ``select``  hierarchical
``SolverEnvironment``    ``search``, ``answer``  single (the single agent)
=======================  ======================  =========================================

``reset`` plays the others up to the learner's turn and returns the role's tool prompt and its
first message (``role_session.tool_view``); a row's ``question_index`` (``question_dataset``
writes one) or ``question`` column picks the question, so the ``num_generations`` rollouts of a
group play the same one. A tool call is one action of that kind; the tool answers with what the
environment added to the call (passages, reports, feedback). ``get_reward`` ends a call the model
left open (empty outputs, format failures) and returns the call's reward from the workflow record,
``self.session.record``. A tool call after the call ended raises, which TRL reports to the model
as a tool error.

Nothing here imports ``trl``; ``question_dataset`` imports ``datasets`` (a TRL dependency).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar

from maopd.agents.integrations.role_session import CALL_OVER, RoleSession, tool_action, tool_view
from maopd.envs.workflows import env_module

INSTALL_TRL = "pip install -e '.[trl]'"


class _RoleEnvironment:
    """The shared part: reset, get_reward and the tool-to-action mapping. Keyword options are the
    environment's (``SearchEnvConfig`` fields such as ``split``, ``topk``)."""

    role: ClassVar[str]

    def __init__(self, workflow: str | None = None, *, others: Any = None, seed: int | None = None, **env_options: Any):
        self.session = RoleSession(self.role, workflow, others=others, seed=seed, **env_options)
        self.tool_calls: list[tuple[str, str]] = []  # (kind, action text) the model sent in this episode

    def reset(self, question_index: int | None = None, question: Any = None, **_row: Any) -> str:
        self.tool_calls = []
        return tool_view(self.session.reset(question=question, question_index=question_index))

    def get_reward(self) -> float:
        self.session.finish()
        return self.session.reward

    def _act(self, kind: str, content: Any) -> str:
        if not self.session.call_open:
            raise ValueError(f"{CALL_OVER} No more tool calls are taken.")
        action = tool_action(kind, content)
        self.tool_calls.append((kind, action))
        answer = self.session.act(action)
        return answer if self.session.call_open else "\n\n".join(filter(None, [answer, CALL_OVER]))


class _SearchTool:
    """The ``search`` tool, shared by the roles that search (a mixin: TRL finds inherited tools)."""

    def search(self, query: str) -> str:
        """Search the corpus for passages.

        Args:
            query: What to search for.

        Returns:
            The passages found.
        """
        return self._act("search", query)


class _AnswerTool:
    """The ``answer`` tool, shared by the roles that answer."""

    def answer(self, text: str) -> str:
        """Give the final answer.

        Args:
            text: Only the answer, as a short phrase.
        """
        return self._act("answer", text)


class SearcherEnvironment(_SearchTool, _RoleEnvironment):
    role = "searcher"

    def report(self, text: str) -> str:
        """Finish the task with a short report of the facts found.

        Args:
            text: The report.
        """
        return self._act("report", text)


class AnswererEnvironment(_AnswerTool, _RoleEnvironment):
    role = "answerer"


class LeaderEnvironment(_RoleEnvironment):
    role = "leader"

    def delegate(self, subtasks: list[str]) -> str:
        """Delegate subtasks to the Searchers, one subtask per Searcher.

        Args:
            subtasks: The subtasks, each a simple question.

        Returns:
            The Searchers' reports, numbered.
        """
        return self._act("delegate", subtasks)

    def select(self, reports: str) -> str:
        """Hand reports to the Answerer.

        Args:
            reports: The report numbers, such as "1, 3", or the word all.
        """
        return self._act("select", reports)


class SolverEnvironment(_SearchTool, _AnswerTool, _RoleEnvironment):
    role = "solver"


ENVIRONMENTS: dict[str, type[_RoleEnvironment]] = {
    "searcher": SearcherEnvironment,
    "answerer": AnswererEnvironment,
    "leader": LeaderEnvironment,
    "solver": SolverEnvironment,
}


def trl_environment(role: str = "searcher", workflow: str | None = None, **options: Any) -> Callable[[], Any]:
    """A zero-argument factory for ``GRPOTrainer(environment_factory=…)``: one ``role`` call per
    rollout in ``workflow``; ``options`` are ``others``, ``seed`` and the environment's options."""
    if role not in ENVIRONMENTS:
        raise ValueError(f"role={role!r} is invalid; expected one of {tuple(ENVIRONMENTS)}")
    ENVIRONMENTS[role](workflow, **options)  # fail here, not inside the trainer, on a bad option
    return functools.partial(ENVIRONMENTS[role], workflow, **options)


def question_dataset(workflow: str = "hierarchical", size: int | None = None, **env_options: Any) -> Any:
    """A ``datasets.Dataset`` with one row per question of the environment's question set (the
    first ``size``): an empty user ``prompt``, which ``reset`` fills, and ``question_index``."""
    try:
        from datasets import Dataset
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"question_dataset needs `datasets` ({exc}); install it with: {INSTALL_TRL}"
        ) from None
    questions = env_module(workflow).raw_env(**env_options).questions
    count = len(questions) if size is None else min(size, len(questions))
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": ""}]] * count, "question_index": list(range(count))}
    )
