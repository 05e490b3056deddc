"""benchmarks/knowledge_probe.py: its corpus keeps RL-world questions out, its report counts right."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.knowledge_probe import ProbeConfig, pretraining_corpus, world_facts
from maopd.envs.synthwiki.facts import Fact, chance_rates
from maopd.envs.synthwiki.grammar import parse_question
from maopd.envs.synthwiki.popularity import BANDS, ExposureCurve
from maopd.evaluation.fact_recall import recall_report

ROOT = Path(__file__).resolve().parents[2]


def _fact(subject, predicate, value, band, exposures):
    return Fact(subject, predicate, value, (value,), 1, band, exposures)


def test_corpus_states_each_fact_as_often_as_its_popularity_and_asks_only_pretraining_questions():
    curve = ExposureCurve().scaled(0.1)
    rl, other = world_facts(7, 0.25, curve), world_facts(8, 0.25, curve)
    qa_subjects = {f.subject for f in other[::2]}
    texts, counts = pretraining_corpus(rl, other, qa_subjects, ProbeConfig(phrasings=8))
    assert counts["rl_statements"] == sum(f.exposures for f in rl)
    assert counts["qa_pairs"] == sum(f.exposures for f in other if f.subject in qa_subjects)
    questions = [item + "?" for text in texts for item in text.split("? ")[:-1]]
    asked = {parse_question(q.split(". ")[-1]).topic for q in questions}
    assert asked and asked <= qa_subjects
    assert not asked & {f.subject for f in rl}
    popular = max(rl, key=lambda f: f.exposures)
    assert popular.band == "popular" and popular.exposures == 30


def test_report_scores_each_band_against_the_most_common_value():
    facts = [
        _fact("A", "born_in", "X", "popular", 200),
        _fact("B", "born_in", "X", "middle", 50),
        _fact("C", "born_in", "Y", "long_tail", 3),
        _fact("D", "birth_year", "1950", "long_tail", 2),
    ]
    assert chance_rates(facts) == {"born_in": 2 / 3, "birth_year": 1.0}
    report = recall_report(facts, ["X", "Y", "Y", "1951"], epochs=1)
    assert report["bands"]["popular"]["recall"] == 1.0
    assert report["bands"]["middle"]["recall"] == 0.0
    assert report["bands"]["long_tail"] == {
        "facts": 2,
        "recall": 0.5,
        "chance": round((2 / 3 + 1.0) / 2, 4),
        "exposures_min": 2,
        "exposures_max": 3,
        "exposures_mean": 2.5,
    }
    assert report["by_exposures"]["101-1000"]["facts"] == 1
    assert recall_report(facts, ["X"] * 4, epochs=2)["by_exposures"]["4-10"]["facts"] == 2  # read twice


@pytest.mark.slow
def test_quick_probe_writes_bands_and_chance_rates(tmp_path):
    done = subprocess.run(
        [sys.executable, "benchmarks/knowledge_probe.py", "--quick", "--out", str(tmp_path), "--no-progress"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "quick.json").read_text())
    recall = result["rl_world_recall"]
    assert list(recall["bands"]) == list(BANDS)
    assert (
        sum(b["facts"] for b in recall["bands"].values()) == recall["overall"]["facts"] == result["rl_world"]["facts"]
    )
    for figures in recall["bands"].values():
        assert 0 <= figures["recall"] <= 1 and 0 < figures["chance"] < 1
    assert recall["bands"]["popular"]["exposures_min"] > recall["bands"]["long_tail"]["exposures_max"]
    assert set(result["pretraining_world_recall"]) == {"qa_seen", "qa_unseen"}
    assert result["corpus"]["qa_pairs"] > 0 and result["steps"] > 0
    assert "| popular |" in (tmp_path / "quick.md").read_text()


def test_bad_options_give_one_line_errors(capsys):
    from benchmarks.knowledge_probe import main

    with pytest.raises(SystemExit):
        main(["--phrasings", "9"])
    assert "--phrasings must be in 1..8" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--threads", "0"])
    assert "argument --threads: 0 is out of range: must be at least 1" in capsys.readouterr().err
