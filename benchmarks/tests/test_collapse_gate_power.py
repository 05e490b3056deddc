"""The collapse gates' window and a simulated build's chance to land in it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.collapse_gate_power import build_pass_rate, main, shifted, window
from maopd.study.gates import COLLAPSE, MET, collapse_rows


@pytest.mark.parametrize("search_em", [0.5, 0.6, 0.8])
def test_the_window_is_where_the_ratio_and_paired_difference_gates_both_hold(search_em):
    low, high = window(search_em)
    assert high - low == pytest.approx(0.05 * (1 - search_em))

    def met(no_search):
        figures = {
            "questions": COLLAPSE.questions,
            "attempts": COLLAPSE.attempts,
            "ratio": no_search / search_em,
            "paired_difference_points": 100 * (no_search - search_em),
            "search_em": search_em,
        }
        return all(row["verdict"] == MET for row in collapse_rows(figures))

    assert met(low + 1e-4) and met(high - 1e-4) and met((low + high) / 2)
    assert not met(low - 2e-3) and not met(high + 2e-3)


def test_a_shift_keeps_the_order_of_questions_and_reaches_the_mean():
    accuracies = np.array([0.05, 0.3, 0.7, 0.99])
    moved = shifted(accuracies, 0.6)
    assert moved.mean() == pytest.approx(0.6) and list(np.argsort(moved)) == [0, 1, 2, 3]


def test_noise_alone_fails_builds_that_sit_at_the_windows_centre():
    accuracies, rng = np.full(300, 0.6), np.random.default_rng(0)
    noisy = build_pass_rate(accuracies, 0.6, 4, 400, rng)["one_build"]
    precise = build_pass_rate(accuracies, 0.6, 4000, 400, rng)["one_build"]
    assert noisy < 0.9 and precise > 0.99


def test_the_command_writes_its_table_with_its_command(tmp_path):
    source = tmp_path / "collapse.json"
    per_question = {f"dev-{i}": {"search": (i % 5) / 4} for i in range(40)}
    source.write_text(json.dumps({"figures": {"per_question": per_question}}))
    assert main([str(source), "--out", str(tmp_path / "out"), "--simulations", "50"]) == 0
    result = json.loads((tmp_path / "out" / "power.json").read_text())
    assert [row["search_em"] for row in result["rows"]] == [0.5, 0.6, 0.7, 0.8, 0.9]
    assert "python benchmarks/collapse_gate_power.py" in (tmp_path / "out" / "README.md").read_text()
