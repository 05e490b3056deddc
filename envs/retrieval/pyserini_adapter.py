"""pyserini (Anserini/Lucene) retrievers: BM25 over a Lucene index, and pyserini-format faiss indexes.

pyserini is an optional extra (``pip install -e '.[pyserini]'``; 0.25.0 runs on Java 17). A Lucene
index is a local directory (built by ``build_lucene_index`` or ``maopd index build --kind pyserini``)
or the name of a pyserini prebuilt index, which pyserini downloads on first use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from maopd.base.atomic import build_directory_atomically, input_link
from maopd.base.config import ConfigError
from maopd.envs.retrieval.base import Passage
from maopd.envs.retrieval.corpus import Corpus, split_contents


@contextmanager
def _pyserini_import_guard():
    """pyserini 0.25.0 builds an OpenAI client at import time, which openai>=1 refuses without a key.
    Supply a placeholder only for the import, so no other code ever sees it."""
    had_key = "OPENAI_API_KEY" in os.environ
    os.environ.setdefault("OPENAI_API_KEY", "unused-by-pyserini-bm25")
    try:
        yield
    finally:
        if not had_key:
            os.environ.pop("OPENAI_API_KEY", None)


INSTALL_PYSERINI = ".venv/bin/python -m pip install -e '.[pyserini]'   (pyserini 0.25.0 needs Java 17)"


def require_pyserini() -> None:
    """Raise a ModuleNotFoundError that gives the install command when pyserini is not installed."""
    try:
        with _pyserini_import_guard():
            import pyserini  # noqa: F401
    except ImportError as exc:
        raise ModuleNotFoundError(
            f"the pyserini retriever (Lucene BM25) needs pyserini, which is not installed ({exc}); "
            f"install it with: {INSTALL_PYSERINI}",
            name="pyserini",
        ) from None


def pyserini_available() -> tuple[bool, str]:
    """Whether pyserini and its JVM load here, and if not, why."""
    try:
        with _pyserini_import_guard():
            from pyserini.search.lucene import LuceneSearcher  # noqa: F401
    except Exception as exc:  # noqa: BLE001 -- ImportError, JVM errors: any of them means "not usable here"
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


class PyseriniBM25Retriever:
    """Lucene BM25 via pyserini's LuceneSearcher (Anserini defaults k1=0.9, b=0.4 unless given)."""

    def __init__(self, index: str, corpus: Corpus | None = None, k1: float = 0.9, b: float = 0.4, threads: int = 1):
        require_pyserini()
        with _pyserini_import_guard():
            from pyserini.search.lucene import LuceneSearcher

        if Path(index).is_dir():
            self._searcher = LuceneSearcher(str(index))
        elif "/" in str(index):  # a path, not a prebuilt index's name: nothing to look up
            self._searcher = None
        else:
            self._searcher = LuceneSearcher.from_prebuilt_index(index)
        if self._searcher is None:
            raise ConfigError(
                f"index_dir: {index!r} is neither a Lucene index directory nor a pyserini prebuilt index name; "
                "build one with maopd index build --kind pyserini, or give a prebuilt index's name"
            )
        self._searcher.set_bm25(k1, b)
        self.corpus = corpus
        self.threads = threads
        self.name = f"pyserini-bm25:{Path(index).name}"
        self.fingerprint = corpus.fingerprint if corpus is not None else f"lucene:{Path(index).name}"

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        if not queries:
            return []
        qids = [str(i) for i in range(len(queries))]
        hits = self._searcher.batch_search(list(queries), qids, k=max(1, k), threads=self.threads)
        return [[self._passage(hit.docid, hit.score) for hit in hits[qid]] for qid in qids]

    def _passage(self, doc_id: str, score: float) -> Passage:
        if self.corpus is not None and doc_id in self.corpus:
            doc = self.corpus[doc_id]
            return Passage(doc.id, doc.title, doc.text, float(score))
        raw = json.loads(self._searcher.doc(doc_id).raw())
        title, text = split_contents(raw.get("contents", ""))
        return Passage(doc_id, title, text, float(score))


def build_lucene_index(corpus_path: str | Path, out: str | Path, threads: int = 1) -> None:
    """Index a Search-R1 JSONL corpus (``{"id", "contents"}`` is pyserini's JsonCollection format) into
    ``out``, built in a staging directory and renamed into place (``build_directory_atomically``)."""
    require_pyserini()

    def build(index: Path) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            collection = input_link(corpus_path, Path(scratch) / "collection" / "corpus.jsonl").parent
            command = [
                sys.executable,
                "-m",
                "pyserini.index.lucene",
                "--collection",
                "JsonCollection",
                "--input",
                str(collection),
                "--index",
                str(index),
                "--generator",
                "DefaultLuceneDocumentGenerator",
                "--threads",
                str(threads),
                "--storeRaw",
            ]
            env = dict(os.environ)
            env.setdefault("OPENAI_API_KEY", "unused-by-pyserini-bm25")
            done = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
            if done.returncode != 0:
                raise RuntimeError(f"pyserini indexing of {corpus_path} failed:\n{done.stderr[-2000:]}")

    build_directory_atomically(out, build)
