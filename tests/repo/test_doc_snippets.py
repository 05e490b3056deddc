"""Python snippets of the docs run as written: each is found by a line it holds and executed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def snippet(doc: str, marker: str) -> str:
    """The one ```python block of ``doc`` (a path under the repository) that holds ``marker``."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    blocks = [code for code in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if marker in code]
    assert len(blocks) == 1, f"{doc}: {len(blocks)} python blocks hold {marker!r}"
    return blocks[0]


@pytest.mark.parametrize(
    ("doc", "marker"),
    [
        ("docs/environments.md", "env.unwrapped.final_rewards"),  # final rewards, the PettingZoo way
        ("docs/marl.md", "import supersuit"),  # flat observations under SuperSuit's wrappers
    ],
)
def test_the_snippet_runs(doc, marker, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet(doc, marker), f"{doc} snippet", "exec"), {"__name__": "__main__"})
