"""The main job: π_0 → Stage I (cascade GRPO) → Teacher → Stage II (hierarchy, OPD + GRPO) → evaluation.

``run_pipeline(config)`` reads top to bottom:

1. build or load the base model π_0 (SFT on the noisy scripted team, cached by its config);
2. Stage I from π_0 on the cascade; its last checkpoint is the frozen Teacher;
3. Stage II from π_0 on the hierarchy with OPD from that Teacher (and, for the ablation study,
   each Table 3 variant);
4. evaluate C-MAS base, H-MAS base, C-MAS + RL and MultiAgent-OPD (plus the variants) on the
   held-out test split of the world: ``attempts`` independent workflows per question, one answer
   candidate, temperature 0.6, top-p 0.95; the question types of the world (1-hop, 2-hop, 3-hop,
   comparison) are the "datasets" of the macro average;
5. score with question-bootstrap CIs and paired differences, print the tables, write the plots.

Every step resumes: π_0 is cached, stages resume from their checkpoints, evaluation skips finished
records. The config and seed are saved in ``<run_dir>/pipeline.yaml``, timings and the machine in
``<run_dir>/pipeline.json``.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maopd.config import load_yaml, save_yaml, to_dict
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


@dataclass
class EvalConfig:
    split: str = "test"  # "dev" to tune settings: never tune on test
    # questions of each type (the "datasets" of the macro average); None: every question of the split
    questions_per_type: int | None = None
    attempts: int = 4
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 64
    batch_size: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        if self.split not in ("dev", "test"):
            raise ValueError(f"eval.split must be 'dev' or 'test', got {self.split!r}")
        if self.questions_per_type is not None and self.questions_per_type < 1:
            raise ValueError(f"eval.questions_per_type must be at least 1 or null (every question), "
                             f"got {self.questions_per_type}")


@dataclass
class PipelineConfig:
    """``stage1`` / ``stage2`` are ``TrainConfig`` settings (dotted keys or nested), applied over the
    stage and variant defaults of ``training.config``; the model, Teacher and run directories are
    filled in by the pipeline."""

    seed: int = 0
    run_dir: str = "runs/main"
    base_model: SFTConfig = field(default_factory=SFTConfig)
    stage1: dict[str, Any] = field(default_factory=dict)
    stage2: dict[str, Any] = field(default_factory=dict)
    variants: list[str] = field(default_factory=lambda: ["full"])
    eval: EvalConfig = field(default_factory=EvalConfig)
    # what PPO-ptx trains on in a stage that sets ptx.coef without ptx.data: the calls π_0 was
    # fine-tuned on ("demonstrations"), or the passages it was pretrained on ("pretraining"), which
    # anchor copying without anchoring the demonstrated team's mistakes
    ptx_source: str = "demonstrations"

    def __post_init__(self) -> None:
        if self.ptx_source not in PTX_SOURCES:
            raise ValueError(f"ptx_source must be one of {PTX_SOURCES}, got {self.ptx_source!r}")
        if self.ptx_source == "pretraining" and self.base_model.pretrain_worlds < 1:
            raise ValueError("ptx_source 'pretraining' needs base_model.pretrain_worlds > 0: π_0 was not pretrained")


# Studies over the default pipeline: the settings each one changes. Table 3 extends the main job's
# run directory, so π_0, Stage I, the full method and their evaluation are reused, not rerun.
EXPERIMENTS: dict[str, list[str]] = {
    "table3": [f"variants={list(VARIANT_METHODS)}"],
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
            raise ValueError(f"preset {name_or_path!r} not found; known presets: {known}, or pass a YAML path")
    return load_yaml(PipelineConfig, path, overrides)


def stage_config(config: PipelineConfig, stage: str, variant: str, base_model: Path, teacher: Path | None):
    """The ``TrainConfig`` of one stage run of the pipeline."""
    from training.config import apply_settings, build_config

    run_dir = Path(config.run_dir) / (stage if stage == "stage1" else f"stage2_{variant}")
    settings = _dotted(config.stage1 if stage == "stage1" else config.stage2)
    settings.update({"stage": stage, "variant": variant, "seed": config.seed, "run_dir": str(run_dir),
                     "model.path": str(base_model)})
    if teacher is not None:
        settings["teacher.path"] = str(teacher)
    if _needs_ptx_data(settings):
        settings["ptx.data"] = str(ptx_data_path(config))
    return build_config(apply_settings({}, settings))


def _needs_ptx_data(settings: dict[str, Any]) -> bool:
    """Whether a stage's (dotted) settings use PPO-ptx without data of their own."""
    return settings.get("ptx.coef", 0) > 0 and not settings.get("ptx.data")


