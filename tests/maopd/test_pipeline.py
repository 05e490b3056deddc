"""The main job at smoke size: every stage runs, every output is written, and a rerun resumes."""

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from maopd.base.config import ConfigError, save_yaml
from maopd.cli import main
from maopd.envs.synthwiki import load_default_world
from maopd.pipeline.config import (
    TEAM,
    load_experiment,
    load_preset,
    ptx_data_path,
    run_labels,
    stage_config,
    stage_settings,
)
from maopd.pipeline.job import held_out_manifest, pipeline_comparisons, ptx_rows
from maopd.pipeline.seeds import seed_config


def test_held_out_manifest_is_the_test_split_by_question_type():
    config = load_preset("smoke")
    entries = held_out_manifest(config)
    assert sorted({e.dataset for e in entries}) == ["1-hop", "2-hop", "3-hop", "comparison"]
    assert all(e.question.id.startswith("test-") for e in entries)
    dev = load_preset("smoke", ["eval.split=dev"])
    assert all(e.question.id.startswith("dev-") for e in held_out_manifest(dev))
    with pytest.raises(ValueError, match="eval.split"):  # at load time, before any training
        load_preset("smoke", ["eval.split=train"])


def test_held_out_manifest_takes_every_question_unless_told_a_number():
    every = held_out_manifest(load_preset("smoke", ["eval.questions_per_type=null"]))
    assert len(every) == 300 and len({e.question.id for e in every}) == 300
    some = held_out_manifest(load_preset("smoke", ["eval.questions_per_type=2"]))
    assert len(some) == 8 and {e.question.id for e in some} <= {e.question.id for e in every}
    with pytest.raises(ValueError, match="eval.questions_per_type"):
        load_preset("smoke", ["eval.questions_per_type=0"])


def test_ptx_stages_read_the_demonstrations_the_pipeline_writes(tmp_path):
    config = load_preset("smoke", [f"run_dir={tmp_path}", "stage1.ptx.coef=0.5", "stage2.ptx.coef=0"])
    stage1 = stage_config(config, "stage1", "full", tmp_path / "pi0", None)
    stage2 = stage_config(config, "stage2", "full", tmp_path / "pi0", tmp_path / "stage1")
    assert stage1.ptx.coef == 0.5 and stage1.ptx.data == str(ptx_data_path(config))
    assert stage2.ptx.coef == 0 and stage2.ptx.data is None


def test_ptx_source_picks_pi0s_demonstrations_or_its_pretraining_passages():
    pretraining = load_preset("smoke", ["ptx_source=pretraining", "base_model.pretrain_worlds=1"])
    rows = ptx_rows(pretraining)
    assert rows and all(set(row) == {"text"} for row in rows)
    assert ": " in rows[0]["text"]  # "title: text", the form π_0 was pretrained on
    with pytest.raises(ValueError, match="pretrain_worlds"):
        ptx_rows(load_preset("smoke", ["ptx_source=pretraining", "base_model.pretrain_worlds=0"]))
    with pytest.raises(ValueError, match="ptx_source"):
        load_preset("smoke", ["ptx_source=expert"])


def test_derived_presets_change_only_what_they_name_and_write_elsewhere():
    default = load_preset("default")
    quick, paper_beta = load_experiment("quick"), load_experiment("paper_beta")
    assert quick.run_dir != default.run_dir != paper_beta.run_dir  # never mixes with the main job's run
    assert quick.base_model == paper_beta.base_model == default.base_model  # the shipped π_0
    steps = [stage_settings(quick, stage)["steps"] for stage in ("stage1", "stage2", "single")]
    assert (*steps, quick.eval.questions_per_type) == (10, 10, 10, 10)
    beta = [
        stage_config(c, "stage2", "full", Path("<π_0>"), Path("<stage1>")).advantage.opd_beta
        for c in (default, paper_beta)
    ]
    assert beta[1] == 0.01 and beta[0] != 0.01


