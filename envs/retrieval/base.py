"""The retriever protocol every retriever implements (BM25, dense, pyserini, HTTP client)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Passage:
    """One retrieved passage. ``id`` is the corpus id; ``score`` is retriever-specific."""

    id: str
    title: str
    text: str
    score: float

    def to_dict(self) -> dict:
        # Written out rather than dataclasses.asdict, whose deep copy dominated recording a search.
        return {"id": self.id, "title": self.title, "text": self.text, "score": self.score}


@runtime_checkable
class Retriever(Protocol):
    """Batched retrieval: one list of at most ``k`` passages per query, best first.

    ``name`` and ``fingerprint`` identify the retriever and its corpus, so that caches keyed on
    them never mix results of different indexes.
    """

    name: str
    fingerprint: str

    def search(self, queries: list[str], k: int) -> list[list[Passage]]: ...
