"""The workflow vocabulary: every workflow the project plays, its environment module and roles.

=============  ==================================  =================================
workflow       environment module                  roles
=============  ==================================  =================================
hierarchical   ``maopd.envs.hierarchical_search_v1``     leader, searcher, answerer (H-MAS)
cascade        ``maopd.envs.cascade_search_v1``          searcher, answerer (C-MAS)
single         ``maopd.envs.single_search_v1``           solver (the Search-R1-style baseline)
=============  ==================================  =================================

Every layer that names a workflow (demonstrations, the trainer, the evaluation, the command
line) reads it from here, so a new workflow is one line in each table below.
"""

from __future__ import annotations

import importlib
from types import ModuleType

WORKFLOWS = ("hierarchical", "cascade", "single")
# The paper's teams; the single agent is a baseline outside the paper's method.
TEAM_WORKFLOWS = ("hierarchical", "cascade")

_MODULES = {
    "hierarchical": "maopd.envs.hierarchical_search_v1",
    "cascade": "maopd.envs.cascade_search_v1",
    "single": "maopd.envs.single_search_v1",
}
WORKFLOW_ROLES = {
    "hierarchical": ("leader", "searcher", "answerer"),
    "cascade": ("searcher", "answerer"),
    "single": ("solver",),
}


def check_workflow(workflow: str) -> str:
    """``workflow`` if it is one of ``WORKFLOWS``, else a ValueError naming them."""
    if workflow not in WORKFLOWS:
        raise ValueError(f"workflow: unknown workflow {workflow!r}; expected one of {WORKFLOWS}")
    return workflow


def env_module(workflow: str) -> ModuleType:
    """The PettingZoo module (``env()``, ``raw_env``, ``parallel_env``) of ``workflow``.

    Imported on demand: this module is imported by ``maopd.envs.policy``, below the environments.
    """
    return importlib.import_module(_MODULES[check_workflow(workflow)])
