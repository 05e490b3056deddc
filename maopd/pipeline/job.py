"""The main job: π_0 → Stage I (cascade GRPO) → Teacher → Stage II (hierarchy, OPD + GRPO) → evaluation.

``run_pipeline(config)`` reads top to bottom:

1. build or load the base model π_0 (SFT on the noisy scripted team, cached by its config);
2. Stage I from π_0 on the cascade; its last checkpoint is the frozen Teacher;
3. Stage II from π_0 on the hierarchy with OPD from that Teacher (and, for the ablation study,
   each Table 3 variant), and the single-agent Search-R1-style baseline from π_0 (GRPO on its
   outcome);
4. train each of ``teams`` (another registered team, e.g. another paper's) from π_0 on its
   outcome;
5. evaluate C-MAS base, H-MAS base, C-MAS + RL, MultiAgent-OPD (plus the variants), the single
   agent and each of ``teams`` before and after RL on the held-out test split of the world:
   ``attempts`` independent workflows per question, one answer
   candidate, temperature 0.6, top-p 0.95; the question types of the world (1-hop, 2-hop, 3-hop,
   comparison) are the "datasets" of the macro average;
6. score with question-bootstrap CIs and paired differences, print the tables, write the plots.

Every step resumes: π_0 is cached, stages resume from their checkpoints, evaluation skips finished
records; what the run directory holds is checked against the config first
(``maopd.pipeline.resume.check_run_dir``). The job holds its run directory and every stage's
directory for the whole run (``maopd.base.run_dir.owning``), so a second job or stage run on them
is refused. The config and seed are saved in
``<run_dir>/pipeline.yaml``, timings and the machine in ``<run_dir>/pipeline.json``.
``maopd.pipeline.seeds`` runs the job once per training seed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from maopd.base.config import to_record
from maopd.base.json_files import write_json
from maopd.base.machine import machine
from maopd.base.run_dir import owning, start_over, write_record
from maopd.pipeline.config import (
    SINGLE_AGENT_RL,
    TEAM,
    VARIANT_METHODS,
    PipelineConfig,
    needs_ptx_data,
    ptx_data_path,
    stage_config,
    stage_dir,
    stage_settings,
    system_names,
)
from maopd.pipeline.resume import PIPELINE_RECORD, check_run_dir


def ptx_rows(config: PipelineConfig) -> list[dict[str, Any]]:
    """The rows of π_0's training data that ``config.ptx_source`` names, in ``maopd.training.ptx``'s format."""
    from maopd.training.base_model import demonstration_chats, pretraining_texts

    if config.ptx_source == "demonstrations":
        return demonstration_chats(config.base_model, progress=False)
    return [{"text": text} for text in pretraining_texts(config.base_model)]


def held_out_manifest(config: PipelineConfig):
    """The held-out questions (``eval.split``): ``questions_per_type`` of each type, sampled with the
    manifest seed, or all of them."""
    from maopd.envs.synthwiki import load_default_world
    from maopd.envs.synthwiki.questions import question_kind
    from maopd.evaluation.manifest import build_manifest

    world = load_default_world()  # the world the environments play by default
    pools: dict[str, list] = {}
    for question in world.splits[config.eval.split]:
        pools.setdefault(question_kind(question), []).append(question)
    wanted = config.eval.questions_per_type
    counts = {name: len(pool) if wanted is None else min(wanted, len(pool)) for name, pool in sorted(pools.items())}
    training = [q.question for q in world.splits["train"]]
    return build_manifest(pools, counts, training_questions=training).entries


def evaluate(config: PipelineConfig, method: str, workflow: str, model_dir: Path, manifest, records: Path) -> None:
    from maopd.evaluation.runner import EvalSettings, run_attempts
    from maopd.evaluation.solvers import checkpoint_solver

    ev = config.eval
    solve = checkpoint_solver(
        workflow, str(model_dir), None, [e.question for e in manifest], ev.temperature, ev.top_p, ev.max_new_tokens
    )
    settings = EvalSettings(attempts=ev.attempts, batch_size=ev.batch_size, seed=ev.seed)
    # the model is the method's own (and its path moves with a copied run directory)
    made_with = {
        "workflow": workflow,
        "temperature": ev.temperature,
        "top_p": ev.top_p,
        "max_new_tokens": ev.max_new_tokens,
    }
    run_attempts(solve, manifest, records, method, settings, made_with)


def format_timings(timings: dict[str, float], machine: dict) -> str:
    """The stage timings the job prints at its end, with the machine they were measured on."""
    width = max(len(name) for name in timings)
    lines = [f"stage timings on {machine.get('platform', '?')}, {machine.get('cpus', '?')} CPUs:"]
    lines += [f"  {name:<{width}}  {seconds:8.1f} s  ({seconds / 60:5.1f} min)" for name, seconds in timings.items()]
    return "\n".join(lines)


def pipeline_comparisons(config: PipelineConfig) -> list[tuple[str, str]]:
    """The paired differences the job reports: the paper's directions, then the full method against
    each Table 3 variant."""
    cascade, hierarchy, single = (system_names(w) for w in ("cascade", "hierarchical", "single"))
    comparisons = [
        (cascade.trained, cascade.base),
        ("MultiAgent-OPD", hierarchy.base),
        ("MultiAgent-OPD", cascade.trained),
        ("MultiAgent-OPD", SINGLE_AGENT_RL),
        (SINGLE_AGENT_RL, single.base),
    ]
    comparisons += [("MultiAgent-OPD", VARIANT_METHODS[v]) for v in config.variants if v != "full"]
    for team in (system_names(workflow) for workflow in config.teams):
        comparisons += [(team.trained, team.base), ("MultiAgent-OPD", team.trained)]
    return comparisons


def run_pipeline(config: PipelineConfig, fresh: bool = False) -> dict:
    """The job in ``config.run_dir``, which it holds with its stages' directories while it runs."""
    with owning(config.run_dir, *(stage_dir(config, stage, variant) for stage, variant in config.stage_runs())):
        return _run_held(config, fresh)


