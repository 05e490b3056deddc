"""Memory and disk soak: many tiny CPU training steps; does RSS stay flat, do files rotate?

Runs ``train_stage`` on the tiny Stage I config (tiny random Qwen3, B questions × G trajectories,
short generations) with checkpoints every ``--checkpoint-every`` steps (``keep_last`` 2), samples
every step (``keep_samples`` 5), TensorBoard and ``metrics.jsonl`` logging. After every step it
records the process's resident set size (VmRSS) and the size of each part of the run directory.

The claim checked: RSS grows by less than ``--bound-mb`` between step ``--warmup`` and the last
step (allocator pools, caches and the tokenizer are warm by then), and the checkpoints and
samples directories stop growing once rotation starts. ``metrics.jsonl`` and the TensorBoard
events grow by a constant amount per step by design; their per-step growth is reported.

    OMP_NUM_THREADS=1 python benchmarks/memory_soak.py --steps 200

writes ``benchmarks/results/memory_soak/memory_soak.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from maopd.base.arguments import positive_float, positive_int
from maopd.base.atomic import write_path_atomically, write_text_atomically

RESULTS = Path(__file__).resolve().parent / "results"


def rss_mb() -> float:
    """This process's resident set size (Linux ``/proc/self/status``), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status (Linux only)")


