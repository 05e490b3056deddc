"""Tuning the main job on dev, never on test: ``maopd tune eval`` and ``maopd tune beta``.

``dev_eval``: systems (a model, run or checkpoint, played in a workflow) on the dev split with the
main job's evaluation protocol (``eval.attempts`` workflows per question, one answer candidate,
temperature 0.6, top-p 0.95, macro avg@k over question types with question-bootstrap CIs, paired
differences), plus what the testbed's design needs to see: the share of workflows that search at
least once, searches per workflow, and the share that end without an answer.

``calibrate_beta``: the OPD coefficient β from gradient norms. Stage II gives Searcher tokens the
advantage β·log(π_T/π_old) (Eq. 5) and Leader/Answerer tokens role-normalised GRPO advantages
(Eq. 1), so β sets how hard the Searchers pull the shared model against the other roles. The
paper's 0.01 was set for a 7B model and its Teacher; with another model and Teacher the same β
can make the Searcher term vanish or dominate. On ``batches`` Stage II batches of dev questions
(the preset's Stage II config from π_0, with the run's Stage I as Teacher, at β = 1, the entropy
bonus and PPO-ptx off), ``training.role_gradients`` gives the Searcher gradient norm g_S and the
Leader/Answerer one g_LA on the same rows; g_S is linear in β, so β* = median(g_LA / g_S) makes
them equal and [0.3, 3]·β* keeps them within 0.3–3× of each other. A batch with g_LA = 0 (every
GRPO group shares one outcome) is left out of the median.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from envs.workflows import WORKFLOWS
from maopd.base.config import ConfigError
from maopd.pipeline.config import PipelineConfig, stage_config, stage_dir
from maopd.pipeline.job import evaluate, held_out_manifest

PAPER_OPD_BETA = 0.01


def parse_system(text: str) -> tuple[str, str, Path]:
    """``NAME=WORKFLOW:MODEL``."""
    name, sep, rest = text.partition("=")
    workflow, sep2, model = rest.partition(":")
    if not (sep and sep2 and name and model) or workflow not in WORKFLOWS:
        raise ConfigError(f"--system {text!r}: expected NAME=WORKFLOW:MODEL with WORKFLOW one of {WORKFLOWS}")
    return name, workflow, Path(model)


def search_figures(records) -> dict[str, Any]:
    """Share of workflows with at least one search, searches per workflow, share without an answer,
    and per question type the exact match of workflows with and without a search (what skipping
    search is worth: the testbed's closed-book temptation)."""
    count = max(len(records), 1)
    searches = [r.counters.get("search_actions", 0) for r in records]
    split: dict[str, dict[str, list[float]]] = {}
    for record, searched in zip(records, searches):
        split.setdefault(record.dataset, {"with_search": [], "without_search": []})[
            "with_search" if searched > 0 else "without_search"
        ].append(record.score)
    return {
        "workflows": len(records),
        "searching_share": sum(s > 0 for s in searches) / count,
        "searches_per_workflow": sum(searches) / count,
        "no_answer_share": sum(r.counters.get("no_answer", 0) > 0 for r in records) / count,
        "em_by_search": {
            dataset: {
                kind: {"workflows": len(scores), "em": sum(scores) / len(scores) if scores else None}
                for kind, scores in kinds.items()
            }
            for dataset, kinds in sorted(split.items())
        },
    }


def dev_eval(
    config: PipelineConfig, systems: list[tuple[str, str, Path]], comparisons: list[tuple[str, str]], out: Path
) -> dict[str, Any]:
    """Play and score ``systems`` on ``config.eval`` (its split must be dev); writes ``out``'s
    records.jsonl (resumable), summary.json and tables."""
    from benchmarks.eval.records import load_records
    from benchmarks.eval.scoring import score_records
    from training.checkpoint import resolve_model_dir

    if config.eval.split != "dev":
        raise ConfigError(f"eval.split: tuning runs on dev, got {config.eval.split!r}")
    names = {name for name, _, _ in systems}
    for pair in comparisons:
        if len(pair) != 2 or not set(pair) <= names:
            raise ConfigError(f"--compare {','.join(pair)!r}: expected A,B with A and B among the --system names")
    out.mkdir(parents=True, exist_ok=True)
    records_path = out / "records.jsonl"
    manifest = held_out_manifest(config)
    seconds = {}
    for name, workflow, model in systems:
        started = time.perf_counter()
        evaluate(config, name, workflow, resolve_model_dir(model), manifest, records_path)
        seconds[name] = round(time.perf_counter() - started, 1)
    records = load_records([records_path])
    summary = score_records(records, comparisons, out)
    avg = f"avg@{config.eval.attempts}"
    return {
        "split": "dev",
        "attempts": config.eval.attempts,
        "questions": len(manifest),
        "systems": {
            name: {
                "workflow": workflow,
                "model": str(model),
                "seconds": seconds[name],
                avg: summary["methods"][name]["accuracy"][avg],
                **search_figures([r for r in records if r.method == name]),
            }
            for name, workflow, model in systems
        },
        "differences": [{"a": c["a"], "b": c["b"], avg: c["differences"][avg]} for c in summary["comparisons"]],
    }


def judge_figures(model: Path, records_path: Path, limit: int | None = None) -> dict[str, Any]:
    """A model as the Prompted Critic's judge on the reports of recorded workflows (``maopd tune
    eval``'s records, which keep each workflow's trajectory): exactly the judge calls and figures of
    training (``training.critic``: ``critic/format_rate``, ``gold_rate``, ``agreement``,
    ``judge_rate``), on the first ``limit`` workflows that hold a report."""
    from benchmarks.eval.records import load_records
    from benchmarks.eval.solvers import model_policy
    from training.checkpoint import resolve_model_dir
    from training.config import CriticConfig
    from training.critic import PromptedCritic
    from training.trainer import world_report_gold

    workflows = [r.trajectory for r in load_records([records_path]) if r.trajectory and r.trajectory.get("reports")]
    if not workflows:
        raise ConfigError(
            f"{records_path}: no recorded workflow holds a report to judge; record hierarchical or "
            "cascade workflows with `maopd tune eval` first"
        )
    workflows = workflows[:limit]
    config = CriticConfig()
    policy = model_policy(str(resolve_model_dir(model)), max_new_tokens=config.max_new_tokens)
    critic = PromptedCritic(policy, config, world_report_gold(corpus=None))
    critic.searcher_rewards([[workflow] for workflow in workflows])
    return {"model": str(model), "records": str(records_path), "workflows": len(workflows), **critic.last_metrics}


def calibrate_beta(pipeline: PipelineConfig, batches: int, seed: int = 0, progress=print) -> dict[str, Any]:
    """β* from ``batches`` Stage II batches of dev questions (module docstring)."""
    from training.base_model import load_or_build_base_model
    from training.role_gradients import role_gradient_norms
    from training.trainer import Trainer

    teacher = stage_dir(pipeline, "stage1", "full")
    if not (teacher / "config.yaml").is_file():
        raise ConfigError(f"run_dir: {teacher} holds no Stage I run; run `maopd train` first (its Teacher is needed)")
    base_model = load_or_build_base_model(pipeline.base_model)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        config = replace(stage_config(pipeline, "stage2", "full", base_model, teacher), seed=seed, run_dir=scratch)
        config.advantage.opd_beta = 1.0
        config.ppo.entropy_coef = 0.0
        config.ptx.coef = 0.0
        config.env.split = "dev"
        config.rollout.first_question = 0
        config.logging.tensorboard = False
        config.logging.progress = False
        config.validate()
        trainer = Trainer(config)
        for index in range(batches):
            batch, _ = trainer.collect()
            ppo_batch, metrics = trainer.prepare(batch)
            norms = role_gradient_norms(trainer, ppo_batch)
            ratio = norms["leader_answerer"] / norms["searcher"] if norms["searcher"] > 0 else None
            rows.append(
                {
                    "batch": index,
                    **norms,
                    "beta_equal_norms": ratio,
                    "searcher_kl_k1": metrics.get("teacher/searcher_kl_k1"),
                }
            )
            progress(rows[-1])
    usable = [r["beta_equal_norms"] for r in rows if r["beta_equal_norms"] and r["leader_answerer"] > 0]
    beta = statistics.median(usable) if usable else None
    return {
        "seed": seed,
        "batches": rows,
        "usable_batches": len(usable),
        "beta_equal_norms": beta,
        "beta_range_0.3_to_3x": [0.3 * beta, 3 * beta] if beta else None,
        "paper_beta": PAPER_OPD_BETA,
        "paper_beta_norm_ratio": PAPER_OPD_BETA / beta if beta else None,
    }
