"""Where a benchmark's figures came from: the commit they were measured at."""

from __future__ import annotations

import os
import subprocess

from maopd.base.paths import CLONE_DIR


def git_commit(short: bool = False) -> str:
    """HEAD of the clone the package runs from, or ``$MAOPD_COMMIT`` when running from an exported
    snapshot without .git; "unknown" for an installed package, which is no clone."""
    if os.environ.get("MAOPD_COMMIT"):
        return os.environ["MAOPD_COMMIT"]
    if not (CLONE_DIR / ".git").exists():
        return "unknown"
    try:
        return subprocess.run(
            ["git", "rev-parse", *(["--short"] if short else []), "HEAD"],
            cwd=CLONE_DIR,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
