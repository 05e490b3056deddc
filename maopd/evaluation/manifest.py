"""The fixed test manifest of the paper's Appendix A.

The paper samples 5,000 questions with seed 20260728 (NQ, TriviaQA and PopQA 812 each; HotpotQA,
2WikiMultiHopQA and MuSiQue 813 each; Bamboogle 125) after removing test-pool questions whose
normalized text matches a training question. The question normalization here is Unicode NFKC,
lowercasing, punctuation removal and whitespace collapse (no article removal: it is a question,
not an answer), hashed with SHA-256.

Counts and seed are parameters, so that the same builder makes small manifests from local
samples. Each dataset is sampled with its own generator seeded by (seed, dataset name), so
adding or resizing one dataset does not change the others' samples.
"""

from __future__ import annotations

import hashlib
import random
import string
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from maopd.base.atomic import write_text_atomically
from maopd.base.json_files import iter_json_lines, json_text, write_json
from maopd.envs.datasets import DatasetError, Question

MANIFEST_SEED = 20260728
PAPER_COUNTS = {
    "nq": 812,
    "triviaqa": 812,
    "popqa": 812,
    "hotpotqa": 813,
    "2wikimultihopqa": 813,
    "musique": 813,
    "bamboogle": 125,
}
_ASCII_PUNCTUATION = set(string.punctuation)


def normalize_question(text: str) -> str:
    """NFKC, lowercase, punctuation (ASCII and Unicode P*) removed, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(ch for ch in text if ch not in _ASCII_PUNCTUATION and not unicodedata.category(ch).startswith("P"))
    return " ".join(text.split())


def question_hash(text: str) -> str:
    return hashlib.sha256(normalize_question(text).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ManifestEntry:
    dataset: str
    question: Question
    hash: str

    def to_dict(self) -> dict:
        return {"dataset": self.dataset, "hash": self.hash, **self.question.to_dict()}


@dataclass
class Manifest:
    entries: list[ManifestEntry]
    report: dict

    def questions(self, dataset: str | None = None) -> list[Question]:
        return [e.question for e in self.entries if dataset is None or e.dataset == dataset]


def build_manifest(
    pools: Mapping[str, list[Question]],
    counts: Mapping[str, int],
    seed: int = MANIFEST_SEED,
    training_questions: Iterable[str] = (),
) -> Manifest:
    """Sample ``counts[d]`` questions of each pool after removing training-question overlaps.

    Raises ``ValueError`` naming the dataset if a pool is missing or too small after removal.
    """
    training_hashes = {question_hash(text) for text in training_questions}
    entries: list[ManifestEntry] = []
    report: dict = {"seed": seed, "counts": dict(counts), "pool_sizes": {}, "removed": [], "removed_per_dataset": {}}
    for dataset in counts:
        if dataset not in pools:
            raise ValueError(f"no question pool for dataset {dataset!r}; pools: {sorted(pools)}")
        pool = pools[dataset]
        kept, removed = [], []
        for question in pool:
            digest = question_hash(question.question)
            (removed if digest in training_hashes else kept).append(ManifestEntry(dataset, question, digest))
        if len(kept) < counts[dataset]:
            raise ValueError(
                f"dataset {dataset!r}: asked for {counts[dataset]} questions but only {len(kept)} remain "
                f"of {len(pool)} after removing {len(removed)} training overlaps"
            )
        report["pool_sizes"][dataset] = len(pool)
        report["removed_per_dataset"][dataset] = len(removed)
        report["removed"] += [
            {"dataset": dataset, "id": e.question.id, "question": e.question.question, "hash": e.hash} for e in removed
        ]
        entries += random.Random(f"{seed}:{dataset}").sample(kept, counts[dataset])
    hashes = [e.hash for e in entries]
    report["duplicate_hashes_in_manifest"] = len(hashes) - len(set(hashes))
    report["total"] = len(entries)
    return Manifest(entries, report)


def report_path(path: str | Path) -> Path:
    """Where ``write_manifest`` writes the removal report of the manifest at ``path``."""
    return Path(f"{path}.report.json")


def write_manifest(manifest: Manifest, path: str | Path) -> str:
    """Write the manifest JSONL and its report (``report_path``); returns the manifest file's SHA-256."""
    path = Path(path)
    text = "".join(json_text(e.to_dict(), str(path), ensure_ascii=False) + "\n" for e in manifest.entries)
    write_text_atomically(path, text)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    report = dict(manifest.report, manifest_sha256=digest)
    write_json(report_path(path), report, indent=2, ensure_ascii=False)
    return digest


def load_manifest(path: str | Path) -> list[ManifestEntry]:
    """The manifest's entries; a (dataset, question id) that repeats is refused, since records are
    keyed by it (the repeat's attempts would count as the first's)."""
    entries = []
    seen: dict[tuple[str, str], str] = {}
    for where, row in iter_json_lines(path, DatasetError, "manifest file"):
        question = Question.from_dict(row, where)
        if not isinstance(row.get("dataset"), str) or not row["dataset"]:
            raise DatasetError(f"{where}: missing field 'dataset'")
        key = (row["dataset"], question.id)
        if key in seen:
            raise DatasetError(f"{where}: question {question.id!r} of dataset {key[0]!r} repeats {seen[key]}")
        seen[key] = f"line {where.rpartition(':')[2]}"
        entries.append(ManifestEntry(row["dataset"], question, question_hash(question.question)))
    return entries
