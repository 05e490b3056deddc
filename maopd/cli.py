"""The ``maopd`` command line.

Each subcommand group is a module of ``maopd.commands`` with a ``register(subparsers)`` function,
listed in ``COMMAND_MODULES``. Subcommand modules are imported lazily-cheaply:
they must keep heavy imports (torch, transformers) inside their command functions so that
``maopd --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = [
    "maopd.commands.play",
    "maopd.commands.retrieval",
    "maopd.commands.eval",
    "maopd.commands.world",
    "maopd.commands.train",
    "maopd.commands.sft",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="maopd",
        description="MultiAgent-OPD: train hierarchical LLM agent teams with RL and on-policy distillation.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
