"""The menu census counts what the fast option mode builds and leaves it as it found it."""

from __future__ import annotations

import json

from benchmarks.menu_states import main
from maopd.envs.option import fast


def test_the_census_counts_menus_and_logical_states_and_restores_the_option_mode(tmp_path):
    build_menu, world_menu = fast.build_menu, fast.World.menu
    main(["--out", str(tmp_path), "--scenarios", "lazy_searcher_v1", "--seeds", "0", "1", "--iterations", "2"])
    assert (fast.build_menu, fast.World.menu) == (build_menu, world_menu)
    result = json.loads((tmp_path / "menu_states.json").read_text())
    first, second = result["rows"]
    for row in (first, second):
        assert 0 < row["searcher_logical"] <= row["searcher_built"] < row["built"] <= row["decisions"]
        assert 0 < row["searcher_menu_share"] < row["menu_share"] < 1
        assert row["run_speedup_bound"] >= 1
    # the second seed finds the first one's menus and logical states: it builds fewer of each per decision
    assert second["built"] / second["decisions"] < first["built"] / first["decisions"]
    assert "python benchmarks/menu_states.py --out" in (tmp_path / "README.md").read_text()
