"""Every integer option of a command line (``maopd``, the benchmark and training scripts) has a
range: its argparse type is one of ``maopd/base/arguments.py``'s, never a bare ``int``, so that
``--iterations 0`` or ``--seed -1`` is a one-line usage error before any work instead of a run that
trains nothing, a stack trace, or a statistic over a run counted twice."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from maopd.base.arguments import positive_float

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("envs", "agents", "training", "benchmarks", "maopd", "scripts")


def bare_int_options(root: Path = ROOT) -> list[str]:
    found = []
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"):
                    continue
                for keyword in node.keywords:
                    if keyword.arg == "type" and isinstance(keyword.value, ast.Name) and keyword.value.id == "int":
                        option = next((a.value for a in node.args if isinstance(a, ast.Constant)), "?")
                        found.append(f"{path.relative_to(root)}:{node.lineno} {option}")
    return found


def test_no_integer_option_is_a_bare_int():
    assert bare_int_options() == []


def test_the_check_finds_a_bare_int(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "tool.py").write_text('parser.add_argument("--steps", type=int, default=3)\n')
    assert bare_int_options(tmp_path) == ["benchmarks/tool.py:1 --steps"]


def test_a_positive_float_is_finite_and_above_zero():
    assert positive_float("0.5") == 0.5 and positive_float("1e-3") == 1e-3
    for text in ("0", "-1", "nan", "inf", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_float(text)
