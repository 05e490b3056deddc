"""Whether two run directories hold the same results: records, metrics, configs, tables and weights.

    python scripts/compare_runs.py RUN_A RUN_B

Two runs of one config and seed on one machine should match byte for byte except for wall-clock
fields; this tells a refactoring that changes nothing from one that changes results. Ignored: keys
that hold wall-clock times (``time/*``, ``*_s``, ``duration*``, ``wall*``, ``seconds``) in JSON and
JSONL files and CSV columns, ``pipeline.json`` (the job's timings), ``eval/tables.md`` (rendered from
the CSVs, durations included), plots, TensorBoard event files and the HTML viewer. Each run
directory's own path is replaced by a placeholder in YAML files, so the two runs may live in
different folders; ``.pt`` files are compared by the tensors and values they hold. Prints every
file that differs or is missing from one side, then ``identical`` or the count; exits 1 when
anything differs, 2 when a JSON or JSONL file is damaged.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Any

import torch

from maopd.base.json_files import iter_json_lines, parse_json

SKIPPED_FILES = ("pipeline.json", "eval/tables.md")
SKIPPED_SUFFIXES = (".png", ".html")
TIMING_MARKS = ("time/", "duration", "wall", "seconds")


def is_timing(key: str) -> bool:
    return key.endswith("_s") or any(mark in key for mark in TIMING_MARKS)


def without_timings(data: Any) -> Any:
    if isinstance(data, dict):
        return {key: without_timings(value) for key, value in data.items() if not is_timing(key)}
    if isinstance(data, list):
        return [without_timings(value) for value in data]
    return data


def comparable(path: Path, run_dir: Path) -> Any:
    """What of ``path`` must match between two runs."""
    text = path.read_text(encoding="utf-8") if path.suffix in (".json", ".jsonl", ".csv", ".yaml") else None
    if path.suffix == ".jsonl":
        return [without_timings(row) for _, row in iter_json_lines(path, ValueError, "JSONL file")]
    if path.suffix == ".json":
        return without_timings(parse_json(text, str(path), ValueError))
    if path.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(text)))
        keep = [i for i, name in enumerate(rows[0] if rows else []) if not is_timing(name)]
        return [[row[i] for i in keep] for row in rows]
    if path.suffix == ".yaml":
        return text.replace(str(run_dir), "<run_dir>")
    if path.suffix == ".pt":  # by content: the archive's inner name is the writer's, not the run's
        return plain_tensors(torch.load(path, map_location="cpu", weights_only=True))
    return path.read_bytes()


def plain_tensors(data: Any) -> Any:
    """``data`` with every tensor as its dtype, shape and bytes, so that ``==`` compares values."""
    if isinstance(data, torch.Tensor):
        return (str(data.dtype), tuple(data.shape), data.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    if isinstance(data, dict):
        return {key: plain_tensors(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [plain_tensors(value) for value in data]
    return data


def compared_files(run_dir: Path) -> set[str]:
    return {
        path.relative_to(run_dir).as_posix()
        for path in run_dir.rglob("*")
        if path.is_file()
        and "tfevents" not in path.name
        and path.suffix not in SKIPPED_SUFFIXES
        and path.relative_to(run_dir).as_posix() not in SKIPPED_FILES
    }


def differences(run_a: Path, run_b: Path) -> list[str]:
    """``missing in A/B: FILE`` and ``differs: FILE`` lines, sorted by file."""
    in_a, in_b = compared_files(run_a), compared_files(run_b)
    found = [f"missing in {run_b}: {name}" for name in sorted(in_a - in_b)]
    found += [f"missing in {run_a}: {name}" for name in sorted(in_b - in_a)]
    found += [
        f"differs: {name}"
        for name in sorted(in_a & in_b)
        if comparable(run_a / name, run_a) != comparable(run_b / name, run_b)
    ]
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(Path(arg).is_dir() for arg in argv):
        print("usage: python scripts/compare_runs.py RUN_A RUN_B (two existing run directories)", file=sys.stderr)
        return 2
    try:
        found = differences(Path(argv[0]).resolve(), Path(argv[1]).resolve())
    except ValueError as exc:  # a damaged JSON(L) file, named by the message
        print(exc, file=sys.stderr)
        return 2
    print("\n".join(found) if found else "identical")
    if found:
        print(f"{len(found)} files differ")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
