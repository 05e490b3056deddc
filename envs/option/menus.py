"""The option menus: for each role, a finite list of the text actions it may take, described by features.

The menu is built from the acting agent's own text turn (``env.turn(agent)``), so it sees exactly
what an LLM would:

* Leader: candidate decompositions (the world-grammar parse of the question's next unresolved
  hops, one hop only, the whole question, a hop-skipping sub-question, the bare entity names) and
  "finish with reports {all | latest wave}";
* Searcher: candidate queries (the next unresolved hop's sub-question, its entity, the task
  itself, entity mentions in the task and in the latest passages) and "report" (the resolved
  facts as canonical sentences); with a ``ClosedBook`` (``maopd.envs.synthwiki.closed_book``), also
  "report from memory": the unresolved hops as the model recalls them, without searching;
* Answerer: candidate answer spans (entity names and values in the selected reports and the
  question) and "unknown".

Item features (``ITEM_FEATURES`` per menu slot) describe each option: present, finishes the call,
``hint`` (the option the SynthWiki expert team would choose, from ``maopd.agents.expert_team``),
repeated (query already searched / subtask already delegated), word overlap with the task, built
from evidence (passages or reports), size (subtasks per Searcher slot, or resolved fraction of a
report), fallback (the whole question, "unknown"). Menus are shuffled by a hash of the state, so
a policy must read the features, not the slot. On questions outside the SynthWiki grammar the
menus still work (entity mentions, whole-question delegation) but carry no hints.
"""

from __future__ import annotations

import functools
import importlib
import random
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from maopd.envs.actions import action_contents, parse_subtasks
from maopd.envs.policy import AgentTurn
from maopd.envs.prompts import NO_FACTS, parse_passages, parse_reports, user_texts
from maopd.envs.synthwiki.closed_book import ClosedBook
from maopd.envs.synthwiki.grammar import (
    NAME,
    VALUE,
    Chain,
    Fact,
    fact_sentence,
    parse_facts,
    parse_question,
    subquestion,
)
from maopd.envs.synthwiki.knowledge import Knowledge, Step, final_answer, resolve
from maopd.envs.synthwiki.schema import ALIAS_FACT, ATTRIBUTES, INTRO, RELATED, RELATIONS
from maopd.envs.team import role

MENU_SIZE = 8
ITEM_FEATURES = 8
FINISHES_FEATURE = 1  # index of "finishes the call" in ``Option.features``
HINT_FEATURE = 2  # index of ``hint`` in ``Option.features``
UNKNOWN = "unknown"
_MENTION = re.compile(rf"\b(?:{VALUE}|{NAME})\b")
_RANK = re.compile(r"^\[\d+\] ", re.MULTILINE)
# Capitalized words of the templates and of inserted messages are not entity mentions.
_TEMPLATE_WORDS = {
    word
    for text in [ALIAS_FACT, *INTRO.values(), *RELATED.values(), "No Reports Report Task Question"]
    + [t for r in RELATIONS.values() for t in (r.question, r.noun_phrase, *r.facts)]
    + [t for a in ATTRIBUTES.values() for t in (a.question, a.comparison, *a.facts)]
    for word in re.findall(r"\b[A-Z][a-z]+\b", text)
}
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Option:
    """One menu entry: the exact text action it stands for, and its description."""

    kind: str
    text: str
    label: str
    hint: bool = False
    repeated: bool = False
    overlap: float = 0.0
    from_evidence: bool = False
    size: float = 0.0
    fallback: bool = False

    def features(self) -> list[float]:
        finishes = self.kind in ("report", "select", "answer")
        return [
            1.0,
            float(finishes),
            float(self.hint),
            float(self.repeated),
            self.overlap,
            float(self.from_evidence),
            self.size,
            float(self.fallback),
        ]


def mentions(text: str) -> list[str]:
    """Entity names and values written in ``text``, in order, without repeats."""
    return list(_mentions(text))


# Menus re-read the same tasks, questions and passages at every step of every episode: the two
# text scans below are memoized (pure functions of the text).
@functools.lru_cache(maxsize=1 << 16)
def _mentions(text: str) -> tuple[str, ...]:
    found = (m.group(0) for m in _MENTION.finditer(_RANK.sub("", text)))
    return tuple(dict.fromkeys(m for m in found if m not in _TEMPLATE_WORDS))


@functools.lru_cache(maxsize=1 << 16)
def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


@functools.lru_cache(maxsize=1 << 18)  # a Searcher's menu scores the same queries against its task at every step
def overlap(a: str, b: str) -> float:
    """Jaccard overlap of the lowercased word sets of ``a`` and ``b``."""
    x, y = _words(a), _words(b)
    common = len(x & y)
    union = len(x) + len(y) - common
    return common / union if union else 0.0


