"""The machinery the search workflows share: a PettingZoo AEC environment over a retriever.

Vocabulary
----------
*Environment step*: every agent scheduled in it acts once (the Searchers of a wave act
concurrently; their searches go to the retriever as one batch). Budgets count environment steps.
*Call*: one model conversation. The Leader has one multi-turn call per trajectory, each Searcher
assignment is a new call (``searcher_0@w2``), the Answerer has one call.

Workflows subclass ``SearchEnv`` and implement ``_schedule`` (who acts in the next step) and
``_resolve`` (apply the buffered actions of a finished step). Everything else, including the
format-failure rule, rewards and the record, lives here so the workflows behave identically (the
single agent's ReAct loop reuses the Searcher's: ``SearcherCall``, ``_take_turn``, ``_run_searches``).

Bad input
---------
An action that is not text, is over-long, has no complete tag of the role, has an empty
query/report, or uses a kind the ``action_mask`` forbids is a *format failure*: it is
recorded in ``format_errors``, counted, gives the role a total reward of -1 (see envs/rewards.py),
and the agent gets a feedback message. The episode continues under the budget rules of the
workflow, so it always ends within ``max_steps`` environment steps.

Budget exhaustion
-----------------
``SearchEnvConfig.force_finish`` decides what an exhausted budget does. False (the default, the
paper's behaviour): a Searcher may still search in its last step and a call that has not reported when its budget runs
out ends with no report (``unreported_calls``); the cascade ends without an Answerer call when
its Searcher never reported, the hierarchy when its Leader fails its last step without selecting.
Such a record has ``candidates == extracted_answers == []``, R_EM 0 and ``counters.no_answer
= 1`` (the paper's "no Answerer candidate" failure); the counters ``no_answer`` and
``unreported_calls`` are set (not None) only under ``force_finish=False``. Rewards stay the
formulas: the Answerer has no candidate and no reward entry (its agent reward is 0), the Leader
gets 0.9·0 + 0.1·R_assign (−1 after a format failure, which a failed last step is), an unreported
Searcher call 0.9·R_EM with b_S = 0 (−1 after a format failure). True (an option, so that a
workflow always gets an answer): a Searcher's last step allows only ``<report>`` (with a
last-turn notice), a Searcher that fails it gets the forced report ``(no report)``, and a Leader
that fails its last step hands every report to the Answerer.
"""

from __future__ import annotations

import functools
import inspect
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

from maopd.base.config import ConfigError, check_fields, checked, did_you_mean
from maopd.envs import prompts, team
from maopd.envs import rewards as R
from maopd.envs.actions import (
    ACTION_KINDS,
    VERDICTS,
    ParsedAction,
    neutralize_tags,
    parse_action,
    strict_answer,
)
from maopd.envs.datasets import Question, load_questions
from maopd.envs.policy import AgentOutput, AgentTurn, safe_token_count
from maopd.envs.records import (
    CallRecord,
    Counters,
    FormatError,
    Report,
    RewardParts,
    Search,
    Subtask,
    WorkflowRecord,
)
from maopd.envs.retrieval.base import Passage, Retriever
from maopd.envs.retrieval.corpus import Corpus, load_corpus
from maopd.envs.retrieval.factory import RetrieverConfig, build_retriever

MAX_OBSERVATION_CHARS = 1_000_000
# A question longer than this could push a message past MAX_OBSERVATION_CHARS (it is quoted in
# several messages); 100,000 characters is far beyond any real question.
MAX_QUESTION_CHARS = 100_000
# Searchers per wave: one episode costs time linear in it; no workflow needs more.
MAX_SEARCHERS = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


class UnicodeText(spaces.Text):
    """A ``Text`` space whose members may hold any Unicode character, and whose printout says so.

    Gymnasium's ``Text`` only contains strings over its (alphanumeric) charset, but model
    histories hold arbitrary Unicode. Sampling still draws from the default charset.
    """

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.min_length}, {self.max_length}, charset=any Unicode)"


