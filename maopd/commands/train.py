"""``maopd train`` (the main job, or one stage from a config file), ``maopd experiment`` and ``maopd plot``."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from maopd.base.arguments import seed_int
from maopd.base.errors import UserError
from maopd.base.paths import refuse_overwriting_inputs

SEEDS_HELP = (
    "the pipeline once per training seed, all at once with one thread each (<run_dir>/seed_<s>), "
    "then the report pooled over them (<run_dir>/report)"
)


def _in_file(path: str, exc: Exception, label: str = "") -> str:
    """``exc``'s message, led by the config file (``label path``) unless it already names it."""
    return str(exc) if str(path) in str(exc) else f"{label}{path}: {exc}"


def _train(args: argparse.Namespace) -> int:
    from maopd.base.config import ConfigError
    from maopd.base.run_dir import CONFIG_FILE
    from maopd.training.config import load_config
    from maopd.training.trainer import RUN_STOPPED, train_stage

    if args.config is None:
        if args.resume:
            raise UserError(
                "--resume applies to one stage (--config FILE); the pipeline always resumes "
                "what its run directory holds under the same config"
            )
        return _pipeline("train", args.preset, args.overrides, args.run_dir, args.fresh, args.seeds)
    if args.seeds:
        raise UserError(
            "--seeds applies to the pipeline (no --config); to train one stage with another seed, pass seed=N"
        )
    try:
        config = load_config(args.config, args.overrides)
        if args.run_dir is not None:
            config = dataclasses.replace(config, run_dir=args.run_dir)  # checked again, like the file's
    except ConfigError as exc:  # a config the command cannot run: one line, exit status 2, nothing written
        raise UserError(_in_file(args.config, exc)) from None
    refuse_overwriting_inputs(
        [("--config", args.config)], [("the run's config record", Path(config.run_dir) / CONFIG_FILE)]
    )
    resume = True if args.resume else (False if args.fresh else None)
    try:
        run_dir = train_stage(config, resume=resume)
    except RUN_STOPPED as exc:  # not bad input: the run diverged or its engine failed; one line, exit status 1
        raise SystemExit(f"maopd train: {exc}") from exc
    print(f"run directory: {run_dir}")
    return 0


def _pipeline(
    command: str,
    preset: str,
    overrides: list[str],
    run_dir: str | None,
    fresh: bool = False,
    seeds: list[int] | None = None,
) -> int:
    from maopd.base.config import ConfigError
    from maopd.pipeline.config import load_experiment
    from maopd.pipeline.job import run_pipeline
    from maopd.pipeline.resume import PIPELINE_RECORD
    from maopd.pipeline.seeds import run_seeds
    from maopd.training.trainer import RUN_STOPPED

    try:
        config = load_experiment(preset, overrides)
        if run_dir is not None:
            config = dataclasses.replace(config, run_dir=run_dir)  # checked again, like the file's
    except ConfigError as exc:
        raise UserError(_in_file(preset, exc, "preset ")) from None
    record = Path(config.run_dir) / PIPELINE_RECORD
    refuse_overwriting_inputs([("preset", preset if Path(preset).is_file() else None)], [("the run's record", record)])
    if seeds:
        try:
            run_seeds(config, seeds, fresh=fresh)
        except RuntimeError as exc:  # a seed's job failed: its log says why
            raise SystemExit(f"maopd {command}: {exc}") from exc
        return 0
    try:
        run_pipeline(config, fresh=fresh)
    except RUN_STOPPED as exc:  # not bad input: the run diverged or its engine failed; one line, exit status 1
        raise SystemExit(f"maopd {command}: {exc}") from exc
    return 0


def _experiment(args: argparse.Namespace) -> int:
    return _pipeline("experiment", args.name, args.overrides, args.run_dir, args.fresh, args.seeds)


def _plot(args: argparse.Namespace) -> int:
    from maopd.training.plot import plot_runs, stage_dirs
    from maopd.training.run_logging import METRICS_FILE

    metrics = [("the metrics", stage / METRICS_FILE) for stage in stage_dirs(args.run_dir)]
    refuse_overwriting_inputs(metrics, [("--out", args.out)])

    try:
        paths = plot_runs(args.run_dir, args.out)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    for path in paths:
        print(path)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train",
        help="the main job (π_0 → Stage I → Stage II → evaluation), or one stage with --config",
        description="Without --config: the whole pipeline on the embedded world (configs/pipeline_<preset>.yaml). "
        "With --config: train one stage. Values: dataclass defaults < stage < variant < FILE < key=value overrides. "
        "Both resume automatically from what the run directory holds, only under the config that made it.",
    )
    train.add_argument("--config", help="YAML config of one stage, e.g. configs/tiny_cpu_stage1.yaml")
    train.add_argument(
        "--preset",
        default="default",
        help="pipeline preset when no --config is given: default, smoke, quick (the default cut to 10 RL steps"
        " per stage), table3, paper_beta, or a YAML path",
    )
    train.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="overrides, e.g. steps=3 variant=prompted_critic (stage) or stage1.steps=5 (pipeline)",
    )
    train.add_argument("--run-dir", help="write the run here (overrides run_dir)")
    group = train.add_mutually_exclusive_group()
    group.add_argument("--resume", action="store_true", help="one stage: require a checkpoint to resume from")
    group.add_argument(
        "--fresh",
        action="store_true",
        help="one stage: refuse to continue a run that has checkpoints; the pipeline: start over "
        "the stages (and what depends on them) that its run directory holds under another config",
    )
    train.add_argument("--seeds", type=seed_int, nargs="+", metavar="SEED", help=SEEDS_HELP)
    train.set_defaults(func=_train)

    experiment = subparsers.add_parser(
        "experiment",
        help="a study over the pipeline: table3 trains and evaluates the paper's Table 3 variants",
    )
    experiment.add_argument("name", help="table3, or a pipeline YAML path")
    experiment.add_argument("overrides", nargs="*", metavar="key=value")
    experiment.add_argument("--run-dir", help="write the runs here (overrides run_dir)")
    experiment.add_argument(
        "--fresh",
        action="store_true",
        help="start over the stages (and what depends on them) made under another config",
    )
    experiment.add_argument("--seeds", type=seed_int, nargs="+", metavar="SEED", help=SEEDS_HELP)
    experiment.set_defaults(func=_experiment)

    plot = subparsers.add_parser("plot", help="draw a run's learning curves to PNG, one per stage")
    plot.add_argument(
        "run_dir",
        help="a stage's run directory (with metrics.jsonl) or the directory "
        "`maopd train` writes (every stage in it is plotted)",
    )
    plot.add_argument(
        "--out",
        help="PNG path for one stage, a directory for several (default: each stage's plots/learning_curves.png)",
    )
    plot.set_defaults(func=_plot)