def first_seen(pairs: Sequence[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """``pairs`` without repeated keys, each keeping its first value."""
    seen: dict[str, bool] = {}
    for key, value in pairs:
        seen.setdefault(key, value)
    return list(seen.items())


# A Searcher's facts grow by one <information> message per search: each menu extends the facts
# its call's previous menu read instead of parsing every passage again. Shared, so read-only.
@functools.lru_cache(maxsize=1 << 14)
def _knowledge(informations: tuple[str, ...]) -> Knowledge:
    """The facts of the passages of these ``<information>`` messages, in order."""
    if not informations:
        return Knowledge()
    known = _knowledge(informations[:-1]).copy()
    known.add_facts(_information_facts(informations[-1]))
    return known


@functools.lru_cache(maxsize=1 << 14)
def _information_facts(information: str) -> tuple[Fact, ...]:
    """The facts of every passage of one ``<information>`` message, in order."""
    return tuple(fact for _, text in parse_passages(information) for fact in parse_facts(text))


@functools.lru_cache(maxsize=1 << 14)
def _information_mentions(information: str) -> tuple[str, ...]:
    """The entity mentions of one ``<information>`` message: the queries its passages suggest."""
    return _mentions(information.replace("<information>", ""))


@dataclass(frozen=True)
class MenuContext:
    """What a menu may read besides the role's text turn: the team's Searcher slots, and the closed
    book whose recalls a Searcher's menu offers as reports."""

    num_searchers: int
    book: ClosedBook | None = None


# ----- menus, one function per role (its ``Role.menu``), each reading only the role's text turn ----
def leader_menu(turn: AgentTurn, context: MenuContext) -> list[Option]:
    num_searchers = context.num_searchers
    question = turn.task
    plan = parse_question(question)
    report_lines = [r for message in user_texts(turn, "Reports:") for r in parse_reports(message)]
    delegated = {task for content in action_contents(turn.messages, "delegate") for task in parse_subtasks(content)}
    menu: list[Option] = []
    if "delegate" in turn.allowed:
        wanted: list[str] = []
        skip: list[str] = []  # asks the last hop of the first unresolved entity: a wrong decomposition
        if plan is not None:
            _, missing = resolve(plan, Knowledge(text for _, _, text in report_lines))
            wanted = [subquestion(step.predicate, step.subject) for step in missing]
            if isinstance(plan, Chain) and missing and missing[0].predicate != plan.steps[-1]:
                skip = [subquestion(plan.steps[-1], missing[0].subject)]
        fresh = [task for task in wanted if task not in delegated]
        candidates = [
            (fresh, True, False),
            (wanted[:1], False, False),
            (skip, False, False),
            ([question], not plan and question not in delegated, True),
            (mentions(question)[:num_searchers], False, False),
        ]
        for tasks, hint, fallback in candidates:
            if tasks:
                menu.append(
                    Option(
                        "delegate",
                        "<delegate>\n" + "\n".join(tasks) + "\n</delegate>",
                        " | ".join(tasks),
                        hint=hint,
                        repeated=all(t in delegated for t in tasks),
                        overlap=overlap(" ".join(tasks), question),
                        size=min(len(tasks), num_searchers) / num_searchers,
                        fallback=fallback,
                    )
                )
    finish_now = not any(o.hint for o in menu)
    menu.append(
        Option(
            "select",
            "<select>all</select>",
            "all reports",
            hint=finish_now,
            from_evidence=bool(report_lines),
            fallback=not report_lines,
        )
    )
    latest = parse_reports(user_texts(turn, "Reports:")[-1]) if report_lines else []
    if latest and len(latest) < len(report_lines):
        numbers = ", ".join(str(number) for number, _, _ in latest)
        menu.append(Option("select", f"<select>{numbers}</select>", f"reports {numbers}", from_evidence=True))
    return menu


@dataclass(frozen=True)
class SearcherReading:
    """What a Searcher's menu reads from its task and the passages found so far (everything but
    which queries it has searched): shared by every history that found the same passages."""

    wanted: tuple[str, ...]  # the queries of the missing hops, the expert's first
    candidates: tuple[tuple[str, bool], ...]  # (query, from the latest passages) of the search options
    resolved: tuple[Step, ...]
    hops: int
    more_reports: tuple[Option, ...]  # the facts about the task's entities; a report from memory


@functools.lru_cache(maxsize=1 << 14)
def searcher_reading(task: str, informations: tuple[str, ...], book: ClosedBook | None) -> SearcherReading:
    """The reading of ``task`` after these ``<information>`` messages (with ``book``, what the
    Searcher would recall for the hops still missing)."""
    plan = parse_question(task)
    missing: list[Step] = []
    known = _knowledge(informations)
    if plan is None:
        wanted, resolved, hops = [task], [], 1
    else:
        resolved, missing = resolve(plan, known)
        wanted = [q for step in missing for q in (subquestion(step.predicate, step.subject), step.subject)]
        hops = len(resolved) + len(missing)
    evidence = [m for text in informations[-1:] for m in _information_mentions(text)]
    candidates = [(q, False) for q in [*wanted, task, *mentions(task)]] + [(m, True) for m in evidence]
    more_reports = []
    # Every fact the passages state about an entity the task names: useful for entity-only tasks.
    named = set(mentions(task))
    facts = [f for text in informations for f in _information_facts(text) if f.subject in named]
    if facts:
        digest = " ".join(dict.fromkeys(fact_sentence(f.predicate, f.subject, f.value) for f in facts))
        more_reports.append(
            Option(
                "report", f"<report>{digest}</report>", digest, from_evidence=True, size=min(len(facts), hops) / hops
            )
        )
    if book is not None and missing:
        recalled = [step for step in book.recall_steps(plan, known) if step.value]
        if recalled:
            memory = " ".join(step.sentence() for step in [*resolved, *recalled])
            more_reports.append(
                Option(
                    "report",
                    f"<report>{memory}</report>",
                    f"from memory: {memory}",
                    size=(len(resolved) + len(recalled)) / hops,
                )
            )
    return SearcherReading(tuple(wanted), tuple(first_seen(candidates)), tuple(resolved), hops, tuple(more_reports))


@functools.lru_cache(maxsize=1 << 16)  # options are frozen: the same query on the same task is one object
def search_option(query: str, task: str, hint: bool, repeated: bool, from_evidence: bool) -> Option:
    """The option of searching ``query`` on ``task``."""
    return Option(
        "search",
        f"<search>{query}</search>",
        query,
        hint=hint,
        repeated=repeated,
        overlap=overlap(query, task),
        from_evidence=from_evidence,
        fallback=query == task,
    )


def searcher_menu(turn: AgentTurn, context: MenuContext) -> list[Option]:
    task = turn.task
    searched = set(action_contents(turn.messages, "search"))
    reading = searcher_reading(task, tuple(user_texts(turn, "<information>")), context.book)
    expert_query = next((q for q in reading.wanted if q not in searched), None)
    menu: list[Option] = []
    if "search" in turn.allowed:
        menu += [
            search_option(query, task, query == expert_query, query in searched, from_evidence)
            for query, from_evidence in reading.candidates
        ]
    resolved = reading.resolved
    report = " ".join(step.sentence() for step in resolved) or NO_FACTS
    menu.append(
        Option(
            "report",
            f"<report>{report}</report>",
            report,
            hint=expert_query is None or "search" not in turn.allowed,
            from_evidence=bool(resolved),
            size=len(resolved) / reading.hops,
            fallback=not resolved,
        )
    )
    return menu + list(reading.more_reports)


def answerer_menu(turn: AgentTurn, context: MenuContext) -> list[Option]:
    body = turn.messages[-1]["content"]
    question = turn.task
    plan = parse_question(question)
    knowledge = Knowledge(text for _, _, text in parse_reports(body))
    answer = (final_answer(plan, knowledge) if plan is not None else None) or UNKNOWN
    facts = {value for value in knowledge.values.values()}
    spans = [(s, True) for s in mentions(" ".join(text for _, _, text in parse_reports(body)))]
    spans += [(s, False) for s in mentions(question)]
    # Keep the values stated as facts first: they are the likely answers when the menu overflows.
    spans.sort(key=lambda item: item[0] not in facts)
    menu = [
        Option(
            "answer",
            f"<answer>{span}</answer>",
            span,
            hint=span == answer,
            repeated=span in question,
            overlap=overlap(span, question),
            from_evidence=from_evidence,
            size=float(span in facts),
        )
        for span, from_evidence in first_seen(spans)
    ]
    menu.append(Option("answer", f"<answer>{UNKNOWN}</answer>", UNKNOWN, hint=answer == UNKNOWN, fallback=True))
    return menu


def build_menu(
    turn: AgentTurn, num_searchers: int, size: int = MENU_SIZE, salt: str = "", book: ClosedBook | None = None
) -> list[Option]:
    """The role's menu (its ``Role.menu``), cut to ``size`` (keeping the expert's option), shuffled
    by a hash of the turn."""
    menu = role_menu(turn.role)(turn, MenuContext(num_searchers, book))
    unique: dict[str, Option] = {}
    for option in sorted(menu, key=lambda o: not o.hint):
        unique.setdefault(option.text, option)
    menu = list(unique.values())[:size]
    key = f"{salt}|{turn.call_id}|{len(turn.messages)}|{turn.messages[-1]['content'] if turn.messages else ''}"
    random.Random(zlib.crc32(key.encode())).shuffle(menu)
    return menu


@functools.cache
def role_menu(name: str) -> Callable[[AgentTurn, MenuContext], list[Option]]:
    """The menu function a registered role declares (``Role.menu``, "module:function")."""
    declared = role(name).menu
    if declared is None:
        raise ValueError(f"role {name!r} has no option mode: its declaration names no menu (Role.menu)")
    module, _, function = declared.partition(":")
    return getattr(importlib.import_module(module), function)


def expert_choice(menu: Sequence[Option]) -> int:
    """The index of the option the SynthWiki expert team would take (the hinted one, else the last)."""
    return next((i for i, option in enumerate(menu) if option.hint), len(menu) - 1)