class ActionText(UnicodeText):
    """A role's text action space: every string of at most ``max_length`` characters, in any
    script, so every legal action (``<search>Zoroth River</search>``) is a member.

    ``sample()`` draws a well-formed action of one of the role's kinds with a few random
    lowercase words as content (``<delegate>`` one or two numbered subtasks, ``<select>all`` or
    a report number), so a random agent walks through the workflow instead of producing only
    format failures. Sampled actions are syntactically legal, not good. ``sample(mask)`` with an
    observation's ``action_mask`` (0/1 over ``mask_kinds``, its workflow's ``action_kinds``) draws
    only kinds allowed now, and the empty string (a waiting agent's action) when the mask allows
    none; with a tuple ``mask`` or a ``probability`` (Gymnasium's per-character arguments)
    sampling is ``Text``'s. A ``<judge>`` holds yes or no.
    """

    def __init__(
        self, max_length: int, kinds: Sequence[str], seed: int | None = None, mask_kinds: Sequence[str] = ACTION_KINDS
    ):
        super().__init__(max_length, seed=seed)
        self.kinds = tuple(kinds)
        self.mask_kinds = tuple(mask_kinds)

    def _words(self, low: int, high: int) -> str:
        rng = self.np_random
        letters = "abcdefghijklmnopqrstuvwxyz"
        return " ".join(
            "".join(letters[i] for i in rng.integers(0, len(letters), size=int(rng.integers(3, 9))))
            for _ in range(int(rng.integers(low, high + 1)))
        )

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if isinstance(mask, tuple) or probability is not None:
            return super().sample(mask=mask, probability=probability)
        kinds = self.kinds if mask is None else tuple(k for k in self.kinds if kind_allowed(mask, k, self.mask_kinds))
        if not kinds:
            return ""
        kind = kinds[int(self.np_random.integers(len(kinds)))]
        if kind == "delegate":
            content = "\n".join(f"{i + 1}. {self._words(2, 5)}" for i in range(int(self.np_random.integers(1, 3))))
        elif kind == "select":
            content = "all" if self.np_random.random() < 0.5 else str(int(self.np_random.integers(1, 4)))
        elif kind == "judge":
            content = VERDICTS[int(self.np_random.integers(len(VERDICTS)))]
        else:
            content = self._words(1, 4)
        action = f"<{kind}>{content}</{kind}>"
        return action if len(action) <= self.max_length else super().sample()

    def __repr__(self) -> str:
        return f"ActionText({self.max_length}, kinds={self.kinds}, charset=any Unicode)"


def kind_allowed(mask: Any, kind: str, kinds: Sequence[str] = ACTION_KINDS) -> bool:
    """Whether an ``action_mask`` (0/1 over ``kinds``, a workflow's ``action_kinds``) allows
    ``kind``; ValueError for a mask of another shape."""
    mask = np.asarray(mask)
    if mask.shape != (len(kinds),):
        raise ValueError(f"an action mask has one 0/1 entry per kind of {tuple(kinds)}, got shape {mask.shape}")
    return bool(mask[list(kinds).index(kind)])


class CandidateTexts(spaces.Tuple):
    """The Answerer's ``num_candidates`` texts; ``sample(mask)`` takes the one ``action_mask`` of
    its observation (a tuple of per-text masks, Gymnasium's form, works too)."""

    def sample(self, mask: Any = None, probability: Any = None) -> tuple[str, ...]:
        if mask is not None and not isinstance(mask, tuple):
            mask = (mask,) * len(self.spaces)
        return super().sample(mask=mask, probability=probability)


@dataclass
class SearchEnvConfig:
    """Construction options shared by the workflows; ``max_steps=None`` takes the workflow's budget."""

    max_steps: int | None = checked(
        None,
        ge=1,
        null="the workflow's budget",
        help="The workflow's budget in environment steps (every scheduled agent acts once per step); null: the "
        "workflow's own.",
    )
    max_rounds: int = checked(
        5, ge=1, help="The most delegation rounds (waves of Searchers) the hierarchy's Leader may start."
    )
    num_searchers: int = checked(
        3,
        ge=1,
        le=MAX_SEARCHERS,
        help="Searchers per wave in the hierarchy; subtasks delegated beyond them are dropped.",
    )
    num_candidates: int = checked(1, ge=1, help="Answer candidates the Answerer writes per request.")
    topk: int = checked(3, ge=1, help="Passages each search returns.")
    max_action_chars: int = checked(
        4096,
        ge=16,
        help="The longest output an agent may give, in characters; a longer one is truncated and counts as a "
        "format failure.",
    )
    max_passage_chars: int = checked(600, ge=16, help="Each retrieved passage is shown cut to this many characters.")
    corpus: str | None = checked(
        None, help="A Search-R1 corpus JSONL file to search; null: the embedded SynthWiki world's passages."
    )
    questions: str | None = checked(
        None, help="A FlashRAG question JSONL file to play; null: the embedded world's questions of split."
    )
    split: str = checked(
        "train", help="The embedded world's question split (train, dev or test) played when questions is null."
    )
    retriever: RetrieverConfig = checked(
        default_factory=RetrieverConfig, help="The retriever the searches go to, and its settings."
    )
    force_finish: bool = checked(
        False,
        help="false (the paper's behaviour): an exhausted budget ends the workflow as it stands, possibly without "
        "an answer. true: at budget exhaustion Searchers must report and a Leader that fails its last turn hands "
        "every report to the Answerer, so every workflow gets an answer.",
    )

    def __post_init__(self) -> None:
        self.validate(min_steps=1)

    def validate(self, min_steps: int) -> None:
        """ConfigError naming the first field out of range; ``min_steps``: the workflow's least budget."""
        check_fields(self)
        if not isinstance(self.force_finish, bool):
            raise ConfigError(f"force_finish: must be true or false, got {self.force_finish!r}")
        if self.max_steps is not None and self.max_steps < min_steps:
            raise ConfigError(f"max_steps: must be >= {min_steps} for this workflow, got {self.max_steps!r}")


