"""The registered workflows: the one table a new workflow adds a line to.

=============  ==========================================  =================================
workflow       environment module                          roles
=============  ==========================================  =================================
hierarchical   ``maopd.envs.hierarchical_search_v1``       leader, searcher, answerer (H-MAS)
cascade        ``maopd.envs.cascade_search_v1``            searcher, answerer (C-MAS)
single         ``maopd.envs.single_search_v1``             solver (the Search-R1-style baseline)
orchestra      ``maopd.envs.orchestra_search_v1``          verifier, searcher, answerer (Dr. MAS)
=============  ==========================================  =================================

Each module holds its workflow's declaration (``maopd.envs.team.Workflow``) and program (its
``raw_env``); every layer that names a workflow (demonstrations, the trainer, the evaluation, the
command line) reads it from here. Modules are imported on demand, when a workflow's declaration
or environment is first asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from maopd.envs.team import Workflow

if TYPE_CHECKING:
    from pettingzoo.utils import wrappers

    from maopd.envs.parallel import SearchParallelEnv
    from maopd.envs.search_env import SearchEnv

WORKFLOW_MODULES = {
    "hierarchical": "maopd.envs.hierarchical_search_v1",
    "cascade": "maopd.envs.cascade_search_v1",
    "single": "maopd.envs.single_search_v1",
    "orchestra": "maopd.envs.orchestra_search_v1",
}
_REGISTERED: dict[str, str] = dict(WORKFLOW_MODULES)


def register_workflow(program: type[SearchEnv]) -> Workflow:
    """Register a workflow at run time by its program (a ``SearchEnv`` subclass whose
    ``declaration`` names it), for a team defined outside this package. Its module must define
    ``env`` and ``parallel_env`` (``pettingzoo_api``). A workflow of the same name from another
    module is refused."""
    workflow = program.declaration
    known = _REGISTERED.get(workflow.name)
    if known is not None and known != program.__module__:
        raise ValueError(f"workflow {workflow.name!r} is already registered, by {known}")
    _REGISTERED[workflow.name] = program.__module__
    return workflow


def workflow_names() -> tuple[str, ...]:
    """Every registered workflow, the built-in ones first."""
    return tuple(_REGISTERED)


def option_workflows() -> tuple[str, ...]:
    """The registered workflows with an option mode: every role of theirs declares a menu (``Role.menu``)."""
    return tuple(name for name in _REGISTERED if all(role.menu for role in declaration(name).roles))


def check_workflow(workflow: str) -> str:
    """``workflow`` if it is registered, else a ValueError naming the registered ones."""
    if workflow not in _REGISTERED:
        raise ValueError(f"workflow: unknown workflow {workflow!r}; expected one of {workflow_names()}")
    return workflow


def env_module(workflow: str) -> ModuleType:
    """The PettingZoo module (``env()``, ``raw_env``, ``parallel_env``) of ``workflow``."""
    name = _REGISTERED[check_workflow(workflow)]
    return sys.modules.get(name) or importlib.import_module(name)


def declaration(workflow: str) -> Workflow:
    """``workflow``'s declaration: its roles, budgets and environment name."""
    return env_module(workflow).raw_env.declaration


def workflow_roles(workflow: str) -> tuple[str, ...]:
    """The names of the roles that play in ``workflow``."""
    return declaration(workflow).role_names


def pettingzoo_api(
    raw_env: type[SearchEnv],
) -> tuple[Callable[..., wrappers.OrderEnforcingWrapper], Callable[..., SearchParallelEnv]]:
    """A workflow module's ``env`` (the AEC environment, wrapped in PettingZoo's order check:
    step/last/render/observe before reset() is a clear error) and ``parallel_env``."""
    from pettingzoo.utils import wrappers

    from maopd.envs.parallel import parallel_wrapper_fn

    name = raw_env.declaration.env_name

    def env(**kwargs: Any) -> wrappers.OrderEnforcingWrapper:
        return wrappers.OrderEnforcingWrapper(raw_env(**kwargs))

    env.__doc__ = f"The {name} environment; keyword arguments are ``SearchEnvConfig`` fields or ``raw_env`` options."
    env.__module__ = raw_env.__module__
    return env, parallel_wrapper_fn(raw_env)