def test_pi0_per_seed_trains_each_seed_from_the_pi0_of_its_fine_tuning_seed(tmp_path):
    fixed, paired = load_preset("default", ["seed=2"]), load_preset("default", ["seed=2", "pi0_per_seed=true"])
    assert fixed.base_model.finetune_seed is None and fixed.pi0_for_seed(5) == fixed.base_model
    assert paired.base_model == replace(fixed.base_model, finetune_seed=2)
    five = seed_config(paired, 5)
    assert five.base_model == replace(fixed.base_model, finetune_seed=5) and five.seed == 5
    assert five.base_model.pretraining_key() == fixed.base_model.pretraining_key()  # one pretraining
    save_yaml(five, tmp_path / "seed_5.yaml")  # what run_seeds hands the seed's process
    assert load_preset(str(tmp_path / "seed_5.yaml")) == five
    with pytest.raises(ConfigError, match="base_model.finetune_seed: is 3, but pi0_per_seed"):
        load_preset("default", ["pi0_per_seed=true", "base_model.finetune_seed=3"])
    with pytest.raises(ConfigError, match="base_model.finetune_seed: is 2"):
        replace(paired, seed=5)  # a seed's π_0 follows its seed


def test_the_job_refuses_a_pi0_that_cannot_play_a_baseline_it_runs():
    with pytest.raises(ConfigError, match="add 'single'"):
        load_preset("smoke", ["base_model.workflows=[hierarchical,cascade]"])
    with pytest.raises(ConfigError, match="critic_demos"):
        load_preset("smoke", ["variants=[full,prompted_critic]"])
    assert (
        load_preset("smoke", ["variants=[full,prompted_critic]", "base_model.critic_demos=true"]).variants[1]
        == "prompted_critic"
    )


ORCHESTRA = "teams.orchestra.env={max_steps: 16, num_candidates: 1}"


