"""The main job's config: ``PipelineConfig``, its presets and experiments, and the ``TrainConfig`` of
each stage run.

The whole config is checked when it loads, before any work: every key of the stage sections
against ``TrainConfig``'s tree, types, ranges and the variants' names.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maopd.agents.vllm_policy import VLLM_HEAD_SIZES
from maopd.base.config import (
    ConfigError,
    check_fields,
    check_partial,
    checked,
    field_like,
    load_yaml,
    seed_field,
    set_dotted,
)
from maopd.base.limits import BATCH
from maopd.base.paths import package_data
from maopd.envs.policy import SamplingSettings
from maopd.training.base_model import SFTConfig

PRESET_DIR = package_data("configs")
DEFAULT_PRESET = "default"  # configs/pipeline_default.yaml: what `maopd train` runs, and what experiments start from
PTX_SOURCES = ("demonstrations", "pretraining")
VARIANT_METHODS = {
    "full": "MultiAgent-OPD",
    "outcome_searcher_rl": "w/ outcome-based Searcher RL",
    "base_model_teacher": "w/ base-model teacher",
    "no_searcher_supervision": "w/o direct Searcher supervision",
    "prompted_critic": "Prompted Critic",
}
STAGES = ("stage1", "stage2", "single")
# A run of one of ``teams``: Stage I's layer (outcome GRPO, no Teacher) on the team's workflow.
TEAM = "team"
SINGLE_AGENT_RL = "Search-R1 (single agent + RL)"
# Keys of a stage's TrainConfig that the pipeline sets itself, so a stage section may not set them.
_PI0 = (
    "π_0 comes from base_model (set base_model.* to change it); to train one stage from a model of "
    "your own, use `maopd train --config FILE model.path=DIR`"
)
PIPELINE_KEYS = {
    "stage": "the pipeline runs stage1 as Stage I, stage2 as Stage II and single as the single-agent baseline",
    "variant": "Stage II's variants are the top-level `variants` list",
    "seed": "every stage takes the top-level `seed`",
    "run_dir": "each stage writes under the top-level run_dir (<run_dir>/stage1, <run_dir>/stage2_<variant>, "
    "<run_dir>/single)",
    "model.path": _PI0,
    "model.tiny": _PI0,
    "model.tiny_vocab_size": _PI0,
    "teacher.path": "Stage II's Teacher is Stage I's last checkpoint (<run_dir>/stage1)",
    "workflow": "each stage trains its own workflow; another team is trained as an entry of the top-level `teams`",
}


@dataclass
class EvalConfig:
    split: str = checked(
        "test",
        choices=("dev", "test"),
        help="The held-out split evaluated: test, or dev to tune settings (never tune on test).",
    )
    questions_per_type: int | None = checked(
        None,
        ge=1,
        null="every question of the split",
        help="Questions of each question type (the 'datasets' of the macro average), sampled with the manifest seed.",
    )
    attempts: int = checked(4, ge=1, help="Independent attempts (workflows) per question; the paper's k is 4.")
    temperature: float = field_like(SamplingSettings, "temperature")
    top_p: float = field_like(SamplingSettings, "top_p")
    max_new_tokens: int = field_like(SamplingSettings, "max_new_tokens", 64)
    batch_size: int = checked(32, ge=1, **BATCH.constraint(), help="Attempts played at once.")
    seed: int = seed_field(
        help="Seeds the evaluation's sampling: every attempt gets its own seed from it, the question and the "
        "attempt number."
    )

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class PipelineConfig:
    """The main job. ``stages`` is a partial ``TrainConfig`` (nested mappings, any subset of its
    fields) that every stage run shares; ``stage1`` / ``stage2`` / ``single`` are partial
    ``TrainConfig``s laid over it, stating only what their stage does differently. Both are applied
    over the stage and variant layers of ``maopd.training.config``; every key and value is checked when
    the config is built. π_0, the Teacher, the seed and the run
    directories are the pipeline's (``PIPELINE_KEYS``): a stage section setting one is refused."""

    seed: int = seed_field(help="The seed of every stage run.")
    run_dir: str = checked(
        "runs/main",
        help="The directory the job writes: every stage run under it (stage1, stage2_<variant>, single), the "
        "evaluation records (eval/) and the job's results (pipeline.json).",
    )
    base_model: SFTConfig = checked(default_factory=SFTConfig, help="π_0, the base model every system starts from.")
    pi0_per_seed: bool = checked(
        False,
        help="true: each training seed s trains from its own π_0, base_model fine-tuned with finetune_seed s (a "
        "testbed read as its recipe over fine-tuning seeds), so the seed-level interval carries π_0's "
        "build-to-build spread as well as RL's.",
    )
    stages: dict[str, Any] = checked(
        default_factory=dict,
        help="A partial TrainConfig (nested mappings, any subset of its fields) that every stage run shares.",
    )
    stage1: dict[str, Any] = checked(
        default_factory=dict, help="A partial TrainConfig laid over stages: what Stage I does differently."
    )
    stage2: dict[str, Any] = checked(
        default_factory=dict,
        help="A partial TrainConfig laid over stages: what Stage II (every variant) does differently.",
    )
    single: dict[str, Any] = checked(
        default_factory=dict,
        help="A partial TrainConfig laid over stages: what the single-agent Search-R1-style baseline (one solver, "
        "GRPO on its outcome) does differently.",
    )
    variants: list[str] = checked(
        default_factory=lambda: ["full"],
        help="The Stage II variants trained and evaluated: full, outcome_searcher_rl, base_model_teacher, "
        "no_searcher_supervision, prompted_critic.",
    )
    teams: dict[str, dict[str, Any]] = checked(
        default_factory=dict,
        record_default=False,
        help="Other registered teams (maopd.envs.workflows) trained from π_0 on their outcome (Stage I's layer, no "
        "Teacher) and evaluated beside the paper's systems, untrained and trained: workflow name → a partial "
        "TrainConfig laid over stages, e.g. the signals of its own roles (advantage.role_signals). Each "
        "trains in <run_dir>/team_<workflow>.",
    )
    eval: EvalConfig = checked(default_factory=EvalConfig, help="How every system is evaluated on held-out questions.")
    ptx_source: str = checked(
        "demonstrations",
        choices=PTX_SOURCES,
        help="What PPO-ptx trains on in a stage that sets ptx.coef without ptx.data: the calls π_0 was fine-tuned "
        "on (demonstrations), or the passages it was pretrained on (pretraining), which anchor copying without "
        "anchoring the demonstrated team's mistakes.",
    )

    @staticmethod
    def unknown_key_hint(key: str) -> str:
        """Where a stage setting given at the top level goes (``rollout.engine=vllm``)."""
        from maopd.training.config import TrainConfig

        if key not in {f.name for f in dataclasses.fields(TrainConfig)}:
            return ""
        return f"; a stage setting: stages.{key}.… for every stage, or stage1/stage2/single.{key}.… for one"

    def __post_init__(self) -> None:
        if not self.run_dir.strip():
            raise ConfigError("run_dir: is empty; name the directory the pipeline writes to (--run-dir DIR)")
        check_fields(self)
        self.base_model = self.pi0_for_seed(self.seed)
        if self.ptx_source == "pretraining" and self.base_model.pretrain_worlds < 1:
            raise ConfigError("ptx_source: 'pretraining' needs base_model.pretrain_worlds > 0: π_0 was not pretrained")
        for i, variant in enumerate(self.variants):
            if variant not in VARIANT_METHODS:
                raise ConfigError(f"variants[{i}]: {variant!r} is not a variant; choose from {list(VARIANT_METHODS)}")
            if variant in self.variants[:i]:
                raise ConfigError(f"variants[{i}]: {variant!r} is listed twice")
        if "single" not in self.base_model.workflows:
            raise ConfigError(
                "base_model.workflows: the job trains and evaluates the single-agent baseline, so π_0 "
                "needs demonstrations of the single workflow; add 'single'"
            )
        if "prompted_critic" in self.variants and not self.base_model.critic_demos:
            raise ConfigError(
                "variants: prompted_critic needs a π_0 that has seen the judge prompt; "
                "set base_model.critic_demos: true"
            )
        for stage in ("stages", *STAGES):
            setattr(self, stage, _stage_section(getattr(self, stage), stage))
        for workflow in self.teams:
            _check_team(workflow)
            self.teams[workflow] = _stage_section(self.teams[workflow], f"teams.{workflow}")
        on_vllm = [
            stage_dir(self, stage, variant).name
            for stage, variant in self.stage_runs()
            if stage_settings(self, stage, variant).get("rollout", {}).get("engine") == "vllm"
        ]
        if on_vllm and self.base_model.head_dim not in VLLM_HEAD_SIZES:
            raise ConfigError(
                f"base_model.head_dim: π_0 is served by vLLM (rollout.engine of {', '.join(on_vllm)}), whose "
                f"attention takes head sizes {list(VLLM_HEAD_SIZES)}, got {self.base_model.head_dim}; "
                "set base_model.head_dim=32"
            )
        # ranges and the checks across fields need the whole stage config: build each one now
        for stage, variant in self.stage_runs():
            try:
                stage_config(self, stage, variant, Path("<π_0>"), Path("<stage1>") if stage == "stage2" else None)
            except ConfigError as exc:
                where = f" (variant {variant})" if stage == "stage2" else ""
                key = str(exc).partition(":")[0]
                own = _has_key(own_settings(self, stage, variant), key)
                section = "stages" if _has_key(self.stages, key) and not own else section_name(stage, variant)
                raise ConfigError(f"{section}.{exc}{where}") from None

    def pi0_for_seed(self, seed: int) -> SFTConfig:
        """π_0's config for training seed ``seed``: ``base_model``, fine-tuned with ``finetune_seed``
        ``seed`` under ``pi0_per_seed``."""
        if not self.pi0_per_seed:
            return self.base_model
        if self.base_model.finetune_seed not in (None, self.seed):
            raise ConfigError(
                f"base_model.finetune_seed: is {self.base_model.finetune_seed}, but pi0_per_seed fine-tunes each "
                f"seed's π_0 with its training seed ({self.seed}); remove base_model.finetune_seed or set "
                "pi0_per_seed: false"
            )
        return dataclasses.replace(self.base_model, finetune_seed=seed)

    def stage_runs(self) -> list[tuple[str, str]]:
        """(stage, variant) of every stage run, in the order the pipeline trains them; a team's run
        is (``TEAM``, its workflow)."""
        return [
            ("stage1", "full"),
            *(("stage2", variant) for variant in self.variants),
            ("single", "full"),
            *((TEAM, workflow) for workflow in self.teams),
        ]


