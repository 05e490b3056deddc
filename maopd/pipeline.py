"""The main job: π_0 → Stage I (cascade GRPO) → Teacher → Stage II (hierarchy, OPD + GRPO) → evaluation.

``run_pipeline(config)`` reads top to bottom:

1. build or load the base model π_0 (SFT on the noisy scripted team, cached by its config);
2. Stage I from π_0 on the cascade; its last checkpoint is the frozen Teacher;
3. Stage II from π_0 on the hierarchy with OPD from that Teacher (and, for the ablation study,
   each Table 3 variant), and the single-agent Search-R1-style baseline from π_0 (GRPO on its
   outcome);
4. evaluate C-MAS base, H-MAS base, C-MAS + RL, MultiAgent-OPD (plus the variants) and the single
   agent before and after RL on the
   held-out test split of the world: ``attempts`` independent workflows per question, one answer
   candidate, temperature 0.6, top-p 0.95; the question types of the world (1-hop, 2-hop, 3-hop,
   comparison) are the "datasets" of the macro average;
5. score with question-bootstrap CIs and paired differences, print the tables, write the plots.

Every step resumes: π_0 is cached, stages resume from their checkpoints, evaluation skips finished
records. The config and seed are saved in ``<run_dir>/pipeline.yaml``, timings and the machine in
``<run_dir>/pipeline.json``.  ``run_seeds`` runs the job once per training seed, in parallel, and
writes the report pooled over them (``benchmarks.seed_report``).

The whole config is checked when it loads, before any work: every key of the stage sections
against ``TrainConfig``'s tree, types, ranges and the variants' names. A run directory's stages
resume only under the config that made them (``check_run_dir``); a changed config is refused,
naming the differing keys, unless ``fresh`` starts the changed stages over.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.policy import SamplingSettings
from maopd.base.config import (
    ConfigError,
    check_fields,
    check_partial,
    checked,
    config_diff,
    field_like,
    load_yaml,
    save_yaml,
    set_dotted,
    to_dict,
)
from training.base_model import SFTConfig

PRESET_DIR = Path(__file__).resolve().parent.parent / "configs"
PTX_SOURCES = ("demonstrations", "pretraining")
VARIANT_METHODS = {
    "full": "MultiAgent-OPD",
    "outcome_searcher_rl": "w/ outcome-based Searcher RL",
    "base_model_teacher": "w/ base-model teacher",
    "no_searcher_supervision": "w/o direct Searcher supervision",
    "prompted_critic": "Prompted Critic",
}
STAGES = ("stage1", "stage2", "single")
SINGLE_AGENT_BASE, SINGLE_AGENT_RL = "Single agent base", "Search-R1 (single agent + RL)"
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
}


@dataclass
class EvalConfig:
    split: str = checked("test", choices=("dev", "test"))  # "dev" to tune settings: never tune on test
    # questions of each type (the "datasets" of the macro average)
    questions_per_type: int | None = checked(None, ge=1, null="every question of the split")
    attempts: int = checked(4, ge=1)
    temperature: float = field_like(SamplingSettings, "temperature")
    top_p: float = field_like(SamplingSettings, "top_p")
    max_new_tokens: int = field_like(SamplingSettings, "max_new_tokens", 64)
    batch_size: int = checked(32, ge=1)
    seed: int = 0

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class PipelineConfig:
    """The main job. ``stages`` is a partial ``TrainConfig`` (nested mappings, any subset of its
    fields) that every stage run shares; ``stage1`` / ``stage2`` / ``single`` are partial
    ``TrainConfig``s laid over it, stating only what their stage does differently. Both are applied
    over the stage and variant layers of ``training.config``; every key and value is checked when
    the config is built. π_0, the Teacher, the seed and the run
    directories are the pipeline's (``PIPELINE_KEYS``): a stage section setting one is refused."""

    seed: int = 0
    run_dir: str = "runs/main"
    base_model: SFTConfig = field(default_factory=SFTConfig)
    stages: dict[str, Any] = field(default_factory=dict)  # a partial TrainConfig every stage shares
    stage1: dict[str, Any] = field(default_factory=dict)  # a partial TrainConfig
    stage2: dict[str, Any] = field(default_factory=dict)  # a partial TrainConfig
    # the single-agent Search-R1-style baseline (stage "single": one solver, GRPO on its outcome)
    single: dict[str, Any] = field(default_factory=dict)  # a partial TrainConfig
    variants: list[str] = field(default_factory=lambda: ["full"])
    eval: EvalConfig = field(default_factory=EvalConfig)
    # what PPO-ptx trains on in a stage that sets ptx.coef without ptx.data: the calls π_0 was
    # fine-tuned on ("demonstrations"), or the passages it was pretrained on ("pretraining"), which
    # anchor copying without anchoring the demonstrated team's mistakes
    ptx_source: str = checked("demonstrations", choices=PTX_SOURCES)

    def __post_init__(self) -> None:
        from training.config import TrainConfig

        if not self.run_dir.strip():
            raise ConfigError("run_dir: is empty; name the directory the pipeline writes to (--run-dir DIR)")
        check_fields(self)
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
            section = check_partial(TrainConfig, getattr(self, stage), stage)
            for key, why in PIPELINE_KEYS.items():
                if _has_key(section, key):
                    raise ConfigError(f"{stage}.{key}: set by the pipeline, not by a stage section: {why}")
            setattr(self, stage, section)
        # ranges and the checks across fields need the whole stage config: build each one now
        for stage, variant in self.stage_runs():
            try:
                stage_config(self, stage, variant, Path("<π_0>"), Path("<stage1>") if stage == "stage2" else None)
            except ConfigError as exc:
                where = f" (variant {variant})" if stage == "stage2" else ""
                key = str(exc).partition(":")[0]
                section = "stages" if _has_key(self.stages, key) and not _has_key(getattr(self, stage), key) else stage
                raise ConfigError(f"{section}.{exc}{where}") from None

    def stage_runs(self) -> list[tuple[str, str]]:
        """(stage, variant) of every stage run, in the order the pipeline trains them."""
        return [("stage1", "full"), *(("stage2", variant) for variant in self.variants), ("single", "full")]


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
    return load_preset("default", [*EXPERIMENTS[name], *(overrides or [])])


