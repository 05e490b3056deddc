"""Imports run one way: envs ← agents ← training ← benchmarks ← maopd, and no module imports back.

``maopd/base/`` is the shared base every layer may import; it imports nothing of the project. Every
import counts: module-level, function-local and type-only (``if TYPE_CHECKING:``) alike, since each
is a dependency a reader and a refactoring must follow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("envs", "agents", "training", "benchmarks", "maopd")
SHARED_BASE = "maopd.base"


def _in_base(module: str) -> bool:
    return module == SHARED_BASE or module.startswith(SHARED_BASE + ".")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_modules() -> dict[str, Path]:
    modules = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            if "results" not in path.relative_to(ROOT).parts:
                modules[_module_name(path)] = path
    return modules


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
        found.update(target for target in targets if target.split(".")[0] in LAYERS)
    return found - {name}


GRAPH = {name: _imported_modules(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    return -1 if _in_base(module) else LAYERS.index(module.split(".")[0])


def test_imports_point_down_the_layers():
    wrong = [
        f"{source} imports {target}"
        for source, targets in GRAPH.items()
        for target in sorted(targets)
        if (_in_base(source) and not _in_base(target)) or _layer(target) > _layer(source)
    ]
    assert not wrong, "imports against envs ← agents ← training ← benchmarks ← maopd:\n" + "\n".join(wrong)


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


@pytest.mark.parametrize("module", ["envs.search_env", "training.trainer", "maopd.pipeline.job"])
def test_the_graph_sees_imports(module):
    """Guards the checker itself: these modules have known project imports."""
    assert GRAPH[module]
