"""No doc or docstring tells a user to unpickle a file: a run directory may hold a planted file,
and ``torch.load(weights_only=False)`` or ``pickle.load`` of it runs whatever code it holds."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNSAFE = ("weights_only=False", "pickle.load(", "pickle.loads(")
TEXTS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    + [
        path
        for layer in ("envs", "agents", "training", "benchmarks", "maopd", "scripts")
        for path in (ROOT / layer).rglob("*.py")
        if "results" not in path.relative_to(ROOT).parts
    ]
)


@pytest.mark.parametrize("path", TEXTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_nothing_says_to_unpickle_a_file(path):
    text = path.read_text(encoding="utf-8")
    assert not [unsafe for unsafe in UNSAFE if unsafe in text]
