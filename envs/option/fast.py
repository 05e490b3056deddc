"""Option-mode episodes by a compact second implementation of the workflows, over per-world tables.

The text environments (``hierarchical_search_v1``, ``cascade_search_v1`` under ``OptionWrapper``)
are the reference. A new option-mode transition there costs what a PettingZoo text environment
costs: the AEC bookkeeping, a chat history copied for every turn, and a menu built from scratch
for every decision. Here the same rules (schedules, budgets, forced finish, format failures) run
on a small state per episode, and everything expensive is
looked up in tables built once per world and shared by every episode, seed and method of a
process:

* **histories** (``History``): each call's chat history is a node of a trie rooted at (question,
  role, task), and an action, a search result, a report or a notice leads to a child node. Calls
  that go the same way (the same subtask, the same queries) share their nodes, whatever the rest
  of the team did;
* **menus**: a node keeps the menus built on it (by call id and allowed kinds) with their item
  features as a float32 block, so a history reached again costs a dictionary look-up instead of
  parsing passages and questions;
* **retrieval**: a query's passages and its ``<information>`` message are computed once per
  retriever (``SearchTable``), and ``FastVectorEnv`` retrieves the new queries of every episode
  of a tick in one retriever call;
* **the action grammar**: every text parsed is a menu option's; each is parsed once.

Texts, prompts, menus and the finished record (rewards included) are the text environments' own
code (``maopd.envs.prompts``, ``maopd.envs.option.menus.build_menu``, ``SearchEnv._workflow_record``, which
``FastEpisode`` borrows), so only the rules of the steps are implemented twice.
tests/envs/test_option_fast.py samples episodes here with random, expert-leaning and trained
policies (format failures, budget exhaustion, workflows that end without an answer) and replays
them through the text environment, requiring identical observations, masks, global states and
records.

``FastVectorEnv`` steps many episodes at once with ``OptionVectorEnv``'s interface::

    venv = FastVectorEnv(World(scenario.make_env("train")), num_envs=64)
    venv.reset([3, 17, ...])            # one question index per slot
    while pending := venv.pending():   # [(slot, Node)] of the slots whose agent must act
        venv.step({slot: choose(node) for slot, node in pending})
    records = venv.records()
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from maopd.envs import hierarchical_search_v1, prompts
from maopd.envs import rewards as R
from maopd.envs.actions import ACTION_KINDS, ParsedAction, neutralize_tags, parse_action
from maopd.envs.datasets import Question
from maopd.envs.option.menus import HINT_FEATURE, ITEM_FEATURES, Option, build_menu
from maopd.envs.option.vector import Node
from maopd.envs.option.wrapper import OptionWrapper
from maopd.envs.policy import AgentTurn
from maopd.envs.records import CallRecord, Counters, WorkflowRecord
from maopd.envs.retrieval.base import Retriever
from maopd.envs.roles import TEAM_ROLES
from maopd.envs.search_env import (
    SearchEnv,
    SearchEnvConfig,
    call_record,
    keep_output,
    search_results,
    with_notice,
)
from maopd.envs.synthwiki.questions import KINDS, question_kind

Message = dict[str, str]
PassageDicts = list[dict[str, Any]]
NO_REPORT = "(no report)"  # a Searcher's forced report (SearchEnv._resolve_searchers)
# A world's tables are dropped and rebuilt on demand past this many history nodes: a long run
# keeps reaching new histories, and old ones are rarely visited again.
MAX_HISTORY_NODES = 400_000


class SearchTable:
    """One retriever's results per query, with the ``<information>`` message each gives.

    Entries are shared by every episode that searches the query: the passage dicts and the message
    end up in records and chat histories, which are read-only.
    """

    def __init__(self, retriever: Retriever, topk: int, max_passage_chars: int):
        self.retriever = retriever
        self.topk = topk
        self.max_passage_chars = max_passage_chars
        self._found: dict[str, tuple[PassageDicts, Message]] = {}

    def search(self, queries: list[str]) -> list[tuple[PassageDicts, Message]]:
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


class Menu:
    """A menu built on a history: its options, their item features (hints already zeroed when the
    scenario hides them) and the action mask."""

    __slots__ = ("options", "items", "mask")

    def __init__(self, options: list[Option], menu_size: int, hints: bool):
        self.options = options
        items = [value for option in options for value in option.features()]
        items += [0.0] * (menu_size * ITEM_FEATURES - len(items))
        if not hints:
            items[HINT_FEATURE::ITEM_FEATURES] = [0.0] * menu_size
        self.items = np.array(items, np.float32)
        self.mask = np.zeros(menu_size, np.int8)
        self.mask[: len(options)] = 1


class History:
    """A call's chat history, a node of its (question, role, task) trie; see the module docstring."""

    __slots__ = ("messages", "root", "_next", "menus")

    def __init__(self, messages: tuple[Message, ...], root: Root):
        self.messages = messages
        self.root = root
        self._next: dict[Any, History] = {}
        self.menus: dict[tuple[str, tuple[str, ...]], Menu] = {}

    def then(self, key: Any, message: Callable[[], Message]) -> History:
        """The history with ``message()`` appended; ``key`` names the message among this node's children."""
        child = self._next.get(key)
        if child is None:
            child = self._next[key] = History((*self.messages, message()), self.root)
            self.root.world.nodes += 1
        return child

    def said(self, text: str) -> History:
        """The history with the assistant's ``text`` appended."""
        return self.then(("said", text), lambda: {"role": "assistant", "content": text})

    def noticed(self, role: str) -> History:
        """The history with the role's last-turn notice appended to its final message."""
        child = self._next.get("notice")
        if child is None:
            child = self._next["notice"] = History(tuple(with_notice(self.messages, role)), self.root)
            self.root.world.nodes += 1
        return child