def tree_bytes(path: Path) -> int:
    """Bytes in a file, or in all files under a directory (0 if it does not exist yet)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def disk_usage(run_dir: Path) -> dict[str, float]:
    checkpoints = run_dir / "checkpoints"
    return {
        "checkpoints_mb": tree_bytes(checkpoints) / 2**20,
        "checkpoint_dirs": len(list(checkpoints.glob("step_*"))),
        "samples_files": len(list((run_dir / "samples").glob("*.jsonl"))),
        "metrics_kb": tree_bytes(run_dir / "metrics.jsonl") / 1024,
        "tensorboard_kb": tree_bytes(run_dir / "tb") / 1024,
    }


def run_soak(args: argparse.Namespace, run_dir: Path) -> list[dict[str, float]]:
    """Train ``args.steps`` steps, measuring after each one."""
    from maopd.training import trainer as trainer_module
    from maopd.training.config import load_config

    overrides = [
        f"run_dir={run_dir}",
        f"steps={args.steps}",
        f"rollout.batch_size={args.batch_size}",
        f"rollout.group_size={args.group_size}",
        f"rollout.max_new_tokens={args.max_new_tokens}",
        "env.max_steps=3",
        "optim.minibatches=1",
        f"checkpoint.every={args.checkpoint_every}",
        "checkpoint.keep_last=2",
        "logging.sample_every=1",
        "logging.keep_samples=5",
        "logging.progress=true",
    ]
    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "tiny_cpu_stage1.yaml", overrides)
    samples: list[dict[str, float]] = []
    measured_step = trainer_module.Trainer.train_step

    def train_step_then_measure(trainer):
        metrics = measured_step(trainer)
        # measured before the loop logs and saves this step, so disk is as of the previous step
        samples.append(
            {"step": trainer.step, "rss_mb": rss_mb(), "time_s": time.perf_counter() - started, **disk_usage(run_dir)}
        )
        return metrics

    trainer_module.Trainer.train_step = train_step_then_measure
    started = time.perf_counter()
    try:
        trainer_module.train_stage(config, resume=False)
    finally:
        trainer_module.Trainer.train_step = measured_step
    samples.append(
        {
            "step": args.steps,
            "rss_mb": rss_mb(),
            "time_s": time.perf_counter() - started,
            **disk_usage(run_dir),
            "after_run": True,
        }
    )
    return samples


def summarize(samples: list[dict[str, float]], args: argparse.Namespace) -> dict:
    steps = np.array([s["step"] for s in samples[:-1]])
    rss = np.array([s["rss_mb"] for s in samples[:-1]])
    after_warmup = steps >= args.warmup
    slope = float(np.polyfit(steps[after_warmup], rss[after_warmup], 1)[0])
    at_warmup = float(rss[steps == args.warmup][0])
    growth = float(rss[-1] - at_warmup)
    peak_growth = float(rss[after_warmup].max() - at_warmup)
    final = samples[-1]
    per_step = {
        name: (final[name] - samples[args.warmup - 1][name]) / (args.steps - args.warmup + 1)
        for name in ("metrics_kb", "tensorboard_kb")
    }
    return {
        "rss_mb": {
            "step_1": float(rss[0]),
            f"step_{args.warmup}": at_warmup,
            f"step_{args.steps}": float(rss[-1]),
            "peak_after_warmup": float(rss[after_warmup].max()),
        },
        "rss_growth_mb": growth,
        "rss_peak_growth_mb": peak_growth,
        "rss_slope_mb_per_100_steps": 100 * slope,
        "bound_mb": args.bound_mb,
        "within_bound": peak_growth < args.bound_mb,
        "checkpoint_dirs_at_end": final["checkpoint_dirs"],
        "checkpoints_mb_max": max(s["checkpoints_mb"] for s in samples),
        "samples_files_max": max(s["samples_files"] for s in samples),
        "metrics_kb_per_step": per_step["metrics_kb"],
        "tensorboard_kb_per_step": per_step["tensorboard_kb"],
        "seconds": final["time_s"],
    }


def plot(samples: list[dict[str, float]], path: Path, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s["step"] for s in samples[:-1]]
    # One unit per panel: memory in MiB, disk in MiB (linear), file counts on their own.
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    top.plot(steps, [s["rss_mb"] for s in samples[:-1]], label="RSS")
    top.axvline(args.warmup, color="grey", linestyle=":", label=f"warm-up ends (step {args.warmup})")
    top.set_ylabel("resident memory (MiB)")
    top.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    top.set_title(f"Tiny Stage I soak: {args.steps} steps, B={args.batch_size}, G={args.group_size}")
    for (name, scale, label), style in zip(
        (
            ("checkpoints_mb", 1, "checkpoints/"),
            ("metrics_kb", 1 / 1024, "metrics.jsonl"),
            ("tensorboard_kb", 1 / 1024, "tb/"),
        ),
        ("-", "--", "-."),
    ):
        middle.plot(steps, [s[name] * scale for s in samples[:-1]], linestyle=style, label=label)
    middle.set_ylabel("disk used (MiB)")
    middle.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    bottom.plot(steps, [s["samples_files"] for s in samples[:-1]], label="samples/ files", drawstyle="steps-post")
    bottom.yaxis.get_major_locator().set_params(integer=True)
    bottom.set_xlabel("training step")
    bottom.set_ylabel("files in samples/ (count)")
    bottom.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    for axis in (top, middle, bottom):
        axis.xaxis.get_major_locator().set_params(integer=True)
        axis.grid(alpha=0.3)
    fig.tight_layout()
    write_path_atomically(path, lambda temporary: fig.savefig(temporary, dpi=110))
    plt.close(fig)


def write_markdown(summary: dict, path: Path, command: str) -> None:
    s = summary
    verdict = "within" if s["within_bound"] else "**over**"
    lines = [
        "# Memory and disk soak",
        "",
        f"Command: `{command}`",
        "",
        (
            f"Bound: RSS may grow by less than {s['bound_mb']:.0f} MiB between the end of warm-up and the "
            f"last step (peak after warm-up minus RSS at warm-up). Measured: {s['rss_peak_growth_mb']:.1f} MiB, "
            f"{verdict} the bound."
        ),
        "",
        "| measure | value |",
        "|---|---|",
        *(f"| RSS at {k.replace('_', ' ')} | {v:.1f} MiB |" for k, v in s["rss_mb"].items()),
        f"| RSS growth, warm-up → last step | {s['rss_growth_mb']:+.1f} MiB |",
        f"| RSS trend after warm-up (least squares) | {s['rss_slope_mb_per_100_steps']:+.2f} MiB per 100 steps |",
        f"| checkpoint directories at the end (keep_last 2) | {s['checkpoint_dirs_at_end']} |",
        f"| checkpoints/ largest size | {s['checkpoints_mb_max']:.2f} MiB |",
        f"| samples/ most files (keep_samples 5) | {s['samples_files_max']} |",
        f"| metrics.jsonl growth | {s['metrics_kb_per_step']:.2f} KiB per step (linear by design) |",
        f"| TensorBoard events growth | {s['tensorboard_kb_per_step']:.2f} KiB per step (linear by design) |",
        f"| wall time | {s['seconds']:.0f} s |",
        "",
        "![RSS and disk over steps](memory_soak.png)",
        "",
    ]
    write_text_atomically(path, "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=positive_int, default=200)
    parser.add_argument("--warmup", type=positive_int, default=50, help="RSS growth is measured from this step")
    parser.add_argument("--bound-mb", type=positive_float, default=50.0)
    parser.add_argument("--batch-size", type=positive_int, default=2)
    parser.add_argument("--group-size", type=positive_int, default=2)
    parser.add_argument("--max-new-tokens", type=positive_int, default=8)
    parser.add_argument("--checkpoint-every", type=positive_int, default=10)
    parser.add_argument("--run-dir", help="keep the run here (default: a temporary directory)")
    parser.add_argument(
        "--out", default=str(RESULTS / "memory_soak" / "memory_soak"), help="path prefix of .json/.md/.png"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.warmup < args.steps:
        parser.error("--warmup must be in [1, --steps)")
    command = "OMP_NUM_THREADS=1 python benchmarks/memory_soak.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(args.run_dir or Path(scratch) / "run")
        samples = run_soak(args, run_dir)
    summary = summarize(samples, args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(
        out.with_suffix(".json"),
        json.dumps(
            {"command": command, "threads": os.environ.get("OMP_NUM_THREADS"), "summary": summary, "per_step": samples},
            indent=1,
        )
        + "\n",
    )
    write_markdown(summary, out.with_suffix(".md"), command)
    plot(samples, out.with_suffix(".png"), args)
    print(json.dumps(summary, indent=1))
    return 0 if summary["within_bound"] else 1


if __name__ == "__main__":
    sys.exit(main())
