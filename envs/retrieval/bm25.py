"""In-process BM25 over a ``Corpus`` with bm25s: the zero-setup default retriever."""

from __future__ import annotations

import json
from pathlib import Path

import bm25s
import numpy as np

from maopd.base.atomic import write_text_atomically
from maopd.envs.retrieval.base import Passage
from maopd.envs.retrieval.corpus import Corpus, CorpusError


def bm25_text(title: str, text: str) -> str:
    return f"{title} {text}"


class BM25Retriever:
    """Okapi BM25 (bm25s, English stopwords, no stemming) over title + text."""

    name = "bm25s"

    def __init__(self, corpus: Corpus, k1: float = 1.5, b: float = 0.75, index: bm25s.BM25 | None = None):
        if len(corpus) == 0:
            raise ValueError("BM25Retriever needs a non-empty corpus")
        self.corpus = corpus
        self.fingerprint = corpus.fingerprint
        if index is None:
            tokens = bm25s.tokenize(
                [bm25_text(doc.title, doc.text) for doc in corpus.documents], stopwords="en", show_progress=False
            )
            if not tokens.vocab:  # bm25s cannot index a corpus without a word
                raise CorpusError(
                    "the corpus has no word to index (every document is empty, punctuation or English "
                    "stopwords); give documents with text"
                )
            index = bm25s.BM25(k1=k1, b=b)
            index.index(tokens, show_progress=False)
        self._index = index

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        self._index.save(str(directory))
        meta = {"corpus_fingerprint": self.fingerprint, "count": len(self.corpus)}
        write_text_atomically(directory / "bm25_meta.json", json.dumps(meta))

    @classmethod
    def load(cls, directory: str | Path, corpus: Corpus) -> BM25Retriever:
        directory = Path(directory)
        meta_path = directory / "bm25_meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"BM25 index {directory} has no bm25_meta.json (build it with `maopd index build --kind bm25`)"
            )
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta["corpus_fingerprint"] != corpus.fingerprint:
            raise ValueError(
                f"BM25 index {directory} was built for corpus {meta['corpus_fingerprint']}, "
                f"but the corpus given has fingerprint {corpus.fingerprint}"
            )
        return cls(corpus, index=bm25s.BM25.load(str(directory)))

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        if not queries:
            return []
        k = max(1, min(k, len(self.corpus)))
        tokens = bm25s.tokenize(list(queries), stopwords="en", show_progress=False, allow_empty=True)
        results = []
        for query_tokens in bm25s.tokenization.convert_tokenized_to_string_list(tokens):
            # bm25s's own scores; an empty query (or one of stopwords only) matches nothing
            scores = self._index.get_scores(query_tokens) if query_tokens else np.zeros(len(self.corpus))
            passages = []
            for idx in top_k(scores, k):
                if scores[idx] <= 0:
                    continue
                doc = self.corpus.documents[int(idx)]
                passages.append(Passage(doc.id, doc.title, doc.text, float(scores[idx])))
            results.append(passages)
        return results


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest scores, highest first, equal scores in corpus order.

    Not bm25s's selection: it takes numpy's ``argpartition``, whose order among equal scores depends
    on the CPU's SIMD instructions (AVX-512 or not), so the same query returned other passages on
    other machines wherever scores tie at the cut, as templated passages often do.
    """
    if k < len(scores):
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]  # the k-th highest score
        candidates = np.flatnonzero(scores >= kth)
    else:
        candidates = np.arange(len(scores))
    return candidates[np.lexsort((candidates, -scores[candidates]))[:k]]
