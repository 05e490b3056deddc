"""Training-step time with each rollout engine (``rollout.engine``), in alternating repeats.

Each repeat trains a fresh run of ``--steps`` steps from the same config and seed with every
engine in ``--engines``, in an order that alternates from one repeat to the next (so that other
load on the machine, and its drift, hits every engine alike). Per run it records the start-up
(building the trainer, the vLLM engine included) and each step's ``time/*`` metrics (rollout,
update, and for vLLM the weight sync and its check). The summary gives, per engine, the median
step time over every step but each run's first (a warm-up), and the median over repeats of the
ratio of each engine's step time to the first engine's. Needs the vLLM venv for ``vllm``
(``bash scripts/setup_vllm.sh``). Writes ``OUT/rollout_engines.json`` and ``OUT/README.md``, both
with the command that produced them.

    python benchmarks/rollout_engines.py --config configs/tiny_cpu_stage1.yaml --steps 4 --repeats 3 \\
        --out runs/benchmarks/rollout_engines model.tiny.head_dim=32
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from maopd.base.arguments import positive_int
from maopd.base.atomic import write_text_atomically
from maopd.base.json_files import write_json
from maopd.base.machine import machine
from maopd.envs.actions import ROLES
from maopd.training.config import load_config
from maopd.training.trainer import Trainer

# What a step's time is spent on (its ``time/*_s`` metrics; the two last with vLLM only).
STEP_PARTS = ("rollout", "prepare", "update", "weight_sync", "sync_check")


def timed_run(config_path: str, overrides: list[str], engine: str, steps: int, run_dir: Path) -> dict:
    """Start-up seconds and each step's ``time/*`` metrics of one run with ``engine``."""
    config = load_config(config_path, [*overrides, f"rollout.engine={engine}", f"run_dir={run_dir}"])
    started = time.perf_counter()
    trainer = Trainer(config)
    try:
        startup_s = time.perf_counter() - started
        threads = {"trainer": torch.get_num_threads()}
        if trainer.engine is not None:
            threads["engine_worker"] = trainer.engine.policy.engine_threads
        times = []
        for _ in range(steps):
            metrics = trainer.train_step()
            generated = sum(
                metrics[f"{role}/sequences"] * metrics[f"{role}/generated_tokens"]
                for role in ROLES
                if f"{role}/sequences" in metrics
            )
            times.append(
                {
                    **{name: value for name, value in metrics.items() if name.startswith("time/")},
                    "generated_tokens": generated,
                    "rollout_tokens_per_s": generated / metrics["time/rollout_s"],
                }
            )
    finally:
        trainer.close()
    return {"engine": engine, "startup_s": startup_s, "threads": threads, "steps": times}


def summary(runs: list[dict], engines: list[str]) -> dict:
    """Per engine the median step time after each run's first step; per repeat the ratios."""

    def warm_step_s(run: dict) -> float:
        return statistics.median(step["time/step_s"] for step in run["steps"][1:] or run["steps"])

    def warm_median(engine_runs: list[dict], metric: str) -> float:
        return statistics.median(step.get(metric, 0.0) for run in engine_runs for step in run["steps"][1:])

    by_engine = {engine: [run for run in runs if run["engine"] == engine] for engine in engines}
    result = {
        engine: {
            "median_step_s": statistics.median(warm_step_s(run) for run in engine_runs),
            "median_startup_s": statistics.median(run["startup_s"] for run in engine_runs),
            "median_parts_s": {part: warm_median(engine_runs, f"time/{part}_s") for part in STEP_PARTS},
            "median_generated_tokens": warm_median(engine_runs, "generated_tokens"),
            "median_rollout_tokens_per_s": warm_median(engine_runs, "rollout_tokens_per_s"),
        }
        for engine, engine_runs in by_engine.items()
    }
    first = engines[0]
    for engine in engines[1:]:
        ratios = [warm_step_s(a) / warm_step_s(b) for a, b in zip(by_engine[engine], by_engine[first])]
        result[engine][f"median_step_time_ratio_to_{first}"] = statistics.median(ratios)
    return result


def readme(result: dict) -> str:
    lines = [
        "# Training-step time by rollout engine",
        "",
        "Command (from the repository root):",
        "",
        f"    {result['command']}",
        "",
        f"Machine: {result['machine']['platform']}, {result['machine']['cpus']} CPUs; load average at the end "
        f"{', '.join(f'{x:.2f}' for x in result['machine']['load_average_at_end'])}.",
        "",
        "| engine | median step s (after the first) | median start-up s | step time / first engine's "
        "| generated tokens per step | rollout tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    threads = {
        run["engine"]: ", ".join(f"{name} {count}" for name, count in run["threads"].items()) for run in result["runs"]
    }
    first = result["engines"][0]
    for engine, row in result["summary"].items():
        ratio = row.get(f"median_step_time_ratio_to_{first}", 1.0)
        lines.append(
            f"| {engine} | {row['median_step_s']:.3f} | {row['median_startup_s']:.1f} | {ratio:.3f} "
            f"| {row['median_generated_tokens']:.0f} | {row['median_rollout_tokens_per_s']:.0f} |"
        )
    lines += [
        "",
        "Median seconds per step after the first, by part:",
        "",
        "| engine | " + " | ".join(STEP_PARTS) + " |",
        "|---|" + "---|" * len(STEP_PARTS),
    ]
    for engine, row in result["summary"].items():
        lines.append(f"| {engine} | " + " | ".join(f"{row['median_parts_s'][part]:.3f}" for part in STEP_PARTS) + " |")
    lines += [
        "",
        "Torch threads (the trainer's; vLLM's worker, which computes while the trainer waits on it): "
        + "; ".join(f"{engine}: {split}" for engine, split in threads.items()),
        "",
        "Every run's step times are in `rollout_engines.json`.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a stage config file (configs/*.yaml)")
    parser.add_argument("--engines", nargs="+", default=["continuous", "vllm"])
    parser.add_argument("--steps", type=positive_int, default=4, help="steps per run (the first is a warm-up)")
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--out", required=True, help="a directory for rollout_engines.json and README.md")
    parser.add_argument("overrides", nargs="*", help="key=value config overrides for every run")
    args = parser.parse_args(argv)

    overrides = [*args.overrides, f"steps={args.steps}", "logging.progress=false"]
    runs = []
    with tempfile.TemporaryDirectory(prefix="rollout-engines-") as work:
        for repeat in range(args.repeats):
            order = args.engines if repeat % 2 == 0 else args.engines[::-1]
            for engine in order:
                run = timed_run(args.config, overrides, engine, args.steps, Path(work) / f"{engine}_{repeat}")
                runs.append({"repeat": repeat, **run})
    result = {
        "command": "python benchmarks/rollout_engines.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {**machine(), "load_average_at_end": os.getloadavg()},
        "config": args.config,
        "overrides": overrides,
        "engines": args.engines,
        "runs": runs,
        "summary": summary(runs, args.engines),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "rollout_engines.json", result, indent=2)
    write_text_atomically(out / "README.md", readme(result))
    print(readme(result))
    return result


if __name__ == "__main__":
    main()
