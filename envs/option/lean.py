"""Option-mode transitions without the text environment's overheads, identical to its transitions.

Most of what an option-mode transition in ``OptionWrapper`` over the PettingZoo text environment
costs (benchmarks/results/credit_assignment/README.md) is outside the workflow's rules: the
order-enforcing wrapper, per-agent ``infos`` rebuilt at every step, the transcript, retrieval and
passage formatting for every search, dead-agent steps at the end. The lean
environments here are the text environments' own classes (``hierarchical_search_v1.raw_env``,
``cascade_search_v1.raw_env``) with only those parts replaced:

* retrieval is looked up per world: a query's passages and its ``<information>`` message are
  built once per process and retriever (``SearchTable``), then shared by every episode;
* the action parser is memoised: every text parsed is a menu option's;
* ``infos``, the transcript and the AEC rewards are not kept (an option-mode learner reads the
  observation, the mask and the record; the record holds the rewards);
* a finished episode has no agents left (no dead steps) and its record comes from the same
  ``SearchEnv._workflow_record``.

Every rule (budgets, forced finish, format failures, rewards) and every text (messages, reports) is
therefore the text environment's code, and menus and observations are ``OptionWrapper``'s: a lean
environment is wrapped in ``OptionWrapper`` like any other (``lean_option_env``, or
``lean_option_envs`` for many), so it plugs into ``OptionVectorEnv`` and ``play_options``
unchanged. tests/envs/test_option_lean.py plays sampled episodes here and replays them through the
scenario's text environment, requiring identical observations, masks and records.

    env = lean_option_env(scenario.make_env("train"))
    venv = OptionVectorEnv(lean_option_envs(scenario.make_env("train")), num_envs=64)
"""

from __future__ import annotations

import copy
import functools
import weakref
from collections.abc import Callable
from typing import Any

from envs import cascade_search_v1, hierarchical_search_v1
from envs.actions import parse_action
from envs.option.wrapper import OptionWrapper
from envs.retrieval.base import Retriever
from envs.search_env import SearchEnv, search_results

PassageDicts = list[dict[str, Any]]


class SearchTable:
    """One retriever's results per query, with the ``<information>`` message each gives.

    Entries are shared by every episode that searches the query: the passage dicts and the message
    end up in records and chat histories, which are read-only.
    """

    def __init__(self, retriever: Retriever, topk: int, max_passage_chars: int):
        self.retriever = retriever
        self.topk = topk
        self.max_passage_chars = max_passage_chars
        self._found: dict[str, tuple[PassageDicts, dict[str, str]]] = {}

    def search(self, queries: list[str]) -> list[tuple[PassageDicts, dict[str, str]]]:
        missing = [q for q in dict.fromkeys(queries) if q not in self._found]
        if missing:
            found = search_results(self.retriever, missing, self.topk, self.max_passage_chars)
            self._found.update(zip(missing, found))
        return [self._found[q] for q in queries]


# One table per (retriever, topk, passage length): the scenarios share one retriever per world.
_TABLES: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], SearchTable]] = weakref.WeakKeyDictionary()


def search_table(retriever: Retriever, topk: int, max_passage_chars: int) -> SearchTable:
    tables = _TABLES.setdefault(retriever, {})
    key = (topk, max_passage_chars)
    if key not in tables:
        tables[key] = SearchTable(retriever, topk, max_passage_chars)
    return tables[key]


class LeanEnvironment:
    """What the lean environments replace in ``SearchEnv``; mixed in before the workflow's class."""

    def __init__(self, template: SearchEnv):
        super().__init__(template.config, retriever=template.retriever, questions=template.questions)
        self.search_table = search_table(self.retriever, self.config.topk, self.config.max_passage_chars)

    # Every text a lean environment parses is a menu option's (or the empty output of an invalid
    # choice): few distinct texts, each parsed many times. ParsedAction is frozen, so sharing is safe.
    _parse_action = staticmethod(functools.lru_cache(maxsize=1 << 16)(parse_action))

    def _search(self, queries: list[str]) -> list[tuple[PassageDicts, dict[str, str]]]:
        return self.search_table.search(queries)

    def _refresh_infos(self) -> None:
        pass

    def _finish(self) -> None:
        self.record = self._workflow_record()
        self.agents = []

    def _log(self, line: str) -> None:
        pass

    def _history(self, agent: str) -> tuple[dict[str, str], ...]:
        # the messages themselves, not copies: an option-mode turn is read by the menus only
        return tuple(self._messages(agent))


class LeanHierarchical(LeanEnvironment, hierarchical_search_v1.raw_env):
    pass


class LeanCascade(LeanEnvironment, cascade_search_v1.raw_env):
    pass


_LEAN_CLASSES = {"hierarchical": LeanHierarchical, "cascade": LeanCascade}


def lean_option_envs(template: OptionWrapper) -> Callable[[], OptionWrapper]:
    """A function that makes option-mode environments with ``template``'s settings (workflow,
    config, questions, retriever, menus, hints, closed book) whose transitions are the lean ones.

    Each is a shallow copy of one prototype: building a ``SearchEnv`` (its spaces) is not free, a
    vector env makes one per slot, and ``reset`` sets every per-episode attribute
    anew, so copies share only what no episode changes (config, questions, spaces, search table).
    """
    raw = template.unwrapped
    if raw.workflow not in _LEAN_CLASSES:
        expected = sorted(_LEAN_CLASSES)
        raise ValueError(f"workflow={raw.workflow!r} has no lean option environment; expected one of {expected}")
    prototype = _LEAN_CLASSES[raw.workflow](raw)

    def make() -> OptionWrapper:
        return OptionWrapper(copy.copy(prototype), template.menu_size, template.hints, template.closed_book)

    return make


def lean_option_env(template: OptionWrapper) -> OptionWrapper:
    """One lean option-mode environment with ``template``'s settings (see ``lean_option_envs``)."""
    return lean_option_envs(template)()