@dataclass
class SearcherCall:
    """One Searcher assignment: a ReAct loop of searches that ends in a report."""

    agent: str
    wave: int
    task: str
    messages: list[dict[str, str]]
    search_steps: int = 0
    report: str | None = None
    forced: bool = False
    # force_finish=False: the budget ran out before the call reported; it ends without a report
    exhausted: bool = False
    format_failed: bool = False
    outputs: list[str] = field(default_factory=list)
    output_chars: list[int] = field(default_factory=list)  # each output's length before keep_output cut it
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def call_id(self) -> str:
        return f"{self.agent}@w{self.wave}"

    @property
    def done(self) -> bool:
        return self.report is not None


@dataclass
class Turn:
    """A call's history plus what the role produced, for calls other than Searcher assignments."""

    agent: str
    role: str
    messages: list[dict[str, str]]
    format_failed: bool = False
    outputs: list[str] = field(default_factory=list)
    output_chars: list[int] = field(default_factory=list)  # each output's length before keep_output cut it
    input_tokens: int = 0
    output_tokens: int = 0
    # a role called more than once per workflow names each call (``verifier@r2``) and its round
    call_id: str | None = None
    wave: int | None = None


@functools.lru_cache(maxsize=4)
def _default_world(split: str) -> tuple[Corpus, list[Question]]:
    """The embedded default: the SynthWiki world (seed 0, size ``small``), cached on disk and here."""
    from maopd.envs.synthwiki import load_default_world

    world = load_default_world()
    if split not in world.splits:
        raise ConfigError(f"split={split!r} is invalid; the default world has {sorted(world.splits)}")
    return world.corpus, world.splits[split]


_SHARED_RETRIEVERS: dict[tuple[str, str], Retriever] = {}


def shared_retriever(config: RetrieverConfig, corpus: Corpus | None) -> Retriever:
    """One retriever per (config, corpus) in a process: environments built in bulk (G×B per
    training step) share an index instead of rebuilding it. Retrievers are read-only."""
    key = (repr(config), corpus.fingerprint if corpus is not None else "")
    if key not in _SHARED_RETRIEVERS:
        _SHARED_RETRIEVERS[key] = build_retriever(config, corpus)
    return _SHARED_RETRIEVERS[key]


def search_results(
    retriever: Retriever, queries: list[str], topk: int, max_passage_chars: int
) -> list[tuple[list[dict[str, Any]], dict[str, str]]]:
    """Each query's top-``topk`` passages, as the record keeps them, and its ``<information>``
    message: one retriever batch."""
    found = []
    for passages in retriever.search(queries, topk):
        passages = passages[:topk]
        found.append(([p.to_dict() for p in passages], prompts.information_message(passages, max_passage_chars)))
    return found


