"""``maopd config show``: the main job's config as it resolves, and where each value came from."""

from __future__ import annotations

import argparse
import json

from maopd.base.errors import UserError


def _show(args: argparse.Namespace) -> int:
    from maopd.base.config import dump_yaml, set_dotted
    from maopd.pipeline.config import DEFAULT_PRESET
    from maopd.pipeline.layers import matching, resolve

    settings = resolve(args.preset or DEFAULT_PRESET, args.overrides)
    if args.explain is None:
        tree: dict = {}
        for setting in settings:
            set_dotted(tree, setting.key, setting.value)
        print(dump_yaml(tree), end="")
        return 0
    found = matching(settings, args.explain)
    if not found:
        raise UserError(
            f"--explain {args.explain}: no such setting; give a dotted key of the resolved config "
            "(maopd config show lists them), e.g. seed, eval.attempts, stage1.steps or stages.steps"
        )
    for setting in found:
        print(f"{setting.key}: {json.dumps(setting.value, ensure_ascii=False)}    [set by: {setting.layer}]")
    for text in dict.fromkeys(setting.help for setting in found):
        print(f"help: {text}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    config = subparsers.add_parser("config", help="show the main job's resolved config and where each value came from")
    commands = config.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    show = commands.add_parser(
        "show",
        help="print the resolved config; --explain KEY: its value, help and the layer that set it",
        description="The main job's config as `maopd train --preset P KEY=VALUE...` would run it: the pipeline's "
        "settings, then each stage run's (stage1, stage2_<variant>, single). Layers, lowest first: default, "
        "stage settings, variant settings, preset file, experiment, command line, the pipeline.",
    )
    show.add_argument(
        "--preset",
        help="a preset (default, smoke), an experiment (quick, table3, paper_beta) or a pipeline YAML path; "
        "without it, the preset `maopd train` runs",
    )
    show.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="settings as `maopd train` takes them")
    show.add_argument(
        "--explain",
        metavar="KEY",
        help="one setting: its value, its help and the layer that set it; stages.K names K in every stage run",
    )
    show.set_defaults(func=_show)