def load_preset(name_or_path: str, overrides: list[str] | None = None) -> PipelineConfig:
    """A preset name (``default``, ``smoke``) from configs/pipeline_<name>.yaml, or a YAML path."""
    path = Path(name_or_path)
    if not path.is_file():
        path = PRESET_DIR / f"pipeline_{name_or_path}.yaml"
        if not path.is_file():
            known = sorted(p.stem.removeprefix("pipeline_") for p in PRESET_DIR.glob("pipeline_*.yaml"))
            raise ConfigError(f"preset {name_or_path!r} not found; known presets: {known}, or pass a YAML path")
    return load_yaml(PipelineConfig, path, overrides)


def stage_dir(config: PipelineConfig, stage: str, variant: str) -> Path:
    """Where one stage run of the pipeline writes."""
    return Path(config.run_dir) / (f"stage2_{variant}" if stage == "stage2" else stage)


def stage_settings(config: PipelineConfig, stage: str) -> dict[str, Any]:
    """The partial ``TrainConfig`` of one stage: its section laid over the shared ``stages`` section."""
    from training.config import deep_merge

    return deep_merge(config.stages, getattr(config, stage))


def stage_config(config: PipelineConfig, stage: str, variant: str, base_model: Path, teacher: Path | None):
    """The ``TrainConfig`` of one stage run of the pipeline."""
    from training.config import build_config

    settings = stage_settings(config, stage)
    pipeline = {
        "stage": stage,
        "variant": variant,
        "seed": config.seed,
        "run_dir": str(stage_dir(config, stage, variant)),
        "model.path": str(base_model),
    }
    if teacher is not None:
        pipeline["teacher.path"] = str(teacher)
    if _needs_ptx_data(settings):
        pipeline["ptx.data"] = str(ptx_data_path(config))
    for key, value in pipeline.items():
        set_dotted(settings, key, value)
    return build_config(settings)


def _needs_ptx_data(settings: dict[str, Any]) -> bool:
    """Whether a stage section uses PPO-ptx without data of its own."""
    ptx = settings.get("ptx", {})
    return ptx.get("coef", 0) > 0 and not ptx.get("data")


