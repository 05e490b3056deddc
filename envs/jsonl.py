"""Reading JSON Lines with errors that name the file and line."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_SURROGATE_ESCAPE = re.compile("[\udc80-\udcff]")


def iter_json_lines(path: str | Path, error: type[ValueError], what: str) -> Iterator[tuple[str, Any]]:
    """(``path:line``, parsed row) for each non-blank line; ``error`` names the first bad line.

    ``what`` names the file in the error for a missing file ("record file", "manifest file").
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} {path} does not exist")
    with path.open(encoding="utf-8", errors="surrogateescape") as handle:
        for number, line in enumerate(handle, start=1):
            if _SURROGATE_ESCAPE.search(line):
                raise error(f"{path}:{number}: not UTF-8 text (a binary file?)")
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{where}: invalid JSON ({exc.msg})") from None
