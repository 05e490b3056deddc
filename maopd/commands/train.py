"""``maopd train`` (the main job, or one stage from a config file), ``maopd experiment`` and ``maopd plot``."""

from __future__ import annotations

import argparse


def _train(args: argparse.Namespace) -> int:
    from maopd.config import ConfigError
    from training.config import load_config
    from training.trainer import TrainingStopped, train_stage

    if args.config is None:
        return _pipeline(args.preset, args.overrides, args.run_dir)
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


def _pipeline(preset: str, overrides: list[str], run_dir: str | None) -> int:
    from maopd.config import ConfigError
    from maopd.pipeline import load_experiment, run_pipeline
    from training.trainer import TrainingStopped

    try:
        config = load_experiment(preset, overrides)
    except (ConfigError, ValueError) as exc:
        raise SystemExit(f"maopd: preset {preset}: {exc}") from exc
    if run_dir:
        config.run_dir = run_dir
    try:
        run_pipeline(config)
    except (TrainingStopped, ConfigError) as exc:
        raise SystemExit(f"maopd: {exc}") from exc
    return 0


def _experiment(args: argparse.Namespace) -> int:
    return _pipeline(args.name, args.overrides, args.run_dir)


def _plot(args: argparse.Namespace) -> int:
    from training.plot import plot_runs

    try:
        paths = plot_runs(args.run_dir, args.out)
    except ValueError as exc:
        raise SystemExit(f"maopd plot: {exc}") from None
    for path in paths:
        print(path)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train", help="the main job (π_0 → Stage I → Stage II → evaluation), or one stage with --config",
        description="Without --config: the whole pipeline on the embedded world (configs/pipeline_<preset>.yaml). "
        "With --config: train one stage. Values: dataclass defaults < stage < variant < FILE < key=value overrides. "
        "Both resume automatically from what the run directory holds.",
    )
    train.add_argument("--config", help="YAML config of one stage, e.g. configs/tiny_cpu_stage1.yaml")
    train.add_argument("--preset", default="default",
                       help="pipeline preset when no --config is given: default, smoke, or a YAML path")
    train.add_argument("overrides", nargs="*", metavar="key=value",
                       help="overrides, e.g. steps=3 variant=prompted_critic (stage) or stage1.steps=5 (pipeline)")
    train.add_argument("--run-dir", help="write the run here (overrides run_dir)")
    group = train.add_mutually_exclusive_group()
    group.add_argument("--resume", action="store_true", help="require a checkpoint to resume from")
    group.add_argument("--fresh", action="store_true", help="refuse to continue a run that has checkpoints")
    train.set_defaults(func=_train)

    experiment = subparsers.add_parser(
        "experiment", help="a study over the pipeline: table3 trains and evaluates the paper's Table 3 variants",
    )
    experiment.add_argument("name", help="table3, or a pipeline YAML path")
    experiment.add_argument("overrides", nargs="*", metavar="key=value")
    experiment.add_argument("--run-dir", help="write the runs here (overrides run_dir)")
    experiment.set_defaults(func=_experiment)

    plot = subparsers.add_parser("plot", help="draw a run's learning curves to PNG, one per stage")
    plot.add_argument("run_dir", help="a stage's run directory (with metrics.jsonl) or the directory "
                      "`maopd train` writes (every stage in it is plotted)")
    plot.add_argument("--out", help="PNG path for one stage, a directory for several "
                      "(default: each stage's plots/learning_curves.png)")
    plot.set_defaults(func=_plot)
