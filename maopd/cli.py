"""The ``maopd`` command line.

Each subcommand group is a module of ``maopd.commands`` with a ``register(subparsers)`` function,
listed in ``COMMAND_MODULES``. Subcommand modules are imported lazily-cheaply:
they must keep heavy imports (torch, transformers) inside their command functions so that
``maopd --help`` stays fast.

Errors: a problem with what the user gave (a config value, a file, a run directory, a server
address) is one line, ``maopd <command>: <message>``, and exit status 2, never a stack trace.
``main`` turns the exception types of ``user_error_types()`` into that line: ``UserError`` (which
commands raise), ``ConfigError``, malformed YAML, the project's file-format errors, and the
OS errors of a path (missing, not a directory, a directory, exists, permission denied). Any other
exception is a bug and keeps its stack trace. ``MAOPD_DEBUG=1`` shows the trace of user errors too.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMAND_MODULES = [
    "maopd.commands.play",
    "maopd.commands.retrieval",
    "maopd.commands.eval",
    "maopd.commands.world",
    "maopd.commands.train",
    "maopd.commands.sft",
]


class UserError(Exception):
    """A problem with the user's input; ``main`` prints its message as one line and exits 2."""


USER_OS_ERRORS = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError)


def user_error_types() -> tuple[type[BaseException], ...]:
    """The exception types that mean bad input, not a bug (imported only when an error happens)."""
    import yaml

    from benchmarks.eval.records import RecordError
    from envs.datasets import DatasetError
    from envs.retrieval.corpus import CorpusError
    from envs.retrieval.http_client import RetrievalServerError
    from maopd.config import ConfigError
    from maopd.paths import PathOutsideRunError

    return (UserError, ConfigError, PathOutsideRunError, yaml.YAMLError, DatasetError, RecordError,
            CorpusError, RetrievalServerError, *USER_OS_ERRORS)


def bounded_int(low: int, high: int | None = None):
    """An argparse ``type``: an integer in [low, high] (no upper bound when ``high`` is None)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            bound = f"at least {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"{value} is out of range: must be {bound}")
        return value

    parse.__name__ = "int"
    return parse


positive_int = bounded_int(1)


def _command_name(args: argparse.Namespace) -> str:
    words = [args.command]
    words += [value for name, value in vars(args).items() if name.endswith("_command") and isinstance(value, str)]
    return " ".join(words)


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
    try:
        return int(args.func(args) or 0)
    except Exception as exc:
        if os.environ.get("MAOPD_DEBUG") or not isinstance(exc, user_error_types()):
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"maopd {_command_name(args)}: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
