"""The root of the errors that mean bad input, not a bug.

Every user-facing error class derives from ``UserError`` (keeping its other bases, such as
``ValueError``), so ``maopd``'s command line catches one type and prints its message as one line.
"""

from __future__ import annotations

import traceback
from pathlib import Path


class UserError(Exception):
    """A problem with the user's input; ``maopd`` prints its message as one line and exits 2."""


def failed_in(exc: BaseException, path: str | Path) -> str:
    """What a user's file raised, as one line: `` at line N: Type: message``, N the last line of
    ``path`` on the traceback (left out when the file is not on it)."""
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == str(path)]
    where = f" at line {lines[-1]}" if lines else ""
    return f"{where}: {type(exc).__name__}: {' '.join(str(exc).split())}"
