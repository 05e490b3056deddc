"""Imports run one way, with no exception: base ← envs ← agents ← training ← evaluation ← pipeline
← study ← CLI, and no module imports back. The study (gates, pre-registration, report) runs the main
job's pipeline in its variants, so it sits above the pipeline.

Every module of the library lives under the one import root ``maopd``; in the repository
``envs/``, ``agents/`` and ``training/`` sit at the top level and install as ``maopd.envs``,
``maopd.agents`` and ``maopd.training`` (pyproject.toml). ``maopd.base`` is the shared base at the
bottom: it imports nothing of the project. Every import counts: module-level, function-local and
type-only (``if TYPE_CHECKING:``) alike, since each is a dependency a reader and a refactoring must
follow. ``benchmarks/`` (scripts, not installed) sits above all of it, and only it imports itself.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Where each top-level directory of the repository installs.
INSTALLED_AS = {"maopd": "maopd", "envs": "maopd.envs", "agents": "maopd.agents", "training": "maopd.training"}
# The layers, bottom first; a module may import its own layer and those below it.
LAYERS = (
    ("maopd.base",),
    ("maopd.envs",),
    ("maopd.agents",),
    ("maopd.training",),
    ("maopd.evaluation",),
    ("maopd.pipeline",),
    ("maopd.study",),
    ("maopd.commands", "maopd.cli", "maopd"),
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = (*INSTALLED_AS[parts[0]].split("."), *parts[1:])
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_modules() -> dict[str, Path]:
    return {_module_name(path): path for top in INSTALLED_AS for path in sorted((ROOT / top).rglob("*.py"))}


MODULES = _project_modules()


def _imported_modules(name: str, path: Path) -> set[str]:
    """Every project module ``name`` imports, resolving ``from package import submodule``."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target.split(".")[0] == "maopd")
    return found - {name}


GRAPH = {name: _imported_modules(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    """The layer of the longest prefix that names ``module`` or a package above it."""
    matches = [
        (len(prefix), index)
        for index, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    return max(matches)[1]


def test_imports_point_down_the_layers():
    wrong = [
        f"{source} imports {target}"
        for source, targets in GRAPH.items()
        for target in sorted(targets)
        if _layer(target) > _layer(source)
    ]
    assert not wrong, (
        "imports against base ← envs ← agents ← training ← evaluation ← pipeline ← study ← CLI:\n" + "\n".join(wrong)
    )


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return components


def test_no_module_imports_one_that_imports_it_back():
    cycles = _cycles()
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("module", ["maopd.envs.search_env", "maopd.training.trainer", "maopd.pipeline.job"])
def test_the_graph_sees_imports(module):
    """Guards the checker itself: these modules have known project imports."""
    assert GRAPH[module]


def test_the_import_root_imports_nothing():
    """``import maopd.base.config`` must not pull in the CLI or any layer through the package."""
    assert not GRAPH["maopd"]


def test_the_base_imports_nothing_of_the_project():
    assert not [f"{s} imports {t}" for s, ts in GRAPH.items() if _layer(s) == 0 for t in ts if _layer(t) > 0]


BARE_IMPORT = re.compile(r"^\s*(from|import)\s+(envs|agents|training)\b", re.M)
BENCHMARKS_IMPORT = re.compile(r"^\s*(from|import)\s+benchmarks\b", re.M)


def _tracked_python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in listed.stdout.split()]


def test_no_module_is_imported_by_a_bare_top_level_name():
    """The repository's envs/, agents/ and training/ are importable only as maopd.*, so a bare
    ``import envs`` would work in a clone and fail once installed. A benchmark's code string run in
    an older checkout (``CHECKOUT_LOOP``) names that checkout's modules and is no import of ours."""
    wrong = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in _tracked_python_files()
        for match in BARE_IMPORT.finditer(path.read_text())
        if not _in_code_string(path, match.start())
    ]
    assert not wrong, "bare imports (use maopd.envs, maopd.agents, maopd.training):\n" + "\n".join(wrong)


def _in_code_string(path: Path, offset: int) -> bool:
    """Whether ``offset`` lies inside a string constant of ``path`` (code that runs elsewhere)."""
    text = path.read_text()
    line = text.count("\n", 0, offset) + 1
    return any(
        isinstance(node, ast.Constant) and isinstance(node.value, str) and node.lineno < line <= node.end_lineno
        for node in ast.walk(ast.parse(text))
    )


def test_only_benchmarks_import_benchmarks():
    wrong = [
        str(path.relative_to(ROOT))
        for path in _tracked_python_files()
        if BENCHMARKS_IMPORT.search(path.read_text()) and path.relative_to(ROOT).parts[0] != "benchmarks"
    ]
    assert not wrong, "benchmarks/ is scripts, not installed; these import it:\n" + "\n".join(wrong)
