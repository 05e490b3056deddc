"""The ``maopd`` command line.

Each package contributes its subcommands through a ``register(subparsers)`` function in its own
``cli`` module, listed in ``COMMAND_MODULES``. Subcommand modules are imported lazily-cheaply:
they must keep heavy imports (torch, transformers) inside their command functions so that
``maopd --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = [
    "envs.cli",
    "envs.retrieval.cli",
    "benchmarks.eval.cli",
    "envs.synthwiki.cli",
    "training.cli",
    "training.sft_cli",
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