class Root:
    """What every history of one (question, role, task) trie shares: the menus' inputs besides the turn."""

    __slots__ = ("world", "question", "role", "task")

    def __init__(self, world: World, question: Question, role: str, task: str):
        self.world, self.question, self.role, self.task = world, question, role, task


class World:
    """The tables of one scenario environment (``template``), shared by every episode played on it."""

    def __init__(self, template: OptionWrapper):
        raw = template.unwrapped
        if raw.workflow not in ("hierarchical", "cascade"):
            raise ValueError(f"workflow={raw.workflow!r} has no fast option mode; expected 'hierarchical' or 'cascade'")
        self.workflow = raw.workflow
        self.config = raw.config
        self.max_steps = raw.max_steps
        self.questions = raw.questions
        self.possible_agents = list(raw.possible_agents)
        self.searchers = [agent for agent in self.possible_agents if agent.startswith("searcher")]
        self.menu_size, self.hints, self.closed_book = template.menu_size, template.hints, template.closed_book
        self.search_table = search_table(raw.retriever, self.config.topk, self.config.max_passage_chars)
        self._parsed: dict[tuple[str, str, tuple[str, ...]], ParsedAction] = {}
        self._roots: dict[tuple[int, str, Any], History] = {}
        self._question_features: dict[int, tuple[list[float], frozenset[str]]] = {}
        self.nodes = 0

    def history(self, question: int, role: str, key: Any, messages: Callable[[], tuple[Message, ...]]) -> History:
        """The root history of ``role``'s call on ``question``, told apart from the role's other
        calls on it by ``key`` (a Searcher's task, the Answerer's reports)."""
        if self.nodes > MAX_HISTORY_NODES:
            self._roots.clear()
            self._parsed.clear()
            self.nodes = 0
        node = self._roots.get((question, role, key))
        if node is None:
            q = self.questions[question]
            task = neutralize_tags(key if role == "searcher" else q.question)
            node = self._roots[(question, role, key)] = History(messages(), Root(self, q, role, task))
            self.nodes += 1
        return node

    def parse(self, text: str, role: str, allowed: tuple[str, ...]) -> ParsedAction:
        key = (text, role, allowed)
        parsed = self._parsed.get(key)
        if parsed is None:
            parsed = self._parsed[key] = parse_action(text, role, allowed, self.config.max_action_chars)
        return parsed

    def question_features(self, question: int) -> tuple[list[float], frozenset[str]]:
        """The question's kind one-hot and its supporting passages (SynthWiki metadata; none without it)."""
        if question not in self._question_features:
            metadata = self.questions[question].metadata
            kind = question_kind(self.questions[question]) if "type" in metadata and "hops" in metadata else None
            support = frozenset(metadata.get("supporting_passages", ()))
            self._question_features[question] = ([float(kind == k) for k in KINDS], support)
        return self._question_features[question]

    def menu(self, history: History, agent: str, call_id: str, allowed: tuple[str, ...]) -> Menu:
        key = (call_id, allowed)
        menu = history.menus.get(key)
        if menu is None:
            root = history.root
            turn = AgentTurn(
                agent,
                root.role,
                history.messages,
                allowed,
                self.config.num_candidates if root.role == "answerer" else 1,
                call_id,
                root.task,
            )
            options = build_menu(turn, self.config.num_searchers, self.menu_size, root.question.id, self.closed_book)
            menu = history.menus[key] = Menu(options, self.menu_size, self.hints)
        return menu