class SearchEnv(AECEnv):
    """Base AEC environment; see the module docstring. Subclasses set the class attributes."""

    # False: PettingZoo's aec_to_parallel assumes every live agent acts each cycle, which these
    # workflows break; parallel_env() is the native SearchParallelEnv (envs/parallel.py).
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "is_parallelizable": False}
    # The workflow's declaration: a program (subclass) sets it, and its name, budgets and
    # PettingZoo name follow from it.
    declaration: ClassVar[team.Workflow]
    workflow: ClassVar[str]
    default_max_steps: ClassVar[int]
    min_steps: ClassVar[int]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = cls.__dict__.get("declaration")
        if declared is not None:
            cls.workflow, cls.default_max_steps, cls.min_steps = declared.name, declared.max_steps, declared.min_steps
            cls.metadata = {**SearchEnv.metadata, "name": declared.env_name}

    def __init__(
        self,
        config: SearchEnvConfig | None = None,
        *,
        retriever: Retriever | None = None,
        corpus: Corpus | str | Path | None = None,
        questions: Sequence[Question | dict] | str | Path | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ):
        super().__init__()
        options = {spec.name for spec in fields(SearchEnvConfig)}
        if "max_cycles" in overrides:
            raise TypeError(
                f"{type(self).__name__}() takes no max_cycles: PettingZoo's max_cycles gives every agent that many "
                "turns, while this budget counts environment steps in which only the scheduled agents act; pass "
                "max_steps"
            )
        unknown = sorted(set(overrides) - options)
        if unknown:
            named = inspect.signature(SearchEnv.__init__).parameters
            known = [*options, *(name for name in named if name not in ("self", "overrides"))]
            raise TypeError(
                f"{type(self).__name__}() got an unknown argument {unknown[0]!r}{did_you_mean(unknown[0], known)}"
            )
        # a copy: the caller's config is never changed, whether the overrides are accepted or not
        config = replace(config or SearchEnvConfig(), **overrides)
        config.validate(self.min_steps)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r} is invalid; expected one of {self.metadata['render_modes']}")
        self.config = config
        self.render_mode = render_mode
        self.max_steps = config.max_steps or self.default_max_steps

        if isinstance(corpus, (str, Path)):
            config.corpus, corpus = str(corpus), None
        if isinstance(questions, (str, Path)):
            config.questions, questions = str(questions), None
        if corpus is None and config.corpus is not None:
            corpus = load_corpus(config.corpus)
        if questions is None and config.questions is not None:
            questions = load_questions(config.questions)
        if questions is None or (corpus is None and retriever is None):
            default_corpus, default_questions = _default_world(config.split)
            if questions is None:
                questions = default_questions
            if corpus is None and retriever is None:
                corpus = default_corpus
        self.questions = [q if isinstance(q, Question) else Question.from_user(q) for q in questions]
        if not self.questions:
            raise ValueError("questions: the question set is empty")
        self.retriever = retriever if retriever is not None else shared_retriever(config.retriever, corpus)

        self.possible_agents = self._agent_names()
        self.agents = []
        self._action_space_cache = {agent: self._make_action_space(agent) for agent in self.possible_agents}
        message = spaces.Dict({"role": spaces.Text(16), "content": UnicodeText(MAX_OBSERVATION_CHARS, min_length=0)})
        history = spaces.Sequence(message)
        mask = spaces.MultiBinary(len(self.declaration.action_kinds))
        # ``action_kinds`` is the earlier name of ``action_mask``, kept as an alias for one release
        self._observation_space = spaces.Dict(
            {"role": spaces.Text(16), "messages": history, "action_mask": mask, "action_kinds": mask}
        )
        # What a centralised critic reads (``state()``): every agent's visible history and the counters.
        counter = spaces.Discrete(self.max_steps + 1)
        self.state_space = spaces.Dict(
            {
                "question": UnicodeText(MAX_OBSERVATION_CHARS),
                "histories": spaces.Dict({agent: history for agent in self.possible_agents}),
                "acting": spaces.MultiBinary(len(self.possible_agents)),
                "env_step": counter,
                "steps_left": counter,
                "delegation_rounds": spaces.Discrete(config.max_rounds + 1),
            }
        )

    # ----- spaces -----------------------------------------------------------------------
    def _agent_names(self) -> list[str]:
        raise NotImplementedError

    def _make_action_space(self, agent: str) -> spaces.Space:
        role = team.role(self.role_of(agent))
        text = ActionText(self.config.max_action_chars, role.actions, mask_kinds=self.declaration.action_kinds)
        if role.candidates and self.config.num_candidates > 1:
            return CandidateTexts([text] * self.config.num_candidates)
        return text

    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_space_cache[agent]

    @staticmethod
    def role_of(agent: str) -> str:
        return agent.split("_")[0]

    # ----- episode lifecycle ------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None or not hasattr(self, "np_random"):
            self.np_random, _ = gymnasium.utils.seeding.np_random(seed)
        options = options or {}
        if "question" in options:
            question = options["question"]
            question = question if isinstance(question, Question) else Question.from_user(question)
            if len(question.question) > MAX_QUESTION_CHARS:
                raise ConfigError(
                    f"options['question']: the question has {len(question.question):,} characters; "
                    f"at most {MAX_QUESTION_CHARS:,} are allowed"
                )
            self.question = question
        elif "question_index" in options:
            index = options["question_index"]
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.questions):
                raise ConfigError(
                    f"options['question_index']={index!r} is invalid: must be an integer in "
                    f"[0, {len(self.questions) - 1}]"
                )
            self.question = self.questions[index]
        else:
            self.question = self.questions[int(self.np_random.integers(len(self.questions)))]

        self.agents = list(self.possible_agents)
        self.rewards = {agent: 0.0 for agent in self.agents}
        self._cumulative_rewards = {agent: 0.0 for agent in self.agents}
        self.terminations = {agent: False for agent in self.agents}
        self.truncations = {agent: False for agent in self.agents}
        self.infos = {agent: {} for agent in self.agents}
        self.final_rewards: dict[str, float] = {}

        self.env_step = 0
        self.counters = Counters()
        self.format_errors: list[dict[str, Any]] = []
        self.searches: list[dict[str, Any]] = []
        self.searcher_calls: list[SearcherCall] = []
        self.active: dict[str, SearcherCall] = {}
        self.reports: list[dict[str, Any]] = []
        self.subtasks: list[dict[str, Any]] = []
        self.dropped_subtasks: list[str] = []
        self.selected: list[int] = []
        self.answer_turn: Turn | None = None
        self.transcript: list[str] = [f"Question: {self.question.question}"]
        self.record: WorkflowRecord | None = None
        self._started = time.perf_counter()
        self._pending: dict[str, Any] = {}
        self._candidate_valid: list[bool] = []
        self._start_episode()
        self._schedule_next()

    def _start_episode(self) -> None:
        raise NotImplementedError

    def _schedule_next(self) -> None:
        """Schedule the agents of the next environment step, or end the episode."""
        self._scheduled = self._schedule()
        self._cursor = 0
        if not self._scheduled:
            self._finish()
            return
        for agent in self.agents:
            self.infos[agent] = self._info(agent)
        self.agent_selection = self._scheduled[0]

    def step(self, action: Any) -> None:
        if not hasattr(self, "record"):
            raise RuntimeError(f"{type(self).__name__}.step() before reset(): call reset() first")
        if not self.agents:
            raise RuntimeError(f"{type(self).__name__}.step(): the episode is over; call reset() to start another")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        self._pending[agent] = action
        self._cursor += 1
        if self._cursor < len(self._scheduled):
            self.agent_selection = self._scheduled[self._cursor]
            return
        self.env_step += 1
        actions, self._pending = self._pending, {}
        self._resolve(actions)
        self._schedule_next()

    def acting_agents(self) -> list[str]:
        """Agents still to act in the current environment step, in order (empty once done)."""
        if not self.agents or self.record is not None:
            return []
        return self._scheduled[self._cursor :]

    # ----- what an agent sees --------------------------------------------------------------
    def allowed_actions(self, agent: str) -> tuple[str, ...]:
        if agent not in self.acting_agents():
            return ()
        return self._allowed(agent)

    def _allowed(self, agent: str) -> tuple[str, ...]:
        raise NotImplementedError

    def _messages(self, agent: str) -> list[dict[str, str]]:
        raise NotImplementedError

    def _call_id(self, agent: str) -> str:
        call = self.active.get(agent)
        return call.call_id if call else agent

    def _check_agent(self, agent: str) -> None:
        if agent not in self.possible_agents:
            raise ValueError(f"unknown agent {agent!r}; this environment's agents are {self.possible_agents}")

    def _require_reset(self, method: str) -> None:
        if not hasattr(self, "record"):
            raise RuntimeError(f"{type(self).__name__}.{method}() before reset(): call reset() first")

    def last(self, observe: bool = True):
        self._require_reset("last")
        return super().last(observe)

    def observe(self, agent: str) -> dict[str, Any]:
        self._require_reset("observe")
        self._check_agent(agent)
        allowed = self.allowed_actions(agent)
        mask = np.array([kind in allowed for kind in self.declaration.action_kinds], dtype=np.int8)
        return {
            "role": self.role_of(agent),
            "messages": self._history(agent),
            "action_mask": mask,
            "action_kinds": mask.copy(),
        }

    def _history(self, agent: str) -> tuple[dict[str, str], ...]:
        return tuple(dict(m) for m in self._messages(agent))

    def state(self) -> dict[str, Any]:
        """The global state, a member of ``state_space``: the question, every agent's visible
        history, who acts now, and the budget and round counters."""
        counters = self.state_counters()
        return {
            "question": self.question.question,
            "histories": {agent: self._history(agent) for agent in self.possible_agents},
            **counters,
        }

    def state_counters(self) -> dict[str, Any]:
        """The numeric entries of ``state()``: ``acting`` (by ``possible_agents``), ``env_step``,
        ``steps_left``, ``delegation_rounds``. The option mode's fixed-size state starts from them."""
        if not hasattr(self, "record"):
            raise RuntimeError(f"{type(self).__name__}.state() before reset(): call reset() first")
        acting = self.acting_agents()
        return {
            "acting": np.array([agent in acting for agent in self.possible_agents], dtype=np.int8),
            "env_step": self.env_step,
            "steps_left": self.max_steps - self.env_step,
            "delegation_rounds": self.counters.delegation_rounds,
        }

    def _info(self, agent: str) -> dict[str, Any]:
        return {
            "role": self.role_of(agent),
            "call_id": self._call_id(agent),
            # False for an agent that waits this step: its reward 0.0 then says nothing
            "acting": agent in self.acting_agents(),
            "allowed_actions": self.allowed_actions(agent),
            "num_candidates": self._num_candidates(agent),
            "env_step": self.env_step,
        }

    def turn(self, agent: str) -> AgentTurn:
        """What a ``Policy`` needs to act for ``agent`` now."""
        self._check_agent(agent)
        return AgentTurn(
            agent=agent,
            role=self.role_of(agent),
            messages=self._history(agent),
            allowed=self.allowed_actions(agent),
            num_candidates=self._num_candidates(agent),
            call_id=self._call_id(agent),
            task=self._task(agent),
            instructions=self._instructions(agent),
        )

    def _num_candidates(self, agent: str) -> int:
        return self.config.num_candidates if team.role(self.role_of(agent)).candidates else 1

    def _task(self, agent: str) -> str:
        """The bare question or subtask ``agent``'s call works on, as its messages show it
        (tag look-alikes escaped); '' for a Searcher slot never assigned."""
        if self.role_of(agent) == "searcher":
            call = self._searcher_call(agent)
            return neutralize_tags(call.task) if call else ""
        return neutralize_tags(self.question.question)

    def _instructions(self, agent: str) -> str:
        """What the environment's first message to ``agent`` says besides the task."""
        return ""

    # ----- interpreting actions --------------------------------------------------------------
    def _texts(self, action: Any, count: int) -> tuple[list[str], int, int]:
        """Normalize an action to ``count`` texts plus token counts; non-text becomes ''."""
        input_tokens = output_tokens = 0
        # counts that are not non-negative whole numbers (NaN, inf, -7, "3") count as 0
        if isinstance(action, AgentOutput):
            input_tokens, output_tokens = safe_token_count(action.input_tokens), safe_token_count(action.output_tokens)
            action = action.texts
        elif isinstance(action, dict) and ("text" in action or "texts" in action):
            input_tokens = safe_token_count(action.get("input_tokens"))
            output_tokens = safe_token_count(action.get("output_tokens"))
            action = action.get("texts", action.get("text"))
        texts = [action] if isinstance(action, str) else list(action) if isinstance(action, (list, tuple)) else []
        texts = [_valid_unicode(t) if isinstance(t, str) else "" for t in texts][:count]
        texts += [""] * (count - len(texts))
        self.counters.input_tokens += input_tokens
        self.counters.output_tokens += output_tokens
        return texts, input_tokens, output_tokens

    def _parse(self, agent: str, text: str, allowed: tuple[str, ...]) -> ParsedAction:
        parsed = parse_action(text, self.role_of(agent), allowed, self.config.max_action_chars)
        if not parsed.valid:
            self.counters.format_failures += 1
            self.format_errors.append({"env_step": self.env_step, "agent": agent, "error": parsed.error})
            self._log(f"  ! {agent}: format failure: {parsed.error}")
        return parsed

    def _take_turn(
        self, agent: str, call: SearcherCall | Turn, action: Any, allowed: tuple[str, ...]
    ) -> tuple[str, ParsedAction]:
        """Record one single-text output in its call (text, tokens, history) and parse it."""
        texts, n_in, n_out = self._texts(action, 1)
        text = texts[0]
        keep_output(call, text, self.config.max_action_chars)
        call.input_tokens += n_in
        call.output_tokens += n_out
        call.messages.append({"role": "assistant", "content": text[: self.config.max_action_chars]})
        return text, self._parse(agent, text, allowed)

    def _log(self, line: str) -> None:
        self.transcript.append(line)

    # ----- the shared Searcher loop --------------------------------------------------------------
    def _assign(self, agent: str, wave: int, task: str) -> None:
        messages = [prompts.system_message("searcher"), prompts.task_message(task)]
        call = SearcherCall(agent, wave, task, messages)
        self.active[agent] = call
        self.searcher_calls.append(call)

    def _searcher_last_step(self) -> int:
        raise NotImplementedError

    def _searcher_allowed(self, step: int) -> tuple[str, ...]:
        """Kinds a Searcher may use in environment step ``step`` (1-based): report only at the end,
        unless ``force_finish`` is off (then it may still search, and an unreported call ends
        without a report)."""
        if step >= self._searcher_last_step() and self.config.force_finish:
            return ("report",)
        return team.role("searcher").actions

    def _searcher_call(self, agent: str) -> SearcherCall | None:
        """The Searcher slot's current assignment, else its last one (None if it had none)."""
        return self.active.get(agent) or next((c for c in reversed(self.searcher_calls) if c.agent == agent), None)

    def _searcher_messages(self, agent: str) -> list[dict[str, str]]:
        call = self._searcher_call(agent)
        if call is None:
            return [prompts.system_message("searcher")]
        last_turn = agent in self.acting_agents() and self._searcher_allowed(self.env_step + 1) == ("report",)
        return with_notice(call.messages, "searcher") if last_turn else list(call.messages)

    def _resolve_searchers(self, actions: dict[str, Any]) -> None:
        """Apply one environment step of every active Searcher; searches go out as one batch."""
        allowed = self._searcher_allowed(self.env_step)
        queries: list[tuple[SearcherCall, str]] = []
        for agent, action in actions.items():
            call = self.active[agent]
            if allowed == ("report",):
                call.messages = with_notice(call.messages, "searcher")
            text, parsed = self._take_turn(agent, call, action, allowed)
            self._log(f"[step {self.env_step}] {agent} ({call.task}): {short_text(text)}")
            if parsed.kind == "search":
                queries.append((call, parsed.content))
            elif parsed.kind == "report":
                call.report = parsed.content
                self.counters.reports += 1
            else:
                call.format_failed = True
                if allowed == ("report",):
                    call.report, call.forced = "(no report)", True
                    self.counters.forced_reports += 1
                elif not self._searcher_budget_left():
                    pass  # force_finish off: the call ends below without a report
                else:
                    call.messages.append(prompts.feedback_message(parsed.error or "", allowed))
        self._run_searches(queries)
        for agent in list(self.active):
            call = self.active[agent]
            if call.done:
                number = len(self.reports) + 1
                self.reports.append(
                    {
                        "number": number,
                        "wave": call.wave,
                        "agent": agent,
                        "task": call.task,
                        "text": call.report,
                        "forced": call.forced,
                    }
                )
                self._log(f"  [Report {number}] {agent}: {short_text(call.report)}")
                del self.active[agent]
            elif not self._searcher_budget_left():
                # force_finish off: the budget is spent and the call ends as it stands, unreported
                call.exhausted = True
                self._log(f"  {agent}: budget exhausted before a report; no report")
                del self.active[agent]

    def _run_searches(self, queries: list[tuple[SearcherCall, str]]) -> None:
        """Run one environment step's searches as one retriever batch; each call gets its passages
        inside ``<information>``. Shared by the Searchers and the single agent's solver."""
        if not queries:
            return
        self.counters.tool_steps += 1
        config = self.config
        found = search_results(self.retriever, [q for _, q in queries], config.topk, config.max_passage_chars)
        for (call, query), (passages, message) in zip(queries, found):
            call.search_steps += 1
            self.counters.search_actions += 1
            self.counters.searches_with_passages += bool(passages)
            call.messages.append(message)
            self.searches.append({"wave": call.wave, "agent": call.agent, "query": query, "passages": passages})
            self._log(f"  {call.agent} <- {len(passages)} passages: {', '.join(p['title'] for p in passages)}")

    def _searcher_budget_left(self) -> bool:
        """Whether an active Searcher gets another step after the current one (``self.env_step``)."""
        return self.env_step < self._searcher_last_step()

    # ----- the shared Answerer ------------------------------------------------------------------
    def _start_answer(self, report_numbers: list[int]) -> None:
        self.selected = report_numbers
        chosen = [(r["number"], r["task"], r["text"]) for r in self.reports if r["number"] in report_numbers]
        messages = [prompts.system_message("answerer"), prompts.answerer_message(self.question.question, chosen)]
        self.answer_turn = Turn("answerer", "answerer", messages)

    @property
    def answered(self) -> bool:
        """Whether the Answerer has acted (its turn then holds its candidates)."""
        return self.answer_turn is not None and bool(self.answer_turn.outputs)

    def _answerer_messages(self) -> list[dict[str, str]]:
        return self.answer_turn.messages if self.answer_turn else [prompts.system_message("answerer")]

    def _resolve_answer(self, action: Any) -> None:
        turn = self.answer_turn
        texts, turn.input_tokens, turn.output_tokens = self._texts(action, self.config.num_candidates)
        turn.outputs, turn.output_chars = [], []
        self._candidate_valid = []
        for j, text in enumerate(texts):
            keep_output(turn, text, self.config.max_action_chars)
            valid = self._parse("answerer", text, ("answer",)).valid
            self._candidate_valid.append(valid)
            turn.format_failed |= not valid
            self._log(f"[step {self.env_step}] answerer candidate {j}: {short_text(text)}")

    # ----- end of episode -----------------------------------------------------------------------
    def _candidate_texts(self) -> list[str]:
        """The raw outputs that hold the workflow's answer: the Answerer's candidates."""
        return self.answer_turn.outputs if self.answer_turn else []

    def _workflow_record(self) -> WorkflowRecord:
        """The finished workflow's record (envs/records.py), rewards included; sets the counters
        that are only known at the end."""
        refs = self.question.golden_answers
        # the single agent's answer is its raw last output: cut like every output a record keeps
        candidates = [c[: self.config.max_action_chars] for c in self._candidate_texts()]
        extracted = [strict_answer(c) for c in candidates]
        scores = [R.exact_match(a, refs) for a in extracted]
        r_em = R.team_outcome(scores)
        answerer_rewards = [R.answerer_reward(c, not valid) for c, valid in zip(scores, self._candidate_valid)]
        call_bonus = [R.search_bonus(call.search_steps, call.done and not call.forced) for call in self.searcher_calls]
        call_rewards = [
            R.searcher_reward(r_em, bonus, call.format_failed) for call, bonus in zip(self.searcher_calls, call_bonus)
        ]
        per_agent: dict[str, list[float]] = {}
        for call, reward in zip(self.searcher_calls, call_rewards):
            per_agent.setdefault(call.agent, []).append(reward)
        leader_reward = self._leader_reward(r_em)

        reward_parts = RewardParts(
            em=r_em,
            leader=leader_reward,
            answerer=answerer_rewards,
            searchers={agent: float(np.mean(v)) for agent, v in per_agent.items()},
            searcher_calls=call_rewards,
            search_bonus=call_bonus,
            assign_bonus=R.assign_bonus(self.counters.tool_steps),
            roles=self._workflow_rewards(scores),
        )
        self.counters.env_steps = self.env_step
        self.counters.task_assignments = len(self.subtasks)
        counters = replace(self.counters)
        if not self.config.force_finish:
            # only under the option, so that default records keep their fields
            counters.no_answer = int(not self.answered)
            counters.unreported_calls = sum(call.exhausted for call in self.searcher_calls)
        return WorkflowRecord(
            workflow=self.workflow,
            question_id=self.question.id,
            question=self.question.question,
            golden_answers=list(refs),
            subtasks=[Subtask(**subtask) for subtask in self.subtasks],
            dropped_subtasks=self.dropped_subtasks,
            reports=[Report(**report) for report in self.reports],
            selected_reports=self.selected,
            searches=[
                Search(s["wave"], s["agent"], s["query"], [Passage(**p) for p in s["passages"]]) for s in self.searches
            ],
            candidates=candidates,
            extracted_answers=extracted,
            candidate_scores=scores,
            rewards=reward_parts,
            counters=counters,
            format_errors=[FormatError(**error) for error in self.format_errors],
            calls=self._calls(),
            duration_s=time.perf_counter() - self._started,
        )

    def _finish(self) -> None:
        record = self.record = self._workflow_record()
        reward_parts, extracted = record.rewards, record.extracted_answers
        self._log(
            f"Answer: {extracted[0] if extracted else None!r}  gold: {list(self.question.golden_answers)}  "
            f"EM={reward_parts.em:.0f}"
        )

        for agent in self.agents:
            role = self.role_of(agent)
            if role == "leader":
                self.rewards[agent] = reward_parts.leader if reward_parts.leader is not None else 0.0
            elif role == "answerer":
                self.rewards[agent] = float(np.mean(reward_parts.answerer)) if reward_parts.answerer else 0.0
            elif role == "searcher":
                self.rewards[agent] = reward_parts.searchers.get(agent, 0.0)
            else:  # a role only some workflows have: its reward part is named after it
                self.rewards[agent] = reward_parts.roles[role]
            self.terminations[agent] = True
            self.infos[agent] = {**self._info(agent), "reward_parts": reward_parts, "counters": record.counters}
        # ``rewards`` loses each agent as it leaves (PettingZoo's rule); this stays until the next reset
        self.final_rewards = dict(self.rewards)
        self._accumulate_rewards()
        self.agent_selection = self.agents[0]

    def _leader_reward(self, r_em: float) -> float | None:
        return None

    def _workflow_rewards(self, candidate_scores: list[float]) -> dict[str, float]:
        """Reward parts of roles only some workflows have (the single agent's ``solver``), each
        under its role's name: the reward of every agent of that role (``RewardParts.roles``)."""
        return {}

    def _calls(self) -> list[CallRecord]:
        calls = []
        for call in self.searcher_calls:
            calls.append(call_record(call.call_id, call.agent, "searcher", call.wave, call))
        for turn in self._turns():
            calls.append(call_record(turn.call_id or turn.agent, turn.agent, turn.role, turn.wave, turn))
        return calls

    def _turns(self) -> list[Turn]:
        return [self.answer_turn] if self.answer_turn else []

    # ----- rendering --------------------------------------------------------------------------
    def render(self) -> str | None:
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; pass render_mode='ansi' or 'human'")
            return None
        self._require_reset("render")
        text = "\n".join(self.transcript)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        pass


