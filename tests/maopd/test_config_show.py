"""``maopd config show``: the resolved config, and for ``--explain KEY`` the layer that set a value,
for a key set in each layer in turn."""

from __future__ import annotations

import pytest

from maopd.base.config import dump_yaml, parse_yaml, read_yaml_mapping
from maopd.cli import main
from maopd.pipeline.config import load_experiment, preset_file, stage_config, stage_dir
from maopd.pipeline.layers import DERIVED, matching, resolve
from maopd.training.base_model import base_model_dir


def layer_of(key: str, preset: str = "smoke", overrides: list[str] | None = None) -> str:
    (setting,) = matching(resolve(preset, overrides), key)
    return setting.layer


@pytest.fixture
def unset_steps(tmp_path):
    """The smoke preset without its ``stages.steps``, so that the default shows."""
    data = read_yaml_mapping(preset_file("smoke"))
    del data["stages"]["steps"]
    path = tmp_path / "no_steps.yaml"
    path.write_text(dump_yaml(data))
    return str(path)


def test_one_key_named_in_each_layer_that_sets_it(unset_steps):
    assert layer_of("stage1.steps", unset_steps) == "default"
    assert layer_of("stage1.steps", "smoke") == "preset smoke (pipeline_smoke.yaml): stages"
    assert layer_of("stage1.steps", "quick") == "experiment quick: stages"
    assert layer_of("stage1.steps", "quick", ["steps=3"]) == "command line: stages"
    assert layer_of("stage1.steps", "quick", ["stage1.steps=4"]) == "command line: stage1"


def test_stage_variant_and_pipeline_layers_are_named():
    assert layer_of("stage1.env.max_steps", "default") == "stage settings of stage1"
    overrides = ["variants=[full,outcome_searcher_rl]"]
    assert layer_of("stage2_outcome_searcher_rl.advantage.searcher_signal", "smoke", overrides) == (
        "variant settings of outcome_searcher_rl"
    )
    assert layer_of("stage2_full.advantage.searcher_signal", "smoke", overrides) == "stage settings of stage2"
    assert layer_of("single.seed", "smoke", ["seed=5"]) == "the pipeline"
    assert layer_of("seed", "smoke", ["seed=5"]) == "command line"
    assert layer_of("eval.split") == "default"
    assert layer_of("eval.attempts") == "preset smoke (pipeline_smoke.yaml)"
    assert layer_of("eval.attempts", "quick") == "experiment quick"


def test_a_derived_value_is_not_pinned_on_a_layer():
    assert layer_of("base_model.finetune_seed", "smoke", ["pi0_per_seed=true", "seed=3"]) == DERIVED


def test_the_values_are_those_the_job_runs_with():
    settings = {s.key: s.value for s in resolve("smoke", ["steps=3", "stage2.env.max_steps=7"])}
    config = load_experiment("smoke", ["steps=3", "stage2.env.max_steps=7"])
    teacher = stage_dir(config, "stage1", "full")
    stage2 = stage_config(config, "stage2", "full", base_model_dir(config.base_model), teacher)
    assert settings["stage2_full.env.max_steps"] == stage2.env.max_steps == 7
    assert settings["stage1.steps"] == settings["stage2_full.steps"] == settings["single.steps"] == 3
    assert settings["eval.attempts"] == config.eval.attempts


def test_the_command_prints_the_config_and_explains_a_key(capsys):
    assert main(["config", "show", "--preset", "smoke"]) == 0
    shown = parse_yaml(capsys.readouterr().out, "the output")
    assert shown["run_dir"] == "runs/smoke" and shown["stage2_full"]["env"]["num_searchers"] == 2
    assert main(["config", "show", "--preset", "smoke", "--explain", "stages.steps"]) == 0
    out = capsys.readouterr().out
    assert out.count("[set by: preset smoke (pipeline_smoke.yaml): stages]") == 4 and "help: " in out  # 4 runs
    assert shown["team_orchestra"]["workflow"] == "orchestra" and shown["team_orchestra"]["env"]["max_steps"] == 16
    assert main(["config", "show", "--preset", "smoke", "--explain", "teams.orchestra.env.max_steps"]) == 0
    assert capsys.readouterr().out.startswith(
        "team_orchestra.env.max_steps: 16    [set by: preset smoke (pipeline_smoke.yaml): teams.orchestra]"
    )
    assert main(["config", "show", "--explain", "no.such.key"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no such setting" in err