def _stage_section(section: dict[str, Any], name: str) -> dict[str, Any]:
    """A stage section checked as a partial ``TrainConfig`` that sets none of ``PIPELINE_KEYS``."""
    from maopd.training.config import TrainConfig

    section = check_partial(TrainConfig, section, name)
    for key, why in PIPELINE_KEYS.items():
        if _has_key(section, key):
            raise ConfigError(f"{name}.{key}: set by the pipeline, not by a stage section: {why}")
    return section


def _check_team(workflow: str) -> None:
    """A ``teams`` entry names a registered workflow that no stage of the job trains already."""
    from maopd.envs.workflows import workflow_names
    from maopd.training.config import STAGE_WORKFLOWS

    if workflow not in workflow_names():
        raise ConfigError(f"teams.{workflow}: not a registered workflow; choose from {list(workflow_names())}")
    stages = [stage for stage, trained in STAGE_WORKFLOWS.items() if trained == workflow]
    if stages:
        raise ConfigError(
            f"teams.{workflow}: the job trains {workflow} already, as its {stages[0]} stage; set {stages[0]}.… instead"
        )


def _has_key(data: dict[str, Any], dotted: str) -> bool:
    head, _, rest = dotted.partition(".")
    if head not in data:
        return False
    return not rest or (isinstance(data[head], dict) and _has_key(data[head], rest))


