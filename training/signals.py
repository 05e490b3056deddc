"""What a learning signal needs: the vocabulary its registration declares.

Two registries hold learning signals, and both register with ``needs_registry_decorator``:

* the LLM trainer's **advantage estimators** (``maopd.training.advantages.ADVANTAGE_ESTIMATORS``),
  each the signal of *one role*, chosen per role in config (``advantage.<role>_signal``): Eq. 1's
  ``grpo``, Eq. 5's ``opd``, ...;
* the option mode's **credit-assignment methods** (``maopd.training.marl.credit.CREDIT_METHODS``),
  each the signal of *a whole team* (``MarlConfig.method``): ``role``, ``difference``, ``mappo``,
  and ``opd``, which is the option-mode counterpart of the per-role map
  ``{leader: grpo, searcher: opd, answerer: grpo}``.

A registration states what the function reads beyond its batch (``Needs``), and whoever runs it
provides exactly that, reading the declaration, never the name: the LLM trainer loads the frozen
Teacher and scores the rows of the roles whose estimator declares ``teacher``, and hands the
Teacher's log-probs to those estimators only; the option mode trains a Teacher first for a method
that declares it. A plug-in registered from outside the package is served the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from maopd.training.losses import lookup, registry_decorator


@dataclass(frozen=True)
class Needs:
    """What a registered learning signal reads beyond its batch.

    ``teacher``: the frozen Stage-I Teacher π_T. The LLM trainer loads it (``teacher.source``) and
    passes its log-probs on the role's rows as ``teacher_logprobs`` (None to an estimator that does
    not declare it); the option mode trains one on the cascade and passes it as ``CreditContext.teacher``.

    ``outcome`` (advantage estimators only): the rewards Eq. 1 normalises before the estimator
    runs, its result in ``sequence_advantages``: ``"own"``, the role's own reward (R_L, c_ij per
    candidate, R_S, R_solver); ``"final_em"``, the team outcome R_EM; ``"searcher_rewards"``, the
    Searchers' R_S (the Prompted Critic's when it replaces it). None: no group advantage.
    """

    teacher: bool = False
    outcome: str | None = None


@dataclass(frozen=True)
class Declared:
    """A registered function with what it declared it needs; calling it calls the function."""

    fn: Callable[..., Any]
    needs: Needs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def needs_registry_decorator(registry: dict[str, Declared], kind: str):
    """``@register(name, needs=Needs(...))`` adds a function to ``registry`` with what it needs
    (nothing beyond its batch by default); a name can be used once. The function is returned
    unchanged, so that one function can be registered under several names with different needs."""
    add = registry_decorator(registry, kind)

    def register(name: str, needs: Needs = Needs()):
        if not isinstance(needs, Needs):
            raise TypeError(f"{kind} {name!r}: needs must be a maopd.training.signals.Needs, got {needs!r}")

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            add(name)(Declared(fn, needs))
            return fn

        return decorate

    return register


def needs_of(registry: dict[str, Declared], kind: str, name: str) -> Needs:
    """What the function registered as ``name`` declared it needs; an unknown name lists the known ones."""
    return lookup(registry, kind, name).needs