def ptx_data_path(config: PipelineConfig) -> Path:
    """Where the pipeline writes the PPO-ptx data of ``ptx_source`` (``ptx.coef`` > 0)."""
    return Path(config.run_dir) / "ptx_data.jsonl"


def ptx_rows(config: PipelineConfig) -> list[dict[str, Any]]:
    """The rows of π_0's training data that ``config.ptx_source`` names, in ``training.ptx``'s format."""
    from training.base_model import demonstration_chats, pretraining_texts

    if config.ptx_source == "demonstrations":
        return demonstration_chats(config.base_model, progress=False)
    return [{"text": text} for text in pretraining_texts(config.base_model)]


def held_out_manifest(config: PipelineConfig):
    """The held-out questions (``eval.split``): ``questions_per_type`` of each type, sampled with the
    manifest seed, or all of them."""
    from benchmarks.eval.manifest import build_manifest
    from envs.synthwiki import load_default_world

    world = load_default_world()  # the world the environments play by default
    pools: dict[str, list] = {}
    for question in world.splits[config.eval.split]:
        meta = question.metadata
        pools.setdefault("comparison" if meta["type"] == "comparison" else f"{meta['hops']}-hop", []).append(question)
    wanted = config.eval.questions_per_type
    counts = {name: len(pool) if wanted is None else min(wanted, len(pool)) for name, pool in sorted(pools.items())}
    training = [q.question for q in world.splits["train"]]
    return build_manifest(pools, counts, training_questions=training).entries


def evaluate(config: PipelineConfig, method: str, workflow: str, model_dir: Path, manifest, records: Path) -> None:
    from benchmarks.eval.runner import EvalSettings, run_attempts
    from benchmarks.eval.solvers import checkpoint_solver

    ev = config.eval
    solve = checkpoint_solver(
        workflow, str(model_dir), None, [e.question for e in manifest], ev.temperature, ev.top_p, ev.max_new_tokens
    )
    settings = EvalSettings(attempts=ev.attempts, batch_size=ev.batch_size, seed=ev.seed)
    run_attempts(solve, manifest, records, method, settings)


