"""One typed config tree: every preset loads in one (nested) YAML dialect, every config error is a
ConfigError naming its full dotted path and is raised when the config loads, before anything is
written; a run directory's stages resume only under the config that made them."""

from pathlib import Path

import pytest
import yaml

from maopd.base.config import ConfigError, save_yaml, to_dict
from maopd.base.run_dir import changes_since
from maopd.cli import main
from maopd.pipeline.config import PIPELINE_KEYS, PRESET_DIR, STAGES, load_preset, stage_config, stage_settings
from maopd.pipeline.resume import check_run_dir
from maopd.training.config import STAGE_SETTINGS, TrainConfig, load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _keys(data):
    for key, value in data.items():
        yield key
        if isinstance(value, dict):
            yield from _keys(value)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_file_loads_in_the_nested_dialect(path):
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert not [key for key in _keys(data) if "." in str(key)]  # files nest; dotted paths are for overrides
    if path.name.startswith("pipeline_"):
        config = load_preset(str(path))
        for stage, variant in config.stage_runs():
            stage_config(config, stage, variant, Path("pi0"), Path("stage1") if stage == "stage2" else None)
    else:
        assert isinstance(load_config(path), TrainConfig)


def test_a_dotted_key_in_a_file_is_refused_with_the_nested_form(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("stage1:\n  rollout.batch_size: 4\n")
    with pytest.raises(ConfigError, match=r"stage1\.rollout\.batch_size: unknown key; config files nest"):
        load_preset(str(preset))


def test_a_stage_setting_on_the_command_line_applies_to_every_stage_and_in_a_file_is_named_where_it_goes(tmp_path):
    # a stage-only key that needs nothing installed (rollout.engine=vllm would need the vLLM venv)
    config = load_preset("smoke", ["rollout.temperature=0.5", "steps=3", "seed=7"])
    assert config.stages["rollout"]["temperature"] == 0.5 and config.stages["steps"] == 3
    assert config.seed == 7  # the pipeline's own key stays the pipeline's
    preset = tmp_path / "p.yaml"
    preset.write_text("rollout:\n  engine: vllm\n")
    with pytest.raises(ConfigError, match=r"rollout: unknown key; a stage setting: stages\.rollout\.… for every stage"):
        load_preset(str(preset))


BAD_OVERRIDES = [
    ("stage1.steps=abc", "stage1.steps: expected an integer"),
    ("stage1.stepz=1", "stage1.stepz: unknown key"),
    ("stage2.rollout.batchsize=2", "stage2.rollout.batchsize: unknown key"),
    ("stage1.optim.lr=.nan", "stage1.optim.lr: expected a finite number"),
    ("stage2.optim.lr=.inf", "stage2.optim.lr: expected a finite number"),
    ("stage1.optim.lr=0", "stage1.optim.lr: must be > 0"),
    ("stage1.rollout.batch_size=0", r"stage1.rollout.batch_size: must be in \[1, 65536\]"),
    ("stages.rollout.batch_size=0", r"stages.rollout.batch_size: must be in \[1, 65536\]"),
    ("stages.stepz=1", "stages.stepz: unknown key"),
    ("rollout.engin=vllm", "stages.rollout.engin: unknown key; did you mean 'engine'"),
    ("stages.seed=3", "stages.seed: set by the pipeline"),
    ("stage2.rollout.top_p=1.5", "stage2.rollout.top_p: must be in"),
    ("stage2.env.max_steps=2", "stage2.env.max_steps: must be at least 5"),
    ("stage2.env.retriever.kind=bogus", "stage2.env.retriever.kind: unknown kind"),
    ("stage2.distributed.cpu_offload=true", "stage2.distributed.cpu_offload: needs distributed.fsdp"),
    ("stage2.ppo.role_loss_weights={critic: 0}", "stage2.ppo.role_loss_weights.critic: unknown role"),
    ("stage1.model.path=/some/model", "stage1.model.path: set by the pipeline.*base_model"),
    ("stage2.teacher.path=/some/run", "stage2.teacher.path: set by the pipeline"),
    ("stage1.seed=3", "stage1.seed: set by the pipeline"),
    ("stage2.variant=prompted_critic", "stage2.variant: set by the pipeline"),
    ("stage1.run_dir=elsewhere", "stage1.run_dir: set by the pipeline"),
    ("variants=[../../escape]", r"variants\[0\]: '../../escape' is not a variant"),
    ("variants=[full, full]", r"variants\[1\]: 'full' is listed twice"),
    ("eval.top_p=0", "eval.top_p: must be in"),
    ("eval.attempts=0", "eval.attempts: must be >= 1"),
    ("base_model.noise=2", "base_model.noise: must be a probability"),
    ("base_model.lr=.nan", "base_model.lr: expected a finite number"),
    ("stage1.optim.betas=[2, 3]", r"stage1.optim.betas: must be two numbers in \[0, 1\)"),
    ("stage1.optim.betas=[0.9]", r"stage1.optim.betas: must be two numbers in \[0, 1\)"),
    ("stage2.ppo.role_loss_weights={searcher: -1}", "stage2.ppo.role_loss_weights.searcher: must be >= 0"),
    ("seed=-1", r"^seed: must be a seed in \[0, 4294967295\], got -1$"),
    ("seed=4294967296", r"^seed: must be a seed in \[0, 4294967295\]"),
    ("eval.seed=-4", r"^eval.seed: must be a seed"),
    ("stage1.steps=1:30", "stage1.steps: expected an integer, got '1:30'"),  # YAML 1.1 read 1:30 as 90
    ("run_dir=''", "run_dir: is empty"),
]


@pytest.mark.parametrize("override, message", BAD_OVERRIDES, ids=[o for o, _ in BAD_OVERRIDES])
def test_a_bad_pipeline_key_is_refused_at_load_with_its_full_dotted_path(override, message):
    with pytest.raises(ConfigError, match=message):
        load_preset("smoke", [override])


def test_every_key_the_pipeline_sets_is_refused_in_a_stage_section():
    values = {
        "stage": "stage2",
        "variant": "full",
        "seed": "1",
        "model.tiny": "{hidden_size: 8}",
        "model.tiny_vocab_size": "8",
    }
    for key in PIPELINE_KEYS:
        for stage in ("stage1", "stage2"):
            with pytest.raises(ConfigError, match=f"{stage}.{key}: set by the pipeline"):
                load_preset("smoke", [f"{stage}.{key}={values.get(key, 'x')}"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["stage1.steps=abc"], "stage1.steps: expected an integer"),
        (["stage1.optim.lr=.nan"], "stage1.optim.lr: expected a finite number"),
        (["variants=[../../escape]"], "variants[0]"),
        (["stage1.model.path=/some/model"], "stage1.model.path: set by the pipeline"),
    ],
)
def test_the_cli_refuses_in_one_line_with_exit_2_and_writes_nothing(tmp_path, capsys, argv, message):
    run_dir = tmp_path / "run"
    assert main(["train", "--preset", "smoke", "--run-dir", str(run_dir), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("maopd train: ") and message in err and err.count("\n") == 1
    assert "Traceback" not in err and not run_dir.exists()


def test_an_empty_preset_and_an_empty_run_dir_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    assert main(["train", "--preset", str(empty), "--run-dir", str(tmp_path / "run")]) == 2
    assert "is empty" in capsys.readouterr().err
    assert main(["train", "--preset", "smoke", "--run-dir", ""]) == 2
    assert "run_dir: is empty" in capsys.readouterr().err
    assert main(["train", "--config", str(CONFIGS / "tiny_cpu_stage1.yaml"), "--run-dir", ""]) == 2
    assert "run_dir: is empty" in capsys.readouterr().err
    assert main(["train", "--config", str(CONFIGS / "tiny_cpu_stage1.yaml"), "optim.lr=.nan"]) == 2
    assert "optim.lr: expected a finite number" in capsys.readouterr().err
    assert main(["train", "--preset", "smoke", "--resume", "--run-dir", str(tmp_path / "run")]) == 2
    assert "--resume applies to one stage" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [empty]


# ------------------------------------------------------------------ a stage resumes only under its config


def _made_run(run_dir: Path, overrides=(), base_model=Path("/pi0")):
    """A run directory as the pipeline leaves it (configs and a records file; no weights needed)."""
    config = load_preset("smoke", [f"run_dir={run_dir}", *overrides])
    run_dir.mkdir(parents=True)
    save_yaml(config, run_dir / "pipeline.yaml")
    for stage, variant in config.stage_runs():
        teacher = run_dir / "stage1" if stage == "stage2" else None
        train = stage_config(config, stage, variant, base_model, teacher)
        Path(train.run_dir).mkdir()
        save_yaml(train, Path(train.run_dir) / "config.yaml")
    (run_dir / "ptx_data.jsonl").write_text("{}\n")
    (run_dir / "eval").mkdir()
    (run_dir / "eval" / "records.jsonl").write_text("{}\n")
    return config


@pytest.mark.slow
def test_a_run_dir_resumes_only_under_the_config_that_made_it(tmp_path):
    run = tmp_path / "run"
    _made_run(run)
    pi0 = Path("/pi0")
    assert check_run_dir(load_preset("smoke", [f"run_dir={run}"]), pi0) == []
    with pytest.raises(ConfigError) as refused:
        check_run_dir(load_preset("smoke", [f"run_dir={run}", "seed=1", "stage1.steps=1"]), pi0)
    message = str(refused.value)
    assert "stage1.seed: 0 -> 1" in message and "stage1.steps: 2 -> 1" in message and "--fresh" in message
    with pytest.raises(ConfigError, match=r"eval\.attempts: 2 -> 3"):
        check_run_dir(load_preset("smoke", [f"run_dir={run}", "eval.attempts=3"]), pi0)
    with pytest.raises(ConfigError, match=r"stage1\.model\.path"):  # another π_0
        check_run_dir(load_preset("smoke", [f"run_dir={run}"]), Path("/other_pi0"))
    # identity is per stage: adding variants to a finished run (maopd experiment table3) is fine
    assert check_run_dir(load_preset("smoke", [f"run_dir={run}", "variants=[full, outcome_searcher_rl]"]), pi0) == []
    # a Stage II change restarts Stage II and the evaluation, not Stage I
    stale = check_run_dir(load_preset("smoke", [f"run_dir={run}", "stage2.optim.lr=0.1"]), pi0, fresh=True)
    assert stale == [run / "stage2_full", run / "eval"]
    # a Stage I change restarts everything trained after it
    stale = check_run_dir(load_preset("smoke", [f"run_dir={run}", "stage1.optim.lr=0.1"]), pi0, fresh=True)
    assert stale == [run / "stage1", run / "stage2_full", run / "eval"]


def test_a_copied_run_dir_resumes_where_it_was_copied(tmp_path):
    import shutil

    _made_run(tmp_path / "run")
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    assert check_run_dir(load_preset("smoke", [f"run_dir={tmp_path / 'copy'}"]), Path("/pi0")) == []


def test_the_cli_refuses_a_changed_config_and_writes_nothing(tmp_path, capsys):
    from maopd.training.base_model import base_model_dir

    run = tmp_path / "run"
    config = _made_run(run, base_model=base_model_dir(load_preset("smoke").base_model))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["train", "--preset", "smoke", "--run-dir", str(run), "seed=1", "stage1.steps=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("maopd train: ") and "stage1.seed: 0 -> 1" in err and "stage1.steps: 2 -> 1" in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert config.seed == 0


def test_one_stage_resumes_only_under_its_config(tmp_path):
    config = load_config(CONFIGS / "tiny_cpu_stage1.yaml", [f"run_dir={tmp_path}"])
    save_yaml(config, tmp_path / "config.yaml")
    same = load_config(CONFIGS / "tiny_cpu_stage1.yaml", [f"run_dir={tmp_path}", "steps=9", "logging.progress=false"])
    assert changes_since(same, tmp_path) == []  # running longer or reporting differently is the same run
    other = load_config(CONFIGS / "tiny_cpu_stage1.yaml", [f"run_dir={tmp_path}", "optim.lr=0.5", "seed=2"])
    assert changes_since(other, tmp_path) == ["optim.lr: 0.0001 -> 0.5", "seed: 0 -> 2"]


# ------------------------------------------------------------------ one of each


def test_opd_config_reaches_every_section():
    from maopd.training.algorithm import SECTIONS, OPDConfig

    config = (
        OPDConfig()
        .environment(stage="stage1", num_candidates=3)
        .rollouts(batch_size=2)
        .training(lr=0.01, steps=4)
        .model(dtype="bfloat16")
        .teacher(source="none")
        .ptx(coef=0.5, data="d.jsonl")
        .distributed(timeout_s=60)
        .checkpointing(every=2)
        .reporting(progress=False)
        .to_train_config()
    )
    assert (config.env.num_candidates, config.rollout.batch_size, config.optim.lr, config.steps) == (3, 2, 0.01, 4)
    assert (config.model.dtype, config.ptx.coef, config.ptx.data, config.distributed.timeout_s) == (
        "bfloat16",
        0.5,
        "d.jsonl",
        60,
    )
    assert set(SECTIONS) == {name for name, value in to_dict(config).items() if isinstance(value, dict)}
    with pytest.raises(ConfigError, match="ptx.coef: must be >= 0"):
        OPDConfig().environment(stage="stage1").ptx(coef=-1).to_train_config()
    with pytest.raises(ConfigError, match="lrr: not a field of .*; did you mean 'lr'"):
        OPDConfig().training(lrr=0.1)


def test_defaults_are_written_once():
    from maopd.agents.openai_policy import OpenAIPolicyConfig
    from maopd.agents.sampling import SamplingConfig
    from maopd.cli import build_parser
    from maopd.envs.cascade_search_v1 import raw_env as cascade
    from maopd.envs.hierarchical_search_v1 import raw_env as hierarchy
    from maopd.pipeline.config import EvalConfig

    run = build_parser().parse_args(["eval", "run", "--manifest", "m.json", "--out", "x.jsonl"])
    assert EvalConfig().temperature == SamplingConfig().temperature == run.temperature == 0.6
    assert EvalConfig().top_p == SamplingConfig().top_p == run.top_p == 0.95
    openai = OpenAIPolicyConfig(base_url="http://127.0.0.1:8000/v1", model="m")
    assert (openai.temperature, openai.top_p) == (0.6, 0.95)
    assert STAGE_SETTINGS["stage1"]["env.max_steps"] == cascade.default_max_steps == 5
    assert STAGE_SETTINGS["stage2"]["env.max_steps"] == hierarchy.default_max_steps == 12


def test_a_field_added_since_a_run_was_saved_is_not_a_change(tmp_path):
    """A run directory resumes when its saved config lacks a field: the field reads as its default."""
    from maopd.training.config import build_config

    config = build_config({"stage": "stage1", "run_dir": str(tmp_path)})
    saved = to_dict(config)
    del saved["advantage"]["zero_rl"], saved["env"]["force_finish"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert changes_since(config, tmp_path) == []
    saved["advantage"]["opd_beta"] = 0.5
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert changes_since(config, tmp_path) == ["advantage.opd_beta: 0.5 -> 0.01"]


@pytest.mark.parametrize("preset", ["default", "smoke"])
def test_the_stage_sections_of_a_preset_state_only_what_their_stage_changes(preset):
    """A stage section never restates a value of the shared stages section, and (in the default
    preset) no key is set by two stage sections."""
    data = yaml.safe_load((PRESET_DIR / f"pipeline_{preset}.yaml").read_text(encoding="utf-8"))

    def leaves(section, prefix=""):
        for key, value in section.items():
            if isinstance(value, dict) and value:
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    shared = dict(leaves(data["stages"]))
    for stage in STAGES:
        restated = [key for key, value in leaves(data[stage]) if key in shared and shared[key] == value]
        assert not restated, f"{stage} restates {restated} of stages"
    if preset == "default":
        stage_keys = [dict(leaves(data[stage])).keys() for stage in STAGES]
        assert not any(a & b for i, a in enumerate(stage_keys) for b in stage_keys[i + 1 :])
    config = load_preset(preset)
    for stage in STAGES:
        settings = stage_settings(config, stage)
        for dotted, value in STAGE_SETTINGS[stage].items():
            node = settings
            for part in dotted.split("."):
                node = node.get(part, {}) if isinstance(node, dict) else {}
            assert node != value, f"{stage} repeats STAGE_SETTINGS' {dotted}"
