"""BM25 breaks equal scores by corpus order, the same on every CPU.

bm25s selects the top k with numpy's ``argpartition``, whose order among equal scores depends on
the CPU's SIMD instructions: on SynthWiki's templated passages, where scores often tie at the cut,
the same query returned other passages on an AVX-512 machine than on one without.
"""

from __future__ import annotations

import numpy as np

from maopd.envs.retrieval.bm25 import BM25Retriever, top_k
from maopd.envs.retrieval.corpus import Corpus, Document


def test_top_k_orders_by_score_then_corpus_order():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        scores = rng.integers(0, 4, n).astype(np.float32)  # few values: many ties
        k = int(rng.integers(1, n + 3))
        expected = sorted(range(n), key=lambda i: (-scores[i], i))[:k]
        assert top_k(scores, k).tolist() == expected


def test_documents_with_equal_scores_come_in_corpus_order():
    documents = [Document(str(i), f"Town {i}", "Lorvik is a town by the river.") for i in range(12)]
    documents.insert(5, Document("best", "Lorvik", "Lorvik is a town. Lorvik has a river."))
    found = BM25Retriever(Corpus(documents)).search(["Lorvik river"], 4)[0]
    assert [p.id for p in found] == ["best", "0", "1", "2"]
    assert found[1].score == found[2].score == found[3].score < found[0].score


def test_a_query_without_an_indexed_word_finds_nothing():
    retriever = BM25Retriever(Corpus([Document("0", "Lorvik", "Lorvik is a town.")]))
    assert retriever.search(["", "the of and", "zzzz"], 3) == [[], [], []]
