"""A policy named on the command line: ``package.module:Name`` or ``path/to/file.py:Name``.

``load_policy(spec)`` imports the module (from the current folder too, as ``python -m`` would) or
runs the file, takes ``Name`` from it, and builds the policy: a class is called with no
arguments, an object with an ``act`` method is taken as it is. The result is a ``NamedPolicy``:
every output it returns is checked where it enters the environment (one ``AgentOutput`` per turn,
one text per candidate: ``maopd.envs.policy.checked_outputs``), so that a broken contract is one
line naming ``spec``, not a ``zip`` error or a format failure far downstream.

Every problem on the way (no such module, file or name, an exception while importing or
building, an object that is not a policy) is a ``PolicySpecError``, one line naming the spec.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from maopd.base.config import did_you_mean
from maopd.base.errors import UserError, failed_in
from maopd.envs.policy import AgentOutput, AgentTurn, Policy, checked_outputs

SPEC_FORM = "package.module:Name or path/to/file.py:Name"


class PolicySpecError(UserError, ValueError):
    """A policy spec that cannot be loaded; the message names the spec and what to do."""


def is_policy_spec(value: str) -> bool:
    """Whether ``value`` is written as a spec (``where:Name``) rather than a built-in policy's name."""
    where, colon, name = value.rpartition(":")
    return bool(colon and where and name)


class NamedPolicy:
    """``policy`` with every output checked (``checked_outputs``) and errors naming ``spec``;
    ``source`` is the file its class was defined in (None when unknown)."""

    def __init__(self, policy: Policy, spec: str, source: Path | None):
        self.policy = policy
        self.spec = spec
        self.source = source

    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        return checked_outputs(self.spec, turns, self.policy.act(turns), every_output=True)

    def source_sha256(self) -> str | None:
        """The SHA-256 of the file the policy's class was defined in: what the policy is, besides its name."""
        return None if self.source is None else hashlib.sha256(self.source.read_bytes()).hexdigest()


def load_policy(spec: str) -> NamedPolicy:
    """The policy ``spec`` names (see the module docstring)."""
    where, _, name = spec.rpartition(":")
    if not is_policy_spec(spec):
        raise PolicySpecError(f"policy {spec!r}: expected {SPEC_FORM}")
    module = _module_from_file(spec, Path(where)) if where.endswith(".py") else _module_from_import(spec, where)
    if not hasattr(module, name):
        public = [attr for attr in vars(module) if not attr.startswith("_")]
        raise PolicySpecError(f"policy {spec}: {where} defines no {name!r}{did_you_mean(name, public)}")
    target = getattr(module, name)
    if inspect.isclass(target):
        try:
            policy = target()
        except Exception as exc:  # the user's code: one line with where it failed
            source = inspect.getsourcefile(target) or ""
            raise PolicySpecError(
                f"policy {spec}: {name}() failed{failed_in(exc, source)} (a policy named on the command line is "
                "built with no arguments)"
            ) from None
    else:
        policy = target
    if not callable(getattr(policy, "act", None)):
        raise PolicySpecError(
            f"policy {spec}: {name} is a {type(policy).__name__}, not a policy; give a class (or object) with "
            "act(turns) -> outputs (docs/policies.md)"
        )
    source = inspect.getsourcefile(type(policy))
    return NamedPolicy(policy, spec, Path(source) if source else None)


def _module_from_import(spec: str, module_name: str) -> ModuleType:
    # as ``python -m`` does, the current folder comes first, so a module beside the user is found
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise PolicySpecError(
                f"policy {spec}: no module {missing!r} on the path (the current folder included); install it, run "
                "from its folder, or give path/to/file.py:Name"
            ) from None
        raise PolicySpecError(
            f"policy {spec}: importing {module_name} failed{failed_in(exc, _origin(module_name))}"
        ) from None


def _origin(module_name: str) -> str:
    """The file ``module_name`` is imported from ('' when it cannot be told)."""
    try:
        found = importlib.util.find_spec(module_name)
    except Exception:  # a parent package that fails to import: the message says enough
        return ""
    return (found.origin or "") if found else ""


def _module_from_file(spec: str, path: Path) -> ModuleType:
    if not path.is_file():
        problem = "is a directory" if path.is_dir() else "does not exist"
        raise PolicySpecError(f"policy {spec}: {path} {problem}; give the Python file that defines the policy")
    path = path.resolve()
    # a name of its own, registered before it runs: dataclasses and pickling look the module up
    module_name = f"maopd_policy_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}_{path.stem}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise PolicySpecError(f"policy {spec}: {path} failed{failed_in(exc, path)}") from None
    return module
