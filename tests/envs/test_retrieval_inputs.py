"""Bad retrieval input is one user error naming the problem: a corpus without a word, a cache path
that cannot hold a cache, a cache bound below 1."""

from __future__ import annotations

import pytest

from maopd.base.config import ConfigError
from maopd.envs.retrieval.bm25 import BM25Retriever
from maopd.envs.retrieval.cache import CachedRetriever
from maopd.envs.retrieval.corpus import Corpus, CorpusError, Document
from maopd.envs.retrieval.factory import RetrieverConfig
from tests.fixture import load_fixture


def test_a_corpus_without_an_indexable_word_is_refused():
    corpus = Corpus([Document("1", "", "!!! ??"), Document("2", "The", "a an the")])
    with pytest.raises(CorpusError, match="no word to index"):
        BM25Retriever(corpus)


@pytest.mark.parametrize("kind", ["directory", "garbage"])
def test_a_cache_path_that_cannot_hold_a_cache_names_the_field(tmp_path, kind):
    path = tmp_path / "cache"
    if kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(bytes(range(256)) * 16)
    retriever = BM25Retriever(load_fixture()[0])
    with pytest.raises(ConfigError, match=rf"^cache_path: {path} cannot hold the retrieval cache"):
        CachedRetriever(retriever, path=path)


def test_a_cache_bound_below_one_is_refused():
    with pytest.raises(ConfigError, match="cache_max_entries: must be >= 1, got -5"):
        RetrieverConfig(cache_max_entries=-5)