def test_a_team_of_another_paper_trains_from_pi0_on_its_outcome_beside_the_papers_teams(tmp_path):
    config = load_preset("default", [f"run_dir={tmp_path}", ORCHESTRA, "stages.steps=7"])
    assert config.stage_runs()[-1] == (TEAM, "orchestra")
    team = stage_config(config, TEAM, "orchestra", Path("<π_0>"), None)
    assert (team.trained_workflow, team.stage, team.teacher.path) == ("orchestra", "stage1", None)
    assert (team.steps, team.env.max_steps, team.model.path) == (7, 16, "<π_0>")
    assert team.run_dir == str(tmp_path / "team_orchestra")
    # its rows are named by its declaration: untrained and trained, each compared as the paper's teams are
    assert ("Dr. MAS + RL", "Dr. MAS base") in pipeline_comparisons(config)
    assert ("MultiAgent-OPD", "Dr. MAS + RL") in pipeline_comparisons(config)
    assert run_labels(config)["team_orchestra"] == "Dr. MAS + RL"
    assert not any("Dr. MAS" in name for pair in pipeline_comparisons(load_preset("default")) for name in pair)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("teams.relay.steps=3", "teams.relay: not a registered workflow; choose from"),
        ("teams.hierarchical.steps=3", "teams.hierarchical: the job trains hierarchical already, as its stage2 stage"),
        ("teams.orchestra.workflow=cascade", "teams.orchestra.workflow: set by the pipeline"),
        ("teams.orchestra.rollout.group_size=0", "teams.orchestra.rollout.group_size"),
    ],
)
def test_a_team_entry_is_checked_with_the_job(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_preset("default", [override])


def test_unknown_preset_is_named():
    with pytest.raises(ValueError, match="known presets"):
        load_preset("no-such-preset")


@pytest.mark.slow
def test_smoke_pipeline_end_to_end(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["train", "--preset", "smoke", "--run-dir", str(run_dir)]) == 0
    report = json.loads((run_dir / "pipeline.json").read_text())
    assert set(report["seconds"]) >= {"base_model", "stage1", "stage2_full", "single", "team_orchestra", "evaluation"}
    summary = json.loads((run_dir / "eval" / "summary.json").read_text())
    assert set(summary["methods"]) == {
        "C-MAS base",
        "H-MAS base",
        "C-MAS + RL",
        "MultiAgent-OPD",
        "Single agent base",
        "Search-R1 (single agent + RL)",
        "Dr. MAS base",
        "Dr. MAS + RL",
    }
    assert (run_dir / "single" / "plots" / "learning_curves.png").is_file()
    assert (run_dir / "team_orchestra" / "plots" / "learning_curves.png").is_file()
    for name in ("tables.md", "cost_accuracy.png", "viewer.html", "records.jsonl"):
        assert (run_dir / "eval" / name).is_file()
    assert (run_dir / "stage1" / "plots" / "learning_curves.png").is_file()
    assert (
        run_dir / "ptx_data.jsonl"
    ).is_file()  # the smoke preset exercises PPO-ptx (an option; the default has none)
    assert "loss/ptx" in json.loads((run_dir / "stage1" / "metrics.jsonl").read_text().splitlines()[-1])
    records = (run_dir / "eval" / "records.jsonl").read_text().splitlines()
    # a rerun resumes: no stage retrains, no record is run twice
    assert main(["train", "--preset", "smoke", "--run-dir", str(run_dir)]) == 0
    assert (run_dir / "eval" / "records.jsonl").read_text().splitlines() == records
    # the dev-split tools read a finished run: systems on dev, and the OPD β calibration
    dev = tmp_path / "dev"
    assert (
        main(
            [
                "tune",
                "eval",
                "--preset",
                "smoke",
                "--out",
                str(dev),
                "--questions-per-type",
                "1",
                "--attempts",
                "1",
                "--system",
                f"C-MAS base=cascade:{run_dir / 'stage1'}",
                "--system",
                f"H=hierarchical:{run_dir / 'stage2_full'}",
                "--compare",
                "H,C-MAS base",
            ]
        )
        == 0
    )
    figures = json.loads((dev / "dev_eval.json").read_text())
    assert figures["split"] == "dev" and figures["questions"] == 4 and figures["command"].startswith("maopd tune eval")
    assert set(figures["systems"]["H"]) >= {
        "searching_share",
        "searches_per_workflow",
        "no_answer_share",
        "em_by_search",
        "avg@1",
    }
    dev_ids = {q.id for q in load_default_world().splits["dev"]}
    assert {json.loads(line)["question_id"] for line in (dev / "records.jsonl").read_text().splitlines()} <= dev_ids
    calibration = tmp_path / "beta.json"
    assert (
        main(
            [
                "tune",
                "beta",
                "--preset",
                "smoke",
                "--run-dir",
                str(run_dir),
                "--batches",
                "1",
                "--out",
                str(calibration),
            ]
        )
        == 0
    )
    assert json.loads(calibration.read_text())["paper_beta"] == 0.01


def _stage1_trained_under(config, record: str | None) -> None:
    """``<run_dir>/stage1`` with a checkpoint, and ``record`` as its config.yaml (None: none)."""
    stage1 = Path(config.run_dir) / "stage1"
    (stage1 / "checkpoints" / "step_2").mkdir(parents=True)
    (stage1 / "metrics.jsonl").write_text('{"step": 1}\n')
    if record is not None:
        (stage1 / "config.yaml").write_text(record)


@pytest.mark.parametrize(
    "record, reason",
    [
        (None, "config.yaml: missing"),
        ("optim: [lr: 1\n", "config.yaml: unreadable"),
        ("- a list\n", "config.yaml: holds no mapping"),
    ],
    ids=["deleted", "not YAML", "not a mapping"],
)
def test_a_stage_whose_config_record_is_gone_never_passes_the_check(tmp_path, record, reason):
    from maopd.pipeline.resume import check_run_dir

    config = load_preset("smoke", [f"run_dir={tmp_path}", "stage1.optim.lr=0.5"])
    _stage1_trained_under(config, record)
    with pytest.raises(ConfigError, match=f"stage1.{reason}.*cannot be checked against this config"):
        check_run_dir(config, tmp_path / "pi0")
    assert check_run_dir(config, tmp_path / "pi0", fresh=True) == [tmp_path / "stage1"]


@pytest.mark.parametrize(
    "pipeline_record",
    ["eval: 5\nbase_model: {}\n", "run_dir: [\n", "base_model: {}\n"],
    ids=["damaged", "not YAML", "no eval"],
)
def test_evaluation_records_whose_settings_the_pipeline_record_lacks_are_a_conflict(tmp_path, pipeline_record):
    from maopd.pipeline.resume import check_run_dir

    config = load_preset("smoke", [f"run_dir={tmp_path}"])
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "records.jsonl").write_text("")
    (tmp_path / "pipeline.yaml").write_text(pipeline_record)
    with pytest.raises(ConfigError, match="eval: not recorded in .*pipeline.yaml, so the evaluation cannot be checked"):
        check_run_dir(config, tmp_path / "pi0")
    assert check_run_dir(config, tmp_path / "pi0", fresh=True) == [tmp_path / "eval"]


def test_a_stage_directory_that_holds_only_its_lock_is_not_trained_yet(tmp_path):
    from maopd.base.run_dir import LOCK_FILE
    from maopd.pipeline.resume import check_run_dir

    config = load_preset("smoke", [f"run_dir={tmp_path}"])
    (tmp_path / "stage1").mkdir()
    (tmp_path / "stage1" / LOCK_FILE).write_text("12345\n")  # left by a killed job
    assert check_run_dir(config, tmp_path / "pi0") == []
