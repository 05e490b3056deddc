"""Where a benchmark's figures came from: the commit they were measured at."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def git_commit(short: bool = False) -> str:
    """HEAD of the checkout, or ``$MAOPD_COMMIT`` when running from an exported snapshot without .git."""
    if os.environ.get("MAOPD_COMMIT"):
        return os.environ["MAOPD_COMMIT"]
    try:
        return subprocess.run(
            ["git", "rev-parse", *(["--short"] if short else []), "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