class Call:
    """A Searcher assignment (``SearcherCall``) or another role's call (``Turn``)."""

    __slots__ = (
        *("agent", "role", "wave", "task", "history", "search_steps", "report", "forced", "exhausted"),
        *("format_failed", "outputs", "output_chars", "messages", "input_tokens", "output_tokens"),
    )

    def __init__(self, agent: str, role: str, history: History, wave: int | None = None, task: str = ""):
        self.agent, self.role, self.history, self.wave, self.task = agent, role, history, wave, task
        self.search_steps = 0
        self.report: str | None = None
        self.forced = self.exhausted = self.format_failed = False
        self.outputs: list[str] = []
        self.output_chars: list[int] = []
        self.input_tokens = self.output_tokens = 0  # an option is no model output

    @property
    def call_id(self) -> str:
        return f"{self.agent}@w{self.wave}" if self.role == "searcher" else self.agent

    @property
    def done(self) -> bool:
        return self.report is not None

    def as_record(self) -> CallRecord:
        self.messages = list(self.history.messages)  # what call_record records
        return call_record(self.call_id, self.agent, self.role, self.wave, self)


class FastEpisode:
    """One option-mode episode; the same transitions as ``OptionWrapper`` over the world's text
    environment. ``reset(question)``, then ``node()`` (who acts and what it observes, or the
    record) and ``step(action)`` until ``node().done``."""

    def __init__(self, world: World):
        self.world = world

    # ----- the episode's life ------------------------------------------------------------------
    def reset(self, question: int) -> None:
        world, config = self.world, self.world.config
        self.question_index, self.question = question, world.questions[question]
        self.env_step = 0
        self.counters = Counters()
        self.format_errors: list[dict[str, Any]] = []
        self.searches: list[dict[str, Any]] = []
        self.retrieved: set[str] = set()
        self.searcher_calls: list[Call] = []
        self.active: dict[str, Call] = {}
        self.reports: list[dict[str, Any]] = []
        self.subtasks: list[dict[str, Any]] = []
        self.dropped_subtasks: list[str] = []
        self.selected: list[int] = []
        self.answer_turn: Call | None = None
        self._candidate_valid: list[bool] = []
        self.record: WorkflowRecord | None = None
        self._started = time.perf_counter()
        self._pending: dict[str, str] = {}
        self.rounds = 0
        self.leader_out_of_budget = False
        self._wave_start = 0
        self._node: Node | None = None
        self._acting: tuple[str, Call, tuple[str, ...], Menu] | None = None
        # what state() reads, kept as the episode goes instead of recounted at every decision
        self._reports_with_facts = 0
        self._last_call: dict[str, Call] = {}
        self._assignments = dict.fromkeys(world.searchers, 0)
        if world.workflow == "hierarchical":
            text = self.question.question
            leader = world.history(
                question,
                "leader",
                None,
                lambda: (
                    prompts.system_message("leader"),
                    prompts.question_message(text, config.num_searchers, config.max_rounds),
                ),
            )
            self.leader: Call | None = Call("leader", "leader", leader)
        else:
            self.leader = None
            self._assign("searcher_0", 1, self.question.question)
        self._schedule_next()

    def _schedule(self) -> list[str]:
        if self.answered:
            return []
        if self.active:
            return [agent for agent in self.world.possible_agents if agent in self.active]
        if self.world.workflow == "cascade":
            if self.answer_turn is None:
                if not self.reports:
                    return []
                self._start_answer([report["number"] for report in self.reports])
            return ["answerer"]
        if self.answer_turn is not None:
            return ["answerer"]
        return [] if self.leader_out_of_budget else ["leader"]

    def _schedule_next(self) -> None:
        self._scheduled = self._schedule()
        self._cursor = 0
        self._node = self._acting = None
        if not self._scheduled:
            self.record = self._workflow_record()

    def step(self, action: Any) -> None:
        """Act for the agent of ``node()``: a menu index (anything else is a format failure)."""
        if self.record is not None:
            raise RuntimeError("FastEpisode.step(): the episode is over; reset it to start another")
        agent = self._acting_turn()[0]
        self._pending[agent] = self._chosen_text(action)
        self._cursor += 1
        self._node = self._acting = None
        if self._cursor < len(self._scheduled):
            return
        self.env_step += 1
        actions, self._pending = self._pending, {}
        if "leader" in actions:
            self._resolve_leader(actions["leader"])
        elif "answerer" in actions:
            self._resolve_answer(actions["answerer"])
        else:
            self._resolve_searchers(actions)
        self._schedule_next()

    def _chosen_text(self, action: Any) -> str:
        """The text of the acting agent's menu option ``action`` names; "" (a format failure) if it names none."""
        options = self._acting_turn()[3].options
        valid = isinstance(action, (int, np.integer)) and not isinstance(action, bool) and 0 <= action < len(options)
        return options[int(action)].text if valid else ""

    def query(self, action: Any) -> str | None:
        """The query ``action`` would search: the acting agent is a Searcher and it names a search."""
        if self.record is not None or self._acting_turn()[1].role != "searcher":
            return None
        parsed = self.world.parse(self._chosen_text(action), "searcher", self._acting_turn()[2])
        return parsed.content if parsed.kind == "search" else None

    # ----- what the acting agent sees ----------------------------------------------------------------
    @property
    def answered(self) -> bool:
        return self.answer_turn is not None and bool(self.answer_turn.outputs)

    def acting_agents(self) -> list[str]:
        return [] if self.record is not None else self._scheduled[self._cursor :]

    def _searcher_last_step(self) -> int:
        return self.world.max_steps - (2 if self.world.workflow == "hierarchical" else 1)

    # The budget rules are the text environments' own methods (they read config, max_steps, rounds).
    _searcher_allowed = SearchEnv._searcher_allowed
    _leader_allowed = hierarchical_search_v1.raw_env._leader_allowed
    _leader_last_step = hierarchical_search_v1.raw_env._leader_last_step

    @property
    def max_steps(self) -> int:
        return self.world.max_steps

    def _turn(self, agent: str) -> tuple[Call, History, tuple[str, ...]]:
        """The acting ``agent``'s call, the history it reads now and the kinds it may use."""
        step = self.env_step + 1
        if agent == "leader":
            history = self.leader.history
            return (
                self.leader,
                history.noticed("leader") if self._leader_last_step(step) else history,
                self._leader_allowed(step),
            )
        if agent == "answerer":
            return self.answer_turn, self.answer_turn.history, ("answer",)
        call, allowed = self.active[agent], self._searcher_allowed(step)
        return call, call.history.noticed("searcher") if allowed == ("report",) else call.history, allowed

    def _acting_turn(self) -> tuple[str, Call, tuple[str, ...], Menu]:
        """The acting agent, its call, the kinds it may use and its menu, kept until it acts."""
        if self._acting is None:
            agent = self._scheduled[self._cursor]
            call, history, allowed = self._turn(agent)
            self._acting = (agent, call, allowed, self.world.menu(history, agent, call.call_id, allowed))
        return self._acting

    def menu(self) -> list[Option]:
        """The acting agent's options (empty once the episode is over)."""
        return [] if self.record is not None else self._acting_turn()[3].options

    def node(self) -> Node:
        """Who acts, its observation, mask and the global state; or the finished record."""
        if self._node is None:
            self._node = Node(record=self.record) if self.record is not None else self._acting_node()
        return self._node

    def _acting_node(self) -> Node:
        world, config = self.world, self.world.config
        agent, call, allowed, menu = self._acting_turn()
        role = call.role
        max_steps = world.max_steps
        max_reports = config.num_searchers * config.max_rounds
        search_steps = call.search_steps if role == "searcher" else 0
        features = [
            *(float(role == r) for r in TEAM_ROLES),
            self.env_step / max_steps,
            self.rounds / config.max_rounds,
            min(len(self.reports), max_reports) / max_reports,
            min(search_steps, max_steps) / max_steps,
            len(menu.options) / world.menu_size,
            *(float(kind in allowed) for kind in ACTION_KINDS),
        ]
        observation = np.concatenate((np.array(features, np.float32), menu.items))
        np.maximum(observation, 0.0, out=observation)
        np.minimum(observation, 1.0, out=observation)
        call_index = self.searcher_calls.index(call) if role == "searcher" else None
        return Node(agent, role, call_index, observation, menu.mask.copy(), state=self.state())

    def state(self) -> np.ndarray:
        """``OptionWrapper.state()`` of the same situation (``maopd.envs.option.wrapper.option_state``)."""
        world, config = self.world, self.world.config
        slots, max_steps = world.searchers, world.max_steps
        max_reports = len(slots) * config.max_rounds
        kinds, support = world.question_features(self.question_index)
        acting = self.acting_agents()
        features = [
            self.env_step / max_steps,
            self.counters.delegation_rounds / config.max_rounds,
            len(self.reports) / max_reports,
            self._reports_with_facts / max_reports,
            self.counters.search_actions / (max_steps * len(slots)),
            len(support & self.retrieved) / len(support) if support else 0.0,
            len(self.selected) / max_reports,
            float(self.answer_turn is not None),
            self.counters.format_failures / max_steps,
            *kinds,
            *(float(agent in acting) for agent in world.possible_agents),
        ]
        for agent in slots:
            last = self._last_call.get(agent)
            features += [
                float(agent in self.active),
                last.search_steps / max_steps if last else 0.0,
                self._assignments[agent] / config.max_rounds,
                float(last is not None and last.done and not last.forced),
                float(last is not None and last.format_failed),
            ]
        state = np.array(features, np.float32)
        np.maximum(state, 0.0, out=state)
        np.minimum(state, 1.0, out=state)
        return state

    # ----- the rules (SearchEnv and its workflows) ---------------------------------------------------
    def _parse(self, agent: str, text: str, allowed: tuple[str, ...]) -> ParsedAction:
        parsed = self.world.parse(text, agent.split("_")[0], allowed)
        if not parsed.valid:
            self.counters.format_failures += 1
            self.format_errors.append({"env_step": self.env_step, "agent": agent, "error": parsed.error})
        return parsed

    def _take_turn(self, agent: str, call: Call, text: str, allowed: tuple[str, ...]) -> ParsedAction:
        keep_output(call, text, self.world.config.max_action_chars)
        call.history = call.history.said(text[: self.world.config.max_action_chars])
        return self._parse(agent, text, allowed)

    def _assign(self, agent: str, wave: int, task: str) -> None:
        history = self.world.history(
            self.question_index,
            "searcher",
            task,
            lambda: (prompts.system_message("searcher"), prompts.task_message(task)),
        )
        call = Call(agent, "searcher", history, wave, task)
        self.active[agent] = call
        self.searcher_calls.append(call)
        self._last_call[agent] = call
        self._assignments[agent] += 1

    def _resolve_searchers(self, actions: dict[str, str]) -> None:
        allowed = self._searcher_allowed(self.env_step)
        budget_left = self.env_step < self._searcher_last_step()
        queries: list[tuple[Call, str]] = []
        for agent, text in actions.items():
            call = self.active[agent]
            if allowed == ("report",):
                call.history = call.history.noticed("searcher")
            parsed = self._take_turn(agent, call, text, allowed)
            if parsed.kind == "search":
                queries.append((call, parsed.content))
            elif parsed.kind == "report":
                call.report = parsed.content
                self.counters.reports += 1
            else:
                call.format_failed = True
                if allowed == ("report",):
                    call.report, call.forced = NO_REPORT, True
                    self.counters.forced_reports += 1
                elif budget_left:
                    error = parsed.error or ""
                    call.history = call.history.then(
                        ("feedback", error, allowed), lambda: prompts.feedback_message(error, allowed)
                    )
        if queries:
            self.counters.tool_steps += 1
            found = self.world.search_table.search([query for _, query in queries])
            for (call, query), (passages, message) in zip(queries, found):
                call.search_steps += 1
                self.counters.search_actions += 1
                self.counters.searches_with_passages += bool(passages)
                call.history = call.history.then(("found", query), lambda: message)
                self.searches.append({"wave": call.wave, "agent": call.agent, "query": query, "passages": passages})
                self.retrieved.update(passage["id"] for passage in passages)
        for agent in list(self.active):
            call = self.active[agent]
            if call.done:
                report = {
                    "number": len(self.reports) + 1,
                    "wave": call.wave,
                    "agent": agent,
                    "task": call.task,
                    "text": call.report,
                    "forced": call.forced,
                }
                self.reports.append(report)
                self._reports_with_facts += not call.forced and call.report.strip() != prompts.NO_FACTS
                del self.active[agent]
            elif not budget_left:
                call.exhausted = True
                del self.active[agent]
        if self.leader is not None and not self.active:
            wave = tuple((r["number"], r["task"], r["text"]) for r in self.reports[self._wave_start :])
            self.leader.history = self.leader.history.then(("reports", wave), lambda: prompts.reports_message(wave))

    def _resolve_leader(self, text: str) -> None:
        step, config, leader = self.env_step, self.world.config, self.leader
        allowed = self._leader_allowed(step)
        last_step = self._leader_last_step(step)
        if last_step:
            leader.history = leader.history.noticed("leader")
        parsed = self._take_turn("leader", leader, text, allowed)
        if parsed.kind == "delegate":
            self.rounds += 1
            self.counters.delegation_rounds += 1
            self._wave_start = len(self.reports)
            kept = parsed.subtasks[: config.num_searchers]
            self.dropped_subtasks.extend(parsed.subtasks[config.num_searchers :])
            for k, task in enumerate(kept):
                agent = f"searcher_{k}"
                self.subtasks.append({"wave": self.rounds, "agent": agent, "task": task})
                self._assign(agent, self.rounds, task)
        elif parsed.kind == "select":
            numbers = [r["number"] for r in self.reports]
            self._start_answer(numbers if parsed.selection is None else [n for n in parsed.selection if n in numbers])
        else:
            leader.format_failed = True
            if last_step and not config.force_finish:
                self.leader_out_of_budget = True
            elif last_step:
                self._start_answer([r["number"] for r in self.reports])
            else:
                error, next_allowed = parsed.error or "", self._leader_allowed(step + 1)
                leader.history = leader.history.then(
                    ("feedback", error, next_allowed), lambda: prompts.feedback_message(error, next_allowed)
                )

    def _start_answer(self, numbers: list[int]) -> None:
        self.selected = numbers
        chosen = tuple((r["number"], r["task"], r["text"]) for r in self.reports if r["number"] in numbers)
        question = self.question.question
        history = self.world.history(
            self.question_index,
            "answerer",
            chosen,
            lambda: (prompts.system_message("answerer"), prompts.answerer_message(question, chosen)),
        )
        self.answer_turn = Call("answerer", "answerer", history)

    def _resolve_answer(self, text: str) -> None:
        turn = self.answer_turn
        texts = [text] * self.world.config.num_candidates
        self._candidate_valid = []
        for candidate in texts:
            keep_output(turn, candidate, self.world.config.max_action_chars)
            valid = self._parse("answerer", candidate, ("answer",)).valid
            self._candidate_valid.append(valid)
            turn.format_failed |= not valid

    # ----- the record: SearchEnv's own code, which reads what follows ---------------------------------
    _workflow_record = SearchEnv._workflow_record

    @property
    def workflow(self) -> str:
        return self.world.workflow

    @property
    def config(self) -> SearchEnvConfig:
        return self.world.config

    def _candidate_texts(self) -> list[str]:
        return self.answer_turn.outputs if self.answer_turn else []

    def _leader_reward(self, r_em: float) -> float | None:
        leader = self.leader
        return R.leader_reward(r_em, self.counters.tool_steps, leader.format_failed) if leader else None

    def _workflow_rewards(self, candidate_scores: list[float]) -> dict[str, float]:
        return {}

    def _calls(self) -> list[CallRecord]:
        turns = [turn for turn in (self.leader, self.answer_turn) if turn is not None]
        return [call.as_record() for call in [*self.searcher_calls, *turns]]