# Studies over the default pipeline: the settings each one changes. Table 3 extends the main job's
# run directory, so π_0, Stage I, the full method and their evaluation are reused, not rerun.
EXPERIMENTS: dict[str, list[str]] = {
    "table3": [f"variants={list(VARIANT_METHODS)}"],
    # the default job cut to a first look in minutes, in a run directory of its own
    "quick": [
        "run_dir=runs/quick",
        "stages.steps=10",
        "eval.questions_per_type=10",
        "eval.attempts=2",
    ],
    # the paper's OPD coefficient instead of the one chosen on dev, in a run directory of its own
    "paper_beta": ["run_dir=runs/paper_beta", "stage2.advantage.opd_beta=0.01"],
}


def load_experiment(name: str, overrides: list[str] | None = None) -> PipelineConfig:
    """The default preset with the experiment's settings, then ``overrides``."""
    if name not in EXPERIMENTS:
        return load_preset(name, overrides)
    return load_preset(DEFAULT_PRESET, [*EXPERIMENTS[name], *(overrides or [])])


def load_preset(name_or_path: str, overrides: list[str] | None = None) -> PipelineConfig:
    """A preset name (``default``, ``smoke``) from configs/pipeline_<name>.yaml, or a YAML path."""
    return load_yaml(
        PipelineConfig, preset_file(name_or_path), [stage_setting(override) for override in overrides or []]
    )


