"""A result cache in front of any retriever: repeated queries are cheap and return identical results.

Keys are (retriever name, corpus fingerprint, query, k), so two indexes or two corpora never share
entries. The cache lives in memory (LRU-bounded) and, given a path, also in SQLite so that it
survives restarts and is shared between processes.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path

from maopd.base.config import ConfigError
from maopd.envs.retrieval.base import Passage, Retriever


class CachedRetriever:
    def __init__(self, inner: Retriever, max_entries: int = 100_000, path: str | Path | None = None):
        self.inner = inner
        self.name = inner.name
        self.fingerprint = inner.fingerprint
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._memory: OrderedDict[tuple, list[Passage]] = OrderedDict()
        self._lock = threading.Lock()
        self._db = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            try:
                self._db = sqlite3.connect(str(path), check_same_thread=False)
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS results (retriever TEXT, corpus TEXT, query TEXT, k INTEGER, "
                    "passages TEXT, PRIMARY KEY (retriever, corpus, query, k))"
                )
            except sqlite3.DatabaseError as exc:  # a directory, a file of another kind, one not writable
                raise ConfigError(
                    f"cache_path: {path} cannot hold the retrieval cache ({exc}); give a new file path "
                    "or an existing cache file"
                ) from None

    def _key(self, query: str, k: int) -> tuple:
        return (self.name, self.fingerprint, query, k)

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        results: list[list[Passage] | None] = [self._lookup(self._key(q, k)) for q in queries]
        missing = sorted({q for q, r in zip(queries, results) if r is None})
        with self._lock:
            self.hits += len(queries) - sum(r is None for r in results)
            self.misses += sum(r is None for r in results)
        if missing:
            fresh = dict(zip(missing, self.inner.search(missing, k)))
            for query, passages in fresh.items():
                self._store(self._key(query, k), passages)
            results = [fresh[q] if r is None else r for q, r in zip(queries, results)]
        return results

    def _lookup(self, key: tuple) -> list[Passage] | None:
        with self._lock:
            if key in self._memory:
                self._memory.move_to_end(key)
                return self._memory[key]
            if self._db is None:
                return None
            row = self._db.execute(
                "SELECT passages FROM results WHERE retriever=? AND corpus=? AND query=? AND k=?", key
            ).fetchone()
        if row is None:
            return None
        passages = [Passage(**p) for p in json.loads(row[0])]
        self._remember(key, passages)
        return passages

    def _store(self, key: tuple, passages: list[Passage]) -> None:
        self._remember(key, passages)
        if self._db is not None:
            with self._lock:
                self._db.execute(
                    "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)",
                    (*key, json.dumps([p.to_dict() for p in passages])),
                )
                self._db.commit()

    def _remember(self, key: tuple, passages: list[Passage]) -> None:
        with self._lock:
            self._memory[key] = passages
            self._memory.move_to_end(key)
            while len(self._memory) > self.max_entries:
                self._memory.popitem(last=False)