class FastVectorEnv:
    """Many ``FastEpisode``s stepped together, with ``OptionVectorEnv``'s interface."""

    def __init__(self, world: World, num_envs: int):
        if num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r} is invalid: must be at least 1")
        self.num_envs = num_envs
        self.world = world
        self.questions: Sequence[Question] = self.world.questions
        self.episodes = [FastEpisode(self.world) for _ in range(num_envs)]
        self._used = 0

    def reset(self, question_indices: Sequence[int]) -> None:
        """Start one episode per given question in slots 0..len-1; other slots stay idle."""
        if len(question_indices) > self.num_envs:
            raise ValueError(f"{len(question_indices)} questions for {self.num_envs} slots")
        for episode, question in zip(self.episodes, question_indices):
            episode.reset(int(question))
        self._used = len(question_indices)

    def pending(self) -> list[tuple[int, Node]]:
        """(slot, node) of every slot whose episode waits for an action."""
        out = []
        for slot in range(self._used):
            node = self.episodes[slot].node()
            if not node.done:
                out.append((slot, node))
        return out

    def step(self, actions: dict[int, int]) -> None:
        # Retrieval first, for every query of these actions in one call: the retriever's cost is
        # mostly per call, and each episode would otherwise search its queries alone.
        queries = [self.episodes[slot].query(action) for slot, action in actions.items()]
        self.world.search_table.search([query for query in queries if query is not None])
        for slot, action in actions.items():
            self.episodes[slot].step(action)

    def records(self) -> list[WorkflowRecord]:
        """The finished records of slots 0..n-1 (in reset order)."""
        return [episode.record for episode in self.episodes[: self._used]]
