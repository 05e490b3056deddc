"""Run k independent workflows per manifest question and save one scored record per attempt.

The runner knows nothing about environments or models: it calls ``solve(questions, seeds)``,
which must return one workflow record (envs/records.py) per question, in order. Sampling
settings (the paper's: one answer candidate per request, temperature 0.6, top-p 0.95) belong to
``solve`` (``maopd.evaluation.solvers``); ``EvalSettings`` holds only what the runner reads.

Resuming: records already in the output file for this method are skipped, never rerun, and only
under the settings that made them: ``<out>.settings.json`` records, per method, the seed and what
the caller says made its records (``made_with``: the model, workflow, sampling, corpus, ...), with
every string redacted as a saved config is (``maopd.base.secrets.redact_strings``: a URL's
credentials never reach the file), and under ``INPUTS`` each input file (the manifest, corpus,
retriever config and model) with the fingerprint of its content (``maopd.base.fingerprint``). A run under other
settings is refused, naming them; an input whose content changed since (a corpus rewritten in place)
is refused in one line naming the file. Records are appended one batch at a time with a
single write followed by fsync; a batch cut short by a crash leaves at most one partial last line,
which the next run drops before appending. One process writes an output file at a time (the lock
``<out>.lock``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from maopd.base.atomic import open_for_append, write_text_atomically, writing
from maopd.base.config import checked
from maopd.base.fingerprint import changed_input
from maopd.base.json_files import drop_torn_last_line, iter_json_lines, json_text, parse_json, read_json_file
from maopd.base.limits import BATCH
from maopd.base.lock import exclusive
from maopd.base.secrets import redact_strings
from maopd.envs.datasets import Question
from maopd.envs.records import WorkflowRecord
from maopd.evaluation.manifest import ManifestEntry
from maopd.evaluation.records import RecordError, from_workflow, record_line

Solve = Callable[[list[Question], list[int]], list[WorkflowRecord]]
# the ``made_with`` key of the input files: {name: {"file": path, "sha256": content fingerprint}}
INPUTS = "inputs"


@dataclass(frozen=True)
class EvalSettings:
    """What the runner reads: attempts per question (the paper's k = 4), batch size, seed."""

    attempts: int = checked(4, help="Independent attempts (workflows) per question; the paper's k is 4.")
    batch_size: int = checked(
        8,
        ge=1,
        **BATCH.constraint(),
        help="Attempts handed to the solver at once; their records are appended together.",
    )
    seed: int = checked(
        0, help="Seeds every attempt (each gets its own seed from it, the question and the attempt number)."
    )
    keep_trajectory: bool = checked(
        True, help="Keep each attempt's whole workflow record (its trajectory) in its eval record; false leaves it out."
    )


def attempt_seed(seed: int, dataset: str, question_id: str, attempt: int) -> int:
    """A seed per (question, attempt) that does not depend on batching or on resumption."""
    digest = hashlib.sha256(f"{seed}:{dataset}:{question_id}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def finished_keys(path: Path, method: str) -> set[tuple[str, str, int]]:
    """(dataset, question_id, attempt) already recorded for ``method``; drops a partial last line."""
    if not path.exists():
        return set()
    drop_torn_last_line(path)
    done = set()
    for where, row in iter_json_lines(path, RecordError, "record file"):
        try:
            key = (row["dataset"], str(row["question_id"]), int(row["attempt"]))
        except (KeyError, TypeError, ValueError):
            raise RecordError(f"{where}: not a record; refusing to append to this file") from None
        if row.get("method") == method:
            done.add(key)
    return done


def settings_file(out_path: Path) -> Path:
    """Where the settings that made each method's records in ``out_path`` are recorded."""
    return out_path.with_name(f"{out_path.name}.settings.json")


def check_settings(out_path: Path, method: str, made_with: Mapping[str, Any], has_records: bool) -> None:
    """Refuse to add to ``method``'s records in ``out_path`` under settings other than the ones that
    made them (``RecordError`` naming each difference); record ``made_with`` for a new method."""
    path = settings_file(out_path)
    recorded = read_json_file(path, RecordError, "settings file") if path.is_file() else {}
    if not isinstance(recorded, dict):
        raise RecordError(f"{path}: holds no mapping of methods to settings; restore it, or write to another --out")
    # as the file reads back, secrets redacted
    wanted = parse_json(json_text(redact_strings(dict(made_with)), str(path)), str(path), RecordError)
    if method in recorded:
        saved = recorded[method] if isinstance(recorded[method], dict) else {}
        _refuse_changed_inputs(out_path, method, saved.get(INPUTS), wanted.get(INPUTS) or {})
        differences = [
            f"{key}: {saved.get(key)!r} -> {wanted.get(key)!r}"
            for key in sorted(set(saved) | set(wanted))
            if key != INPUTS and saved.get(key) != wanted.get(key)
        ]
        if differences:
            raise RecordError(
                f"{out_path}: the records of method {method!r} were made with other settings "
                f"({'; '.join(differences)}); resume with those settings, or write to another --out or --method"
            )
        return
    if has_records:
        raise RecordError(
            f"{out_path} holds records of method {method!r} but {path} does not say what made them, so they "
            "cannot be resumed; write to another --out or --method"
        )
    write_text_atomically(path, json_text({**recorded, method: wanted}, str(path), indent=1, sort_keys=True) + "\n")


def _refuse_changed_inputs(out_path: Path, method: str, saved: Any, wanted: dict[str, Any]) -> None:
    """``RecordError`` naming the first input whose content differs from the one recorded (a file
    rewritten in place, or moved and changed); inputs are compared by content, not by path."""
    changed = changed_input(saved, wanted)
    if changed is not None:
        raise RecordError(
            f"{changed.file}: the {changed.label} holds other content than the one the records of method "
            f"{method!r} in {out_path} were made with ({changed.was} -> {changed.now}); restore it, or write "
            "to another --out or --method"
        )


def _append(path: Path, lines: Sequence[str]) -> None:
    with writing(path), open_for_append(path) as handle:
        handle.write("".join(lines))
        handle.flush()
        os.fsync(handle.fileno())


def run_attempts(
    solve: Solve,
    manifest: Sequence[ManifestEntry],
    out_path: str | Path,
    method: str,
    settings: EvalSettings = EvalSettings(),
    made_with: Mapping[str, Any] | None = None,
) -> int:
    """Run every missing (question, attempt) of ``manifest`` through ``solve``; returns how many ran.
    ``made_with`` (JSON values) is what, besides ``settings.seed``, makes ``method``'s records what
    they are: a resume must give the same."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(out_path.with_name(f"{out_path.name}.lock"), f"records file {out_path}"):
        done = finished_keys(out_path, method)
        check_settings(out_path, method, {"seed": settings.seed, **(made_with or {})}, bool(done))
        return _run_missing(solve, manifest, out_path, method, settings, done)


def _run_missing(
    solve: Solve,
    manifest: Sequence[ManifestEntry],
    out_path: Path,
    method: str,
    settings: EvalSettings,
    done: set[tuple[str, str, int]],
) -> int:
    todo = [
        (entry, attempt)
        for attempt in range(settings.attempts)
        for entry in manifest
        if (entry.dataset, entry.question.id, attempt) not in done
    ]
    with tqdm(
        total=len(manifest) * settings.attempts,
        initial=len(manifest) * settings.attempts - len(todo),
        desc=f"eval {method}",
        unit="workflow",
    ) as bar:
        for start in range(0, len(todo), settings.batch_size):
            batch = todo[start : start + settings.batch_size]
            seeds = [attempt_seed(settings.seed, e.dataset, e.question.id, a) for e, a in batch]
            workflows = solve([e.question for e, _ in batch], seeds)
            if len(workflows) != len(batch):
                raise ValueError(f"solve returned {len(workflows)} workflow records for {len(batch)} questions")
            lines = []
            for (entry, attempt), seed, workflow in zip(batch, seeds, workflows):
                if not isinstance(workflow, WorkflowRecord):
                    raise ValueError(
                        f"solve returned a {type(workflow).__name__} where a WorkflowRecord (maopd.envs.records) "
                        "was expected; WorkflowRecord.from_json reads a record's JSON form"
                    )
                if str(workflow.question_id) != entry.question.id:
                    raise ValueError(
                        f"solve returned a record for question {workflow.question_id!r} "
                        f"where {entry.question.id!r} was expected"
                    )
                record = from_workflow(workflow, method, entry.dataset, attempt, seed, settings.keep_trajectory)
                lines.append(record_line(record))
            _append(out_path, lines)
            bar.update(len(batch))
    return len(todo)
