"""Named, versioned option-mode scenarios for credit-assignment benchmarks.

A scenario fixes everything an option-mode episode depends on besides the policy: the world, the
workflow, the budget, the Searchers, the hint feature and the closed-book knowledge. A changed
setting, or a change in the environments under it (their prompts are in the observations), gets
the next version (``_v1`` to ``_v2``), so results that name a scenario stay comparable.

``synthwiki_v1``
================

| | |
|---|---|
| World | the default SynthWiki world (seed 0, size small), 1–3 hops and comparisons: training on its 2,000 |
| | train questions, greedy evaluation on its 300 dev questions (the trainer's choice) |
| Workflow | hierarchical: Leader → waves of 3 Searchers → Answerer, the workflow's budget of 12 environment steps |
| Actions | ``Discrete(8)`` menus (``maopd.envs.option.menus``), no expert-hint feature |
| Closed book | none: every fact must be searched |
| Budget exhaustion | forced finish (``force_finish=True``): Searchers must report in their last step and a Leader |
| | that fails its last step hands every report over, so every workflow gets an answer |
| Rewards | the text environment's: R_EM, Leader R_L (Eq. 6), Answerer R_A, each Searcher assignment R_S |

Searching is the only way to an answer, so no Searcher is tempted to stop searching.

``lazy_searcher_v1``
====================

As ``synthwiki_v1`` with two changes that pose the paper's credit-assignment problem:

| | |
|---|---|
| Closed book | ``ClosedBookConfig()``: a Searcher may "report from memory"; a fact comes back right at a rate set by |
| | its subject's popularity band (``maopd.envs.synthwiki.popularity``): 0.9 for the most popular quarter, |
| | 0.6 for the middle quarter, never for the least popular half (a confident wrong value instead) |
| Budget | 8 environment steps instead of 12: every search spends budget that a multi-hop question needs, |
| | and a team that runs out answers from what it has |

Skipping search is a tempting local optimum: it is cheap, often right on 1-hop questions, and the
team outcome cannot tell a lucky recall from a search. Team-outcome credit lets Searchers free-ride
on it; credit that judges a Searcher's own choice (its role reward R_S, a Teacher's log-ratio, a
counterfactual) need not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from maopd.envs.option.menus import MENU_SIZE
from maopd.envs.option.wrapper import OptionWrapper, option_env
from maopd.envs.retrieval.cache import CachedRetriever
from maopd.envs.retrieval.factory import RetrieverConfig
from maopd.envs.search_env import shared_retriever
from maopd.envs.synthwiki import load_default_world
from maopd.envs.synthwiki.closed_book import ClosedBookConfig, closed_book


@dataclass(frozen=True)
class OptionScenario:
    name: str
    workflow: str = "hierarchical"
    max_steps: int | None = None  # None: the workflow's own budget
    num_searchers: int = 3
    hints: bool = False
    closed_book: ClosedBookConfig | None = None
    world_seed: int = 0
    world_size: str = "small"
    # the scenarios are defined with the forced finish, unlike the text environments' default
    # (the paper's: no forced answer), so the scenarios state theirs
    force_finish: bool = True

    def make_env(self, split: str = "train", workflow: str | None = None, **overrides: Any) -> OptionWrapper:
        """An option-mode environment of this scenario; ``workflow`` overrides it (a Teacher's cascade),
        ``overrides`` any environment option (``retriever=None``: an uncached BM25 index)."""
        world = load_default_world(self.world_seed, self.world_size)
        knowledge = (
            closed_book(world.corpus, self.closed_book, self.world_seed) if self.closed_book is not None else None
        )
        # One BM25 index and one result cache per world: a query is searched once per process.
        options: dict[str, Any] = {
            "retriever": _cached_retriever(world.corpus),
            "corpus": world.corpus,
            "questions": world.splits[split],
            "force_finish": self.force_finish,
        }
        if workflow in (None, self.workflow):  # another workflow (a Teacher's cascade) keeps its own budget
            workflow, options["max_steps"] = self.workflow, self.max_steps
        if workflow == "hierarchical":
            options["num_searchers"] = self.num_searchers
        return option_env(workflow, MENU_SIZE, self.hints, knowledge, **{**options, **overrides})

    def card(self) -> dict[str, Any]:
        """The scenario's settings, as saved with results."""
        return {
            "name": self.name,
            "workflow": self.workflow,
            "max_steps": self.max_steps,
            "num_searchers": self.num_searchers,
            "hints": self.hints,
            "world_seed": self.world_seed,
            "world_size": self.world_size,
            "force_finish": self.force_finish,
            "closed_book": None if self.closed_book is None else vars(self.closed_book),
        }


_RETRIEVERS: dict[str, CachedRetriever] = {}


def _cached_retriever(corpus) -> CachedRetriever:
    if corpus.fingerprint not in _RETRIEVERS:
        _RETRIEVERS[corpus.fingerprint] = CachedRetriever(shared_retriever(RetrieverConfig(), corpus))
    return _RETRIEVERS[corpus.fingerprint]


SCENARIOS = {
    "synthwiki_v1": OptionScenario("synthwiki_v1"),
    "lazy_searcher_v1": OptionScenario("lazy_searcher_v1", max_steps=8, closed_book=ClosedBookConfig()),
}


def get_scenario(name: str) -> OptionScenario:
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose one of {sorted(SCENARIOS)}")
    return SCENARIOS[name]
