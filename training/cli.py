"""``maopd train`` (one training stage from a config file) and ``maopd plot RUN_DIR``."""

from __future__ import annotations

import argparse


def _train(args: argparse.Namespace) -> int:
    from maopd.config import ConfigError
    from training.config import load_config
    from training.trainer import TrainingStopped, train_stage

    if args.config is None:
        raise SystemExit(
            "maopd train: --config FILE is required (e.g. configs/tiny_cpu_stage1.yaml); "
            "running the whole pipeline without a config is not available yet"
        )
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as exc:
        raise SystemExit(f"maopd train: {args.config}: {exc}") from exc
    if args.run_dir:
        config.run_dir = args.run_dir
    resume = True if args.resume else (False if args.fresh else None)
    try:
        run_dir = train_stage(config, resume=resume)
    except TrainingStopped as exc:
        raise SystemExit(f"maopd train: {exc}") from exc
    print(f"run directory: {run_dir}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from training.plot import plot_run

    print(plot_run(args.run_dir, args.out))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train", help="train one stage (Stage I cascade or Stage II hierarchy) from a YAML config",
        description="Train one stage. Values: dataclass defaults < stage < variant < FILE < key=value overrides. "
        "Resumes automatically when the run directory has checkpoints.",
    )
    train.add_argument("--config", help="YAML config, e.g. configs/tiny_cpu_stage1.yaml")
    train.add_argument("overrides", nargs="*", metavar="key=value",
                       help="overrides, e.g. steps=3 variant=prompted_critic rollout.batch_size=2")
    train.add_argument("--run-dir", help="write the run here (overrides run_dir)")
    group = train.add_mutually_exclusive_group()
    group.add_argument("--resume", action="store_true", help="require a checkpoint to resume from")
    group.add_argument("--fresh", action="store_true", help="refuse to continue a run that has checkpoints")
    train.set_defaults(func=_train)

    plot = subparsers.add_parser("plot", help="draw a run's learning curves to PNG")
    plot.add_argument("run_dir", help="a run directory with metrics.jsonl")
    plot.add_argument("--out", help="PNG path (default RUN_DIR/plots/learning_curves.png)")
    plot.set_defaults(func=_plot)
