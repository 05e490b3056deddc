"""docs/environments.md's section on TRL, OpenEnv and GEM shows each adapter in a Python snippet,
and each snippet runs as written, outside the clone; README's layout names the adapters."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration_support import require

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "environments.md").read_text(encoding="utf-8")
HEADING = "## In TRL, OpenEnv and GEM (`maopd.agents.integrations`)"
# the package each snippet drives, and what its output shows
SNIPPETS = {
    "trl_env": ("trl", "Your call is over. 0.95"),
    "openenv_server": ("openenv", "True 1.0 {'searcher_0': 0.95"),
    "gem_env": ("gem", "'answerer': 1.0} 1.0"),
}


def snippets() -> dict[str, str]:
    """The section's Python snippets, by the adapter module each imports."""
    start = DOC.index("\n" + HEADING + "\n")
    end = DOC.find("\n## ", start + 1)
    section = DOC[start : end if end != -1 else len(DOC)]
    found = {}
    for code in re.findall(r"```python\n(.*?)```", section, re.DOTALL):
        module = re.search(r"maopd\.agents\.integrations\.(\w+) import", code).group(1)
        found[module] = code
    return found


def test_the_section_shows_each_adapter_and_the_readme_names_them():
    assert set(snippets()) == set(SNIPPETS)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("\n## Layout") :]
    row = next(line for line in layout.splitlines() if "agents/integrations/" in line)
    assert all(name in row for name in ("TRL", "OpenEnv", "GEM"))


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(SNIPPETS))
def test_the_snippet_runs_outside_the_clone(module, tmp_path):
    package, shown = SNIPPETS[module]
    require(package)
    done = subprocess.run(
        [sys.executable, "-c", snippets()[module]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # rewards print as floats (0.9500000000000001): compare them at two decimals
    printed = re.sub(r"(\d\.\d\d)\d+", r"\1", done.stdout)
    assert shown in printed, done.stdout[-2000:]