def _read_yaml(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else None


def _relocated(data: Any, old_root: str, new_root: str) -> Any:
    """``data`` with paths under ``old_root`` moved under ``new_root`` (a run directory copied elsewhere)."""
    if isinstance(data, dict):
        return {k: _relocated(v, old_root, new_root) for k, v in data.items()}
    if isinstance(data, str) and (data == old_root or data.startswith(old_root + os.sep)):
        return new_root + data[len(old_root) :]
    return data


def check_run_dir(config: PipelineConfig, base_model: Path, fresh: bool = False) -> list[Path]:
    """What ``config.run_dir`` already holds that another config made, checked before any work.

    Identity is per stage: ``<stage dir>/config.yaml`` must equal the stage config this pipeline
    would train (the run directory's own location excepted); the evaluation's records must come
    from the same ``eval`` and ``base_model`` settings and from unchanged stages; the PPO-ptx data
    from the same ``ptx_source``. A stage or variant not yet trained is no conflict, so adding
    variants to a finished run is fine. With differences, raise ``ConfigError`` naming every
    differing key, or with ``fresh`` return the paths to delete so that the changed stages (and
    what depends on them: Stage II on Stage I, the evaluation on every stage) start over.
    """
    from training.config import read_as_current

    run_dir = Path(config.run_dir)
    saved = _read_yaml(run_dir / "pipeline.yaml") or {}
    old_root = str(Path(saved["run_dir"])) if isinstance(saved.get("run_dir"), str) else str(run_dir)
    new = to_dict(config)
    differences: list[str] = []
    stale: list[Path] = []
    ptx = run_dir / "ptx_data.jsonl"
    if ptx.is_file() and "ptx_source" in saved and saved["ptx_source"] != config.ptx_source:
        differences.append(f"ptx_source: {saved['ptx_source']!r} -> {config.ptx_source!r}")
        stale.append(ptx)
    for stage, variant in config.stage_runs():
        directory = stage_dir(config, stage, variant)
        made = _read_yaml(directory / "config.yaml")
        if made is None:
            continue
        made = read_as_current(made)
        teacher = stage_dir(config, "stage1", "full") if stage == "stage2" else None
        wanted = yaml.safe_load(yaml.safe_dump(to_dict(stage_config(config, stage, variant, base_model, teacher))))
        changed = config_diff(_relocated(made, old_root, str(run_dir)), wanted, ignore=("run_dir",))
        upstream = stage == "stage2" and stage_dir(config, "stage1", "full") in stale
        if changed or upstream or ptx in stale:
            differences += [f"{directory.name}.{line}" for line in changed]
            stale.append(directory)
    records = run_dir / "eval" / "records.jsonl"
    if records.is_file():
        changed = [
            f"{section}.{line}"
            for section in ("eval", "base_model")
            if section in saved
            for line in config_diff(saved[section], new[section])
        ]
        differences += changed
        if changed or stale:
            stale.append(run_dir / "eval")
    if differences and not fresh:
        raise ConfigError(
            f"{run_dir} was made under another config, and a stage resumes only under the config that made it: "
            f"{'; '.join(differences)}. Rerun with the settings it was made with, pick another --run-dir, "
            f"or pass --fresh to start the changed stages (and what depends on them) over"
        )
    return stale if fresh else []


def format_timings(timings: dict[str, float], machine: dict) -> str:
    """The stage timings the job prints at its end, with the machine they were measured on."""
    width = max(len(name) for name in timings)
    lines = [f"stage timings on {machine.get('platform', '?')}, {machine.get('cpus', '?')} CPUs:"]
    lines += [f"  {name:<{width}}  {seconds:8.1f} s  ({seconds / 60:5.1f} min)" for name, seconds in timings.items()]
    return "\n".join(lines)


def pipeline_comparisons(config: PipelineConfig) -> list[tuple[str, str]]:
    """The paired differences the job reports: the paper's directions, then the full method against
    each Table 3 variant."""
    comparisons = [
        ("C-MAS + RL", "C-MAS base"),
        ("MultiAgent-OPD", "H-MAS base"),
        ("MultiAgent-OPD", "C-MAS + RL"),
        ("MultiAgent-OPD", SINGLE_AGENT_RL),
        (SINGLE_AGENT_RL, SINGLE_AGENT_BASE),
    ]
    return comparisons + [("MultiAgent-OPD", VARIANT_METHODS[v]) for v in config.variants if v != "full"]


def run_pipeline(config: PipelineConfig, fresh: bool = False) -> dict:
    from benchmarks.eval.records import load_records
    from benchmarks.eval.scoring import score_records
    from training.base_model import base_model_dir, load_or_build_base_model
    from training.checkpoint import resolve_model_dir
    from training.plot import plot_run
    from training.ptx import write_rows
    from training.trainer import train_stage

    run_dir = Path(config.run_dir)
    for path in check_run_dir(config, base_model_dir(config.base_model), fresh):  # before any work
        print(f"--fresh: starting over without {path}")
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    save_yaml(config, run_dir / "pipeline.yaml")
    timings: dict[str, float] = {}
    started = time.perf_counter()

    def timed(name: str, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0
        return out

    base_model = timed("base_model", load_or_build_base_model, config.base_model)
    # PPO-ptx without its own data trains on π_0's training data (see stage_config)
    needs_ptx_data = any(_needs_ptx_data(stage_settings(config, stage)) for stage in STAGES)
    if needs_ptx_data and not ptx_data_path(config).is_file():
        write_rows(timed("ptx_data", ptx_rows, config), ptx_data_path(config))
    # each stage's config was checked against what its directory holds (check_run_dir)
    stage1_run = timed("stage1", train_stage, stage_config(config, "stage1", "full", base_model, None), None, False)
    teacher = resolve_model_dir(stage1_run)
    stage2_runs = {
        variant: timed(
            f"stage2_{variant}",
            train_stage,
            stage_config(config, "stage2", variant, base_model, stage1_run),
            None,
            False,
        )
        for variant in config.variants
    }
    single_run = timed("single", train_stage, stage_config(config, "single", "full", base_model, None), None, False)

    manifest = held_out_manifest(config)
    records = run_dir / "eval" / "records.jsonl"
    systems = [
        ("C-MAS base", "cascade", base_model),
        ("H-MAS base", "hierarchical", base_model),
        ("C-MAS + RL", "cascade", teacher),
    ]
    systems += [(VARIANT_METHODS[v], "hierarchical", resolve_model_dir(r)) for v, r in stage2_runs.items()]
    systems += [(SINGLE_AGENT_BASE, "single", base_model), (SINGLE_AGENT_RL, "single", resolve_model_dir(single_run))]
    for method, workflow, model_dir in systems:
        timed("evaluation", evaluate, config, method, workflow, model_dir, manifest, records)

    comparisons = [pair for pair in pipeline_comparisons(config) if all(m in {s[0] for s in systems} for m in pair)]
    summary = score_records(load_records([records]), comparisons, run_dir / "eval")
    for stage_run in (stage1_run, *stage2_runs.values(), single_run):
        plot_run(stage_run)
    timings["total"] = time.perf_counter() - started
    report = {
        "config": to_dict(config),
        "seconds": timings,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "base_model": str(base_model),
        "stage1_run": str(stage1_run),
        "stage2_runs": {v: str(r) for v, r in stage2_runs.items()},
        "single_run": str(single_run),
        "eval": str(run_dir / "eval"),
    }
    (run_dir / "pipeline.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(format_timings(timings, report["machine"]))
    print(f"pipeline finished in {timings['total'] / 60:.1f} min; results in {run_dir}")
    return summary


def seed_dir(config: PipelineConfig, seed: int) -> Path:
    return Path(config.run_dir) / f"seed_{seed}"


def run_seeds(config: PipelineConfig, seeds: list[int], fresh: bool = False) -> dict:
    """The job once per training seed, all seeds at once with one torch thread each (one process
    per seed, ``<run_dir>/seed_<s>``, its output in ``seed_<s>.log``), then the report pooled over
    them in ``<run_dir>/report`` (``benchmarks.seed_report``). Each seed resumes like the job."""
    import subprocess
    import sys
    from dataclasses import replace

    from benchmarks.seed_report import write_report
    from training.base_model import base_model_dir

    if len(set(seeds)) != len(seeds) or not seeds:
        raise ConfigError(f"--seeds: give distinct seeds, got {seeds}")
    # each seed also samples its evaluation with its own seed: the base model's workflows, which no
    # training seed changes, are then new samples in every seed rather than copies
    configs = {
        seed: replace(
            config,
            seed=seed,
            run_dir=str(seed_dir(config, seed)),
            eval=replace(config.eval, seed=config.eval.seed + seed),
        )
        for seed in seeds
    }
    for seed_config in configs.values():  # every seed's directory is checked before any work
        check_run_dir(seed_config, base_model_dir(seed_config.base_model), fresh)
    run_dir = Path(config.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_yaml(config, run_dir / "pipeline.yaml")
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    logs = {seed: run_dir / f"seed_{seed}.log" for seed in seeds}
    jobs = {}
    for seed, seed_config in configs.items():
        config_file = run_dir / f"seed_{seed}.yaml"
        save_yaml(seed_config, config_file)
        command = [
            sys.executable,
            "-m",
            "maopd.cli",
            "train",
            "--preset",
            str(config_file),
            *(["--fresh"] if fresh else []),
        ]
        log = logs[seed].open("w", encoding="utf-8")
        jobs[seed] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment), log)
        print(f"seed {seed}: {' '.join(command)} > {logs[seed]}")
    failed = []
    for seed, (process, log) in jobs.items():
        if process.wait() != 0:
            failed.append(seed)
        log.close()
    if failed:
        raise RuntimeError(f"seed(s) {failed} failed; see {', '.join(str(logs[s]) for s in failed)}")
    labels = {
        "stage1": "Stage I: C-MAS + RL",
        **{f"stage2_{v}": f"Stage II: {VARIANT_METHODS[v]}" for v in VARIANT_METHODS},
        "single": SINGLE_AGENT_RL,
    }
    report = write_report(
        [Path(c.run_dir) for c in configs.values()], pipeline_comparisons(config), run_dir / "report", labels
    )
    print(f"report over seeds {seeds} in {run_dir / 'report'}")
    return report