def ptx_data_path(config: PipelineConfig) -> Path:
    """Where the pipeline writes the PPO-ptx data of ``ptx_source`` (``ptx.coef`` > 0)."""
    return Path(config.run_dir) / "ptx_data.jsonl"


def ptx_rows(config: PipelineConfig) -> list[dict[str, Any]]:
    """The rows of π_0's training data that ``config.ptx_source`` names, in ``training.ptx``'s format."""
    from training.base_model import demonstration_chats, pretraining_texts

    if config.ptx_source == "demonstrations":
        return demonstration_chats(config.base_model, progress=False)
    return [{"text": text} for text in pretraining_texts(config.base_model)]


def _dotted(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested and dotted keys alike (``{"rollout": {"batch_size": 4}}``, ``rollout.batch_size``) as dotted keys."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and f"{prefix}{key}" != "ppo.role_loss_weights":
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


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
    solve = checkpoint_solver(workflow, str(model_dir), None, [e.question for e in manifest],
                              ev.temperature, ev.top_p, ev.max_new_tokens)
    settings = EvalSettings(attempts=ev.attempts, batch_size=ev.batch_size, seed=ev.seed)
    run_attempts(solve, manifest, records, method, settings)


def format_timings(timings: dict[str, float], machine: dict) -> str:
    """The stage timings the job prints at its end, with the machine they were measured on."""
    width = max(len(name) for name in timings)
    lines = [f"stage timings on {machine.get('platform', '?')}, {machine.get('cpus', '?')} CPUs:"]
    lines += [f"  {name:<{width}}  {seconds:8.1f} s  ({seconds / 60:5.1f} min)" for name, seconds in timings.items()]
    return "\n".join(lines)


def run_pipeline(config: PipelineConfig) -> dict:
    from benchmarks.eval.records import load_records
    from benchmarks.eval.scoring import score_records
    from training.base_model import load_or_build_base_model
    from training.checkpoint import resolve_model_dir
    from training.plot import plot_run
    from training.ptx import write_rows
    from training.trainer import train_stage

    run_dir = Path(config.run_dir)
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
    needs_ptx_data = any(_needs_ptx_data(_dotted(s)) for s in (config.stage1, config.stage2))
    if needs_ptx_data and not ptx_data_path(config).is_file():
        write_rows(timed("ptx_data", ptx_rows, config), ptx_data_path(config))
    stage1_run = timed("stage1", train_stage, stage_config(config, "stage1", "full", base_model, None))
    teacher = resolve_model_dir(stage1_run)
    stage2_runs = {
        variant: timed(f"stage2_{variant}", train_stage, stage_config(config, "stage2", variant, base_model, stage1_run))
        for variant in config.variants
    }

    manifest = held_out_manifest(config)
    records = run_dir / "eval" / "records.jsonl"
    systems = [("C-MAS base", "cascade", base_model), ("H-MAS base", "hierarchical", base_model),
               ("C-MAS + RL", "cascade", teacher)]
    systems += [(VARIANT_METHODS[v], "hierarchical", resolve_model_dir(r)) for v, r in stage2_runs.items()]
    for method, workflow, model_dir in systems:
        timed("evaluation", evaluate, config, method, workflow, model_dir, manifest, records)

    comparisons = [("C-MAS + RL", "C-MAS base"), ("MultiAgent-OPD", "H-MAS base"), ("MultiAgent-OPD", "C-MAS + RL")]
    comparisons += [("MultiAgent-OPD", VARIANT_METHODS[v]) for v in config.variants if v != "full"]
    comparisons = [pair for pair in comparisons if all(m in {s[0] for s in systems} for m in pair)]
    summary = score_records(load_records([records]), comparisons, run_dir / "eval")
    for stage_run in (stage1_run, *stage2_runs.values()):
        plot_run(stage_run)
    timings["total"] = time.perf_counter() - started
    report = {
        "config": to_dict(config),
        "seconds": timings,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "base_model": str(base_model),
        "stage1_run": str(stage1_run),
        "stage2_runs": {v: str(r) for v, r in stage2_runs.items()},
        "eval": str(run_dir / "eval"),
    }
    (run_dir / "pipeline.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(format_timings(timings, report["machine"]))
    print(f"pipeline finished in {timings['total'] / 60:.1f} min; results in {run_dir}")
    return summary