def preset_file(name_or_path: str) -> Path:
    """The YAML file of a preset name (configs/pipeline_<name>.yaml), or the YAML path given."""
    path = Path(name_or_path)
    if not path.is_file():
        path = PRESET_DIR / f"pipeline_{name_or_path}.yaml"
        if not path.is_file():
            known = sorted(p.stem.removeprefix("pipeline_") for p in PRESET_DIR.glob("pipeline_*.yaml"))
            raise ConfigError(f"preset {name_or_path!r} not found; known presets: {known}, or pass a YAML path")
    return path


def stage_setting(override: str) -> str:
    """A command-line setting that only stages have applies to every stage: ``rollout.engine=vllm``
    becomes ``stages.rollout.engine=vllm``. (A YAML file says ``stages:``; ``unknown_key_hint``.)"""
    from maopd.training.config import TrainConfig

    key = override.partition("=")[0].partition(".")[0].strip()
    stage_keys = {f.name for f in dataclasses.fields(TrainConfig)} - {
        f.name for f in dataclasses.fields(PipelineConfig)
    }
    return f"stages.{override.strip()}" if key in stage_keys else override


def stage_dir(config: PipelineConfig, stage: str, variant: str) -> Path:
    """Where one stage run of the pipeline writes."""
    return Path(config.run_dir) / (f"{stage}_{variant}" if stage in ("stage2", TEAM) else stage)


def stage_settings(config: PipelineConfig, stage: str, variant: str = "full") -> dict[str, Any]:
    """The partial ``TrainConfig`` of one stage run: its section (a team's: ``teams[variant]``) laid
    over the shared ``stages`` section."""
    from maopd.training.config import deep_merge

    return deep_merge(config.stages, own_settings(config, stage, variant))


def section_name(stage: str, variant: str) -> str:
    """The ``PipelineConfig`` section holding one stage run's own settings: its stage's, or a team's
    ``teams.<workflow>``."""
    return f"teams.{variant}" if stage == TEAM else stage


def own_settings(config: PipelineConfig, stage: str, variant: str) -> dict[str, Any]:
    """The partial ``TrainConfig`` of ``section_name(stage, variant)``."""
    return config.teams[variant] if stage == TEAM else getattr(config, stage)


@dataclass(frozen=True)
class SystemNames:
    """A team's rows in the result tables: untrained (π_0), and trained from π_0."""

    base: str
    trained: str


def system_names(workflow: str) -> SystemNames:
    """The rows of a registered workflow's team, named by its declaration's ``system_name``."""
    from maopd.envs.workflows import declaration

    name = declaration(workflow).system_name
    return SystemNames(f"{name} base", f"{name} + RL")


def run_labels(config: PipelineConfig) -> dict[str, str]:
    """What each stage run's directory name stands for in a seed report."""
    return {
        "stage1": f"Stage I: {system_names('cascade').trained}",
        **{f"stage2_{v}": f"Stage II: {VARIANT_METHODS[v]}" for v in VARIANT_METHODS},
        "single": SINGLE_AGENT_RL,
        **{stage_dir(config, TEAM, w).name: system_names(w).trained for w in config.teams},
    }


def stage_config(config: PipelineConfig, stage: str, variant: str, base_model: Path, teacher: Path | None):
    """The ``TrainConfig`` of one stage run of the pipeline."""
    from maopd.training.config import build_config

    settings = stage_settings(config, stage, variant)
    for key, value in pipeline_settings(config, stage, variant, base_model, teacher).items():
        set_dotted(settings, key, value)
    return build_config(settings)


def pipeline_settings(
    config: PipelineConfig, stage: str, variant: str, base_model: Path, teacher: Path | None
) -> dict[str, Any]:
    """The dotted settings of one stage run that the pipeline sets itself (``PIPELINE_KEYS``)."""
    team = {"stage": "stage1", "variant": "full", "workflow": variant}
    pipeline = {
        **(team if stage == TEAM else {"stage": stage, "variant": variant}),
        "seed": config.seed,
        "run_dir": str(stage_dir(config, stage, variant)),
        "model.path": str(base_model),
    }
    if teacher is not None:
        pipeline["teacher.path"] = str(teacher)
    if needs_ptx_data(stage_settings(config, stage, variant)):
        pipeline["ptx.data"] = str(ptx_data_path(config))
    return pipeline


def needs_ptx_data(settings: dict[str, Any]) -> bool:
    """Whether a stage section uses PPO-ptx without data of its own."""
    ptx = settings.get("ptx", {})
    return ptx.get("coef", 0) > 0 and not ptx.get("data")


def ptx_data_path(config: PipelineConfig) -> Path:
    """Where the pipeline writes the PPO-ptx data of ``ptx_source`` (``ptx.coef`` > 0)."""
    return Path(config.run_dir) / "ptx_data.jsonl"
