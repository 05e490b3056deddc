"""The pre-registration holds: the testbed it fixed is the testbed the code builds, its runs
resolve to valid configs, and claims whose gates failed are marked not tested."""

import json
from pathlib import Path

import pytest

from maopd.envs.synthwiki.popularity import BANDS
from maopd.pipeline.config import VARIANT_METHODS
from maopd.study import preregistration
from maopd.study.preregistration import CLAIMS, GATE_GROUPS, PLAN, claim_status, registered_pi0s, report_configs

ROOT = Path(__file__).resolve().parents[2]
REGISTERED = ROOT / "benchmarks" / "results" / "preregistration" / "preregistration.json"


def _row(gate, verdict):
    return {"gate": gate, "check": "", "value": "", "threshold": "", "verdict": verdict, "note": ""}


def test_a_claim_is_not_tested_when_a_gate_it_needs_was_not_met():
    level_only = next(c for c in CLAIMS if c.needs == ("level",))
    knowledge = next(c for c in CLAIMS if "knowledge" in c.needs)
    judge = next(c for c in CLAIMS if "judge" in c.needs)
    all_met = [_row(gate, "met") for group in GATE_GROUPS.values() for gate in group]
    assert {claim_status(c, all_met) for c in CLAIMS} == {"open"}
    judge_fails = [*all_met, _row("judge", "not met"), _row("judge", "description")]
    assert claim_status(judge, judge_fails) == "not tested"
    assert claim_status(level_only, judge_fails) == claim_status(knowledge, judge_fails) == "open"
    unmeasured = [*all_met, _row("recall after pretraining", "not measured")]
    assert claim_status(knowledge, unmeasured) == "not tested" and claim_status(level_only, unmeasured) == "open"


def test_the_registered_runs_resolve_to_valid_configs_of_the_planned_lengths():
    configs = report_configs()
    assert list(configs) == [name for name, _ in PLAN.parts]
    for (_, variants), config in zip(PLAN.parts, configs.values(), strict=True):
        assert config["stage2"]["steps"] == PLAN.stage2.steps >= 120
        assert config["single"]["steps"] == PLAN.single.steps
        assert config["eval"]["attempts"] == PLAN.attempts
        assert config["variants"] == list(variants) and config["pi0_per_seed"]
    every_variant = configs[PLAN.parts[-1][0]]["variants"]
    assert set(every_variant) == set(VARIANT_METHODS)
    for (_, earlier), (_, later) in zip(PLAN.parts, PLAN.parts[1:]):
        assert later[: len(earlier)] == earlier  # a part only adds variants: it resumes the earlier ones
    assert len(PLAN.seeds) >= 3


def test_each_seed_trains_from_its_own_pi0_of_the_recipe():
    pi0s = registered_pi0s()
    assert [seed for seed, _ in pi0s] == list(PLAN.seeds)
    assert [config.finetuning_seed for _, config in pi0s] == list(PLAN.seeds)
    assert len({config.key() for _, config in pi0s}) == len(pi0s)
    assert len({config.pretraining_key() for _, config in pi0s}) == 1  # one pretraining, fine-tuned per seed


@pytest.mark.slow
def test_the_testbed_is_the_one_registered():
    """A changed world, test split, environment, prompt, π_0 or pre-registered config after the
    pre-registration is a new testbed version: register it anew (maopd preregister) and log why."""
    if not REGISTERED.is_file():
        pytest.skip("the testbed is not pre-registered yet: its gates are not all met (testbed_gates/README.md)")
    registered = json.loads(REGISTERED.read_text(encoding="utf-8"))
    now = preregistration.testbed_components()  # imported by module: pytest would collect test*
    changed = sorted(key for key in now if now[key] != registered["testbed"].get(key))
    assert not changed, f"the testbed changed after its pre-registration: {changed}"


def test_the_registered_commands_parse():
    import shlex

    from maopd.cli import build_parser

    for command in PLAN.commands():
        args = build_parser().parse_args(shlex.split(command)[1:])
        assert args.seeds == list(PLAN.seeds)
        assert f"stage2.steps={PLAN.stage2.steps}" in args.overrides
    for command in (PLAN.save_command(), PLAN.build_command()):
        assert build_parser().parse_args(shlex.split(command)[1:]).func


def test_the_readme_shows_every_claim_with_its_status_and_the_commands(monkeypatch):
    components = {
        "world": {
            "seed": 0,
            "size": "small",
            "format_version": 3,
            "test_split_version": 3,
            "test_split_sha256": "a" * 64,
        },
        "environments": ["maopd.envs.cascade_search_v1"],
        "prompts_sha256": "b" * 64,
        "pi0": [{"training_seed": 0, "key": "k", "weights_sha256": "c" * 64}],
        "configs_sha256": "d" * 64,
    }
    monkeypatch.setattr(preregistration, "testbed_components", lambda plan: components)
    monkeypatch.setattr(preregistration, "band_shares", lambda: {"dev": {"all": dict.fromkeys(BANDS, 1 / 3)}})
    rows = [_row("judge", "not met"), _row("level", "met")]
    gates = {"verdict": "not all met", "rows": rows, "command": "c", "commit": "abc", "config_key": "k"}
    record = preregistration.preregistration(gates, "abc1234")
    text = preregistration.markdown(record)
    assert record["testbed_hash"] == preregistration.testbed_hash(components)
    for claim in record["claims"]:
        assert f"| {claim['name']} |" in text and claim["status"] in ("open", "not tested")
    assert {c["name"]: c["status"] for c in record["claims"]}["vs_prompted_critic"] == "not tested"
    assert all(command in text for command in [*PLAN.commands(), PLAN.save_command(), PLAN.build_command()])


def test_gates_of_other_models_than_the_registered_seeds_are_refused(monkeypatch):
    from maopd.base.config import ConfigError

    pi0 = [{"training_seed": 0, "key": "a"}, {"training_seed": 1, "key": "b"}]
    monkeypatch.setattr(preregistration, "testbed_components", lambda plan: {"pi0": pi0})
    with pytest.raises(ConfigError, match="measured on π_0 other"):
        preregistration.preregistration({"rows": [], "config_key": "other"}, "abc1234")
    recipe = {"rows": [], "builds": [{"config_key": "a"}, {"config_key": "c"}]}
    with pytest.raises(ConfigError, match="measured on π_0 a, c, the registered seeds train from a, b"):
        preregistration.preregistration(recipe, "abc1234")
