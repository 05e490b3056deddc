"""The root of the errors that mean bad input, not a bug.

Every user-facing error class derives from ``UserError`` (keeping its other bases, such as
``ValueError``), so ``maopd``'s command line catches one type and prints its message as one line.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input; ``maopd`` prints its message as one line and exits 2."""