def _run_held(config: PipelineConfig, fresh: bool) -> dict:
    from maopd.evaluation.records import load_records
    from maopd.evaluation.scoring import score_records
    from maopd.training.base_model import base_model_dir, load_or_build_base_model
    from maopd.training.checkpoint import resolve_model_dir
    from maopd.training.plot import plot_run
    from maopd.training.ptx import write_rows
    from maopd.training.trainer import train_stage

    run_dir = Path(config.run_dir)
    for path in check_run_dir(config, base_model_dir(config.base_model), fresh):  # before any work
        print(f"--fresh: starting over without {path}")
        start_over(path)
    write_record(config, run_dir, PIPELINE_RECORD)
    timings: dict[str, float] = {}
    started = time.perf_counter()

    def timed(name: str, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0
        return out

    base_model = timed("base_model", load_or_build_base_model, config.base_model)
    # PPO-ptx without its own data trains on π_0's training data (see stage_config)
    if (
        any(needs_ptx_data(stage_settings(config, stage, variant)) for stage, variant in config.stage_runs())
        and not ptx_data_path(config).is_file()
    ):
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
    team_runs = {}
    for workflow in config.teams:
        team_config = stage_config(config, TEAM, workflow, base_model, None)
        team_runs[workflow] = timed(f"team_{workflow}", train_stage, team_config, None, False)

    manifest = held_out_manifest(config)
    records = run_dir / "eval" / "records.jsonl"
    cascade, hierarchy, single = (system_names(w) for w in ("cascade", "hierarchical", "single"))
    systems = [
        (cascade.base, "cascade", base_model),
        (hierarchy.base, "hierarchical", base_model),
        (cascade.trained, "cascade", teacher),
    ]
    systems += [(VARIANT_METHODS[v], "hierarchical", resolve_model_dir(r)) for v, r in stage2_runs.items()]
    systems += [(single.base, "single", base_model), (SINGLE_AGENT_RL, "single", resolve_model_dir(single_run))]
    for workflow, team_run in team_runs.items():
        team = system_names(workflow)
        systems += [(team.base, workflow, base_model), (team.trained, workflow, resolve_model_dir(team_run))]
    for method, workflow, model_dir in systems:
        timed("evaluation", evaluate, config, method, workflow, model_dir, manifest, records)

    comparisons = [pair for pair in pipeline_comparisons(config) if all(m in {s[0] for s in systems} for m in pair)]
    summary = score_records(load_records([records]), comparisons, run_dir / "eval")
    for stage_run in (stage1_run, *stage2_runs.values(), single_run, *team_runs.values()):
        plot_run(stage_run)
    timings["total"] = time.perf_counter() - started
    report = {
        "config": to_record(config),
        "seconds": timings,
        "machine": machine(),
        "base_model": str(base_model),
        "stage1_run": str(stage1_run),
        "stage2_runs": {v: str(r) for v, r in stage2_runs.items()},
        "single_run": str(single_run),
        "team_runs": {workflow: str(r) for workflow, r in team_runs.items()},
        "eval": str(run_dir / "eval"),
    }
    write_json(run_dir / "pipeline.json", report, indent=2)
    print(format_timings(timings, report["machine"]))
    print(f"pipeline finished in {timings['total'] / 60:.1f} min; results in {run_dir}")
    return summary