def with_notice(messages: list[dict[str, str]], role: str) -> list[dict[str, str]]:
    """``messages`` with the role's last-turn notice appended to the final (user) message."""
    last = messages[-1]
    return [*messages[:-1], {**last, "content": f"{last['content']}\n{team.role(role).last_turn_notice}"}]


def _valid_unicode(text: str) -> str:
    """``text`` with lone surrogates (which a JSON-decoded API answer can hold) replaced by U+FFFD,
    so that records and chat histories can always be written as UTF-8 and tokenized."""
    return _SURROGATE.sub("\ufffd", text)


def short_text(text: str | None, limit: int = 160) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def keep_output(call: SearcherCall | Turn, text: str, limit: int) -> None:
    """Keep ``text`` in ``call.outputs`` cut to ``limit`` characters (``max_action_chars``, the cut
    the chat histories show, so that a record stays bounded), and its length in ``call.output_chars``."""
    call.outputs.append(text[:limit])
    call.output_chars.append(len(text))


def call_record(call_id: str, agent: str, role: str, wave: int | None, call: SearcherCall | Turn) -> CallRecord:
    """The record of a finished call; ``output_chars`` only when ``keep_output`` cut an output."""
    cut = any(length != len(output) for length, output in zip(call.output_chars, call.outputs))
    return CallRecord(
        call_id=call_id,
        agent=agent,
        role=role,
        wave=wave,
        messages=call.messages,
        outputs=call.outputs,
        input_tokens=call.input_tokens,
        output_tokens=call.output_tokens,
        output_chars=list(call.output_chars) if cut else None,
    )
