"""In-process BM25 over a ``Corpus`` with bm25s: the zero-setup default retriever."""

from __future__ import annotations

import bm25s

from envs.retrieval.base import Passage
from envs.retrieval.corpus import Corpus


class BM25Retriever:
    """Okapi BM25 (bm25s, English stopwords, no stemming) over title + text."""

    name = "bm25s"

    def __init__(self, corpus: Corpus, k1: float = 1.5, b: float = 0.75):
        if len(corpus) == 0:
            raise ValueError("BM25Retriever needs a non-empty corpus")
        self.corpus = corpus
        self.fingerprint = corpus.fingerprint
        tokens = bm25s.tokenize(
            [f"{doc.title} {doc.text}" for doc in corpus.documents], stopwords="en", show_progress=False
        )
        self._index = bm25s.BM25(k1=k1, b=b)
        self._index.index(tokens, show_progress=False)

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        if not queries:
            return []
        k = max(1, min(k, len(self.corpus)))
        tokens = bm25s.tokenize(list(queries), stopwords="en", show_progress=False, allow_empty=True)
        doc_ids, scores = self._index.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        results = []
        for row_ids, row_scores in zip(doc_ids, scores):
            passages = []
            for idx, score in zip(row_ids, row_scores):
                if score <= 0:
                    continue
                doc = self.corpus.documents[int(idx)]
                passages.append(Passage(doc.id, doc.title, doc.text, float(score)))
            results.append(passages)
        return results
