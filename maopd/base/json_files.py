"""JSON and JSON Lines as the project reads and writes them: bounded input, finite output.

Reading (``iter_json_lines`` for a JSONL file, ``read_json_file`` or ``parse_json`` for one
document) refuses, as one error naming the file and line: a line over ``MAX_LINE_CHARS``
characters (read no further, so a file without newlines cannot fill the memory), bytes that are not
UTF-8, invalid JSON, nesting deeper than ``MAX_JSON_DEPTH`` (Python's parser would overflow its
stack; the records, manifests, corpora and metrics the project reads nest a handful of levels) and
lone surrogates (``"\\ud800"`` decodes to a string no UTF-8 file can hold). A UTF-8 byte order
mark at the start of a file is skipped, as editors on Windows write one. A JSONL file whose name
ends in ``.gz`` is read through gzip (committed results keep their records so).

Writing (``json_text``, and ``write_json`` for a whole file): NaN and infinities are not JSON;
Python's ``json`` writes them as ``NaN``/``Infinity``, which other readers refuse. ``json_text``
writes each as ``null`` instead and logs a warning naming the file and the field, so a file is
always standard JSON and the lost value is reported.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from maopd.base.atomic import truncate_file, write_text_atomically

MAX_JSON_DEPTH = 64
MAX_LINE_CHARS = 64 * 2**20

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_UNDECODABLE_BYTE = re.compile("[\udc80-\udcff]")  # what errors="surrogateescape" makes of a byte that is not UTF-8

logger = logging.getLogger(__name__)


def _input_problem(value: Any) -> str | None:
    """What ``value`` (parsed JSON) holds that the project refuses, if anything."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _LONE_SURROGATE.search(item):
                return "holds a lone surrogate (an escape such as \\ud800 alone), which is not Unicode text"
        elif isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                return f"nested more than {MAX_JSON_DEPTH} levels deep"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


def parse_json(text: str, where: str, error: type[Exception]) -> Any:
    """The JSON document ``text``; ``error`` (the caller's error class) names ``where`` and the problem."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        at = f" at line {exc.lineno}, column {exc.colno}" if "\n" in text.rstrip("\n") else ""
        raise error(f"{where}: invalid JSON ({exc.msg}{at})") from None
    except ValueError:  # an integer of more digits than Python converts (4300)
        raise error(f"{where}: a number with more than 4300 digits") from None
    except RecursionError:
        raise error(f"{where}: nested more than {MAX_JSON_DEPTH} levels deep") from None
    problem = _input_problem(value)
    if problem is not None:
        raise error(f"{where}: {problem}")
    return value


def _check_file(path: Path, error: type[Exception], what: str) -> None:
    if path.is_dir():
        raise error(f"{what} {path} is a directory; give a file")
    if not path.is_file():
        raise error(f"{what} {path} does not exist")


def read_json_file(path: str | Path, error: type[Exception], what: str) -> Any:
    """The JSON document in ``path``; ``error`` names the file and the problem (``what`` names
    the kind of file for a missing one: "score matrix")."""
    path = Path(path)
    _check_file(path, error, what)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text (a binary file?)") from None
    return parse_json(text, str(path), error)


def iter_json_lines(path: str | Path, error: type[Exception], what: str) -> Iterator[tuple[str, Any]]:
    """(``path:line``, parsed row) for each non-blank line; ``error`` names the first bad line.

    ``what`` names the file in the error for a missing file ("record file", "manifest file").
    """
    path = Path(path)
    _check_file(path, error, what)
    opened = (
        gzip.open(path, "rt", encoding="utf-8-sig", errors="surrogateescape")
        if path.suffix == ".gz"
        else path.open(encoding="utf-8-sig", errors="surrogateescape")
    )
    number = 0
    try:
        with opened as handle:
            while line := handle.readline(MAX_LINE_CHARS + 1):
                number += 1
                where = f"{path}:{number}"
                if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
                    raise error(f"{where}: a line longer than {MAX_LINE_CHARS:,} characters; is this a JSONL file?")
                if _UNDECODABLE_BYTE.search(line):
                    raise error(f"{where}: not UTF-8 text (a binary file?)")
                if line.strip():
                    yield where, parse_json(line, where, error)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # a damaged or cut .gz file
        raise error(f"{path}:{number + 1}: not a readable gzip file ({exc}); write it again") from None


def drop_torn_last_line(path: str | Path, shown_chars: int = 200) -> str | None:
    """Truncate a JSONL file that a crash cut short mid-append to its last complete line; the start
    (``shown_chars`` characters) of the line dropped, None when the file ends in a newline or is
    empty. Reads backwards from the end, so the rest of the file is never loaded."""
    block_bytes = 1 << 16
    with Path(path).open("rb") as handle:
        end = cut = handle.seek(0, 2)
        while cut > 0:
            start = max(0, cut - block_bytes)
            handle.seek(start)
            block = handle.read(cut - start)
            if cut == end and block.endswith(b"\n"):
                return None
            newline = block.rfind(b"\n")
            if newline >= 0:
                cut = start + newline + 1
                break
            cut = start
        if end == 0:
            return None
        handle.seek(cut)
        head = handle.read(4 * shown_chars)  # a UTF-8 character has at most 4 bytes
    truncate_file(path, cut)
    return head.decode("utf-8", errors="replace")[:shown_chars]


def _finite(value: Any, field: str, replaced: list[tuple[str, float]]) -> Any:
    """``value`` with every NaN or infinity replaced by None, each recorded in ``replaced``."""
    if isinstance(value, float) and not math.isfinite(value):
        replaced.append((field, value))
        return None
    if isinstance(value, dict):
        return {key: _finite(item, f"{field}.{key}" if field else str(key), replaced) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item, f"{field}[{i}]", replaced) for i, item in enumerate(value)]
    return value


def json_text(value: Any, where: str, **options: Any) -> str:
    """``json.dumps(value, **options)`` with every NaN or infinity written as ``null``, each logged
    as a warning naming ``where`` (the file) and the field."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:  # a non-finite float somewhere: find and replace each one
        replaced: list[tuple[str, float]] = []
        text = json.dumps(_finite(value, "", replaced), allow_nan=False, **options)
        for field, number in replaced:
            logger.warning("%s: %s is %s, not a JSON number; written as null", where, field or "the value", number)
        return text


def write_json(path: str | Path, value: Any, **options: Any) -> Path:
    """Write ``value`` to ``path`` as ``json_text`` (UTF-8, a final newline) through the one writer
    (``maopd.base.atomic``); returns the path."""
    return write_text_atomically(path, json_text(value, str(path), **options) + "\n")
