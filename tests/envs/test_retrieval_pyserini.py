"""pyserini Lucene BM25: build a local index from a JSONL corpus and search it, alone and via config."""

import json

import pytest

from maopd.envs.retrieval.corpus import Corpus, Document
from maopd.envs.retrieval.factory import RetrieverConfig, build_retriever
from maopd.envs.retrieval.pyserini_adapter import pyserini_available

AVAILABLE, WHY = pyserini_available()
pytestmark = pytest.mark.skipif(
    not AVAILABLE, reason=f"pyserini is not importable here ({WHY}); pip install -e '.[pyserini]'"
)

DOCS = [
    Document("paris", "Paris", "Paris is the capital and largest city of France."),
    Document("berlin", "Berlin", "Berlin is the capital of Germany, on the river Spree."),
    Document("nile", "Nile", "The Nile is a major river in northeastern Africa."),
]


@pytest.fixture(scope="module")
def lucene_index(tmp_path_factory):
    from maopd.envs.retrieval.pyserini_adapter import build_lucene_index

    root = tmp_path_factory.mktemp("lucene")
    corpus_path = root / "corpus.jsonl"
    corpus_path.write_text("".join(json.dumps(d.to_json()) + "\n" for d in DOCS), encoding="utf-8")
    build_lucene_index(corpus_path, root / "index")
    return root / "index"


@pytest.mark.slow
def test_lucene_bm25_search(lucene_index):
    retriever = build_retriever(RetrieverConfig(kind="pyserini", index_dir=str(lucene_index)), None)
    results = retriever.search(["capital of Germany", "river in Africa", "qwertyuiop"], k=2)
    assert results[0][0].id == "berlin" and results[0][0].title == "Berlin"
    assert results[1][0].id == "nile" and results[1][0].text.startswith("The Nile")
    assert results[2] == []
    assert all(a.score >= b.score for row in results for a, b in zip(row, row[1:]))


@pytest.mark.slow
def test_lucene_uses_the_corpus_fingerprint_when_given(lucene_index):
    corpus = Corpus(DOCS)
    retriever = build_retriever(RetrieverConfig(kind="pyserini", index_dir=str(lucene_index)), corpus)
    assert retriever.fingerprint == corpus.fingerprint


def test_an_index_dir_that_does_not_exist_is_one_config_error():
    from maopd.base.config import ConfigError

    with pytest.raises(ConfigError, match="index_dir: '/nonexistent' is neither a Lucene index directory"):
        build_retriever(RetrieverConfig(kind="pyserini", index_dir="/nonexistent"), None)
