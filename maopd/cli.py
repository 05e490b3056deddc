"""The ``maopd`` command line.

Each subcommand group is a module of ``maopd.commands`` with a ``register(subparsers)`` function,
listed in ``COMMAND_MODULES``. Subcommand modules are imported lazily-cheaply:
they must keep heavy imports (torch, transformers) inside their command functions so that
``maopd --help`` stays fast.

Errors: a problem with what the user gave (a config value, a file, a run directory, a server
address) is one line, ``maopd <command>: <message>``, and exit status 2, never a stack trace.
``main`` turns ``UserError`` (``maopd.base.errors``, the root of every user-facing error: those
commands raise, ``ConfigError``, malformed YAML included, the project's file-format errors) and the
OS errors of a path (missing, not a directory, a directory, exists, permission denied, a full disk)
into that line. Any other exception is a bug and keeps its stack trace. ``MAOPD_DEBUG=1`` shows the
trace of user errors too. The line goes through ``maopd.base.secrets.redact``, as does the command
line kept with results (``args.command_line``).
An OS error of a path says what is wrong with which path and what to do (``path_error_message``).
Usage errors (an unknown option, a number out of range) are one line too, with exit status 2.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from maopd.base.errors import UserError
from maopd.base.secrets import redact

COMMAND_MODULES = [
    "maopd.commands.play",
    "maopd.commands.retrieval",
    "maopd.commands.eval",
    "maopd.commands.world",
    "maopd.commands.train",
    "maopd.commands.config",
    "maopd.commands.sft",
    "maopd.commands.tune",
    "maopd.commands.preregister",
    "maopd.commands.report",
]


USER_OS_ERRORS = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError)
# other OS errors of a path the user chose: a read-only file system, a full disk, a name too long
USER_ERRNOS = (errno.EROFS, errno.ENOSPC, errno.ENAMETOOLONG)


def is_user_error(exc: BaseException) -> bool:
    if (
        isinstance(exc, OSError)
        and exc.errno in USER_ERRNOS
        and (exc.filename is not None or exc.errno == errno.ENOSPC)
    ):
        return True
    return isinstance(exc, (UserError, *USER_OS_ERRORS))


def path_error_message(exc: OSError) -> str:
    """One line for an OS error of a path: the path, what is wrong with it, what to do."""
    path = exc.filename
    if path is None and exc.errno == errno.ENOSPC:  # a write outside ``maopd.base.atomic.writing``
        return "no space left on a device (the failed write did not say which file); free some space"
    if path is None:  # raised by the project with its own message
        return " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, FileExistsError):  # every mkdir of the project passes exist_ok=True
        return (
            f"{path} exists and is not a directory; a directory is needed there: remove the file or choose another path"
        )
    if isinstance(exc, NotADirectoryError):
        return f"{path}: not a directory (it or a parent is a file); give a path under a directory"
    if isinstance(exc, IsADirectoryError):
        return f"{path} is a directory; give a file path"
    if isinstance(exc, FileNotFoundError):
        return f"{path} does not exist; check the path"
    if isinstance(exc, PermissionError):
        return (
            f"{path}: permission denied; choose a location you may write to (or read, for an input), "
            "or change its permissions"
        )
    if exc.errno == errno.EROFS:
        return f"{path}: read-only file system; choose a writable location"
    if exc.errno == errno.ENOSPC:
        from maopd.base.atomic import no_space_message

        return no_space_message(path)
    return f"{path}: {exc.strerror or exc}"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line (with where to look), exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _command_name(args: argparse.Namespace) -> str:
    words = [args.command]
    words += [value for name, value in vars(args).items() if name.endswith("_command") and isinstance(value, str)]
    return " ".join(words)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="maopd",
        description="MultiAgent-OPD: train hierarchical LLM agent teams with RL and on-policy distillation.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # saved with results, so a URL's credentials or a key typed on the command line are redacted
    args.command_line = ["maopd", *(redact(word) for word in (sys.argv[1:] if argv is None else argv))]
    try:
        return int(args.func(args) or 0)
    except Exception as exc:
        if os.environ.get("MAOPD_DEBUG") or not is_user_error(exc):
            raise
        if isinstance(exc, OSError):
            message = path_error_message(exc)
        else:
            message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"maopd {_command_name(args)}: {redact(message)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # ``python -m maopd.cli``: run the ``maopd.cli`` module the commands import, not this ``__main__``
    # copy of it, whose ``UserError`` would be another class than the one they raise
    from maopd.cli import main as package_main

    sys.exit(package_main())
