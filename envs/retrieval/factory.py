"""Build any retriever from a typed config, so environments choose their retriever by config."""

from __future__ import annotations

from dataclasses import dataclass

from maopd.base.config import ConfigError, check_fields, checked
from maopd.envs.retrieval.base import Retriever
from maopd.envs.retrieval.corpus import Corpus

RETRIEVER_KINDS = ("bm25", "dense", "pyserini", "http")
CORPUS_KINDS = ("bm25", "dense")  # the kinds that search the corpus they are given (the others reach their own)


@dataclass
class RetrieverConfig:
    """``kind`` selects the retriever; the other fields apply to the kinds that use them.

    - bm25: in-process bm25s; ``index_dir`` optionally loads an index from ``maopd index build``.
    - dense: HF ``encoder`` + faiss; ``index_dir`` loads a saved index, else the corpus is encoded now.
    - pyserini: Lucene BM25; ``index_dir`` is a Lucene index directory or a prebuilt index name.
    - http: a Search-R1-compatible server at ``url`` (ours: ``maopd retriever serve``).
    """

    kind: str = checked(
        "bm25",
        help="The retriever: bm25 (BM25 in process), dense (an encoder and a faiss index), pyserini (Lucene BM25) "
        "or http (a Search-R1-compatible server at url).",
    )
    index_dir: str = checked(
        "",
        help="A saved index to load: for bm25 and dense, a directory built by `maopd index build` (empty: index "
        "the corpus now); for pyserini, a Lucene index directory or a prebuilt index name.",
    )
    encoder: str = checked(
        "minilm",
        help="The dense retriever's encoder: minilm (the packaged all-MiniLM-L6-v2) or a local model directory.",
    )
    prefix_style: str = checked(
        "auto",
        help="The dense encoder's input prefixes: e5 adds E5's 'query: ' and 'passage: ', none adds nothing, "
        "auto adds E5's when the encoder's name contains e5.",
    )
    index_type: str = checked(
        "flat",
        help="The faiss index a dense retriever builds when no index_dir is given: flat (exact), hnsw (a graph, "
        "approximate) or ivfpq (compressed; needs enough passages to train on).",
    )
    encode_batch_size: int = checked(64, help="Texts the dense encoder embeds per batch.")
    url: str = checked("http://127.0.0.1:8000", help="The server the http retriever sends its queries to.")
    timeout_s: float = checked(
        30.0,
        gt=0,
        help="The http retriever's deadline for one request, in seconds: connecting, sending and reading the "
        "whole answer.",
    )
    retries: int = checked(
        2,
        ge=0,
        help="How many times the http retriever retries a request after a connection error, a missed deadline "
        "or a 5xx answer.",
    )
    cache: bool = checked(
        False,
        help="Cache search results by retriever, corpus, query and k, so a repeated query is answered from the "
        "cache, identically.",
    )
    cache_path: str = checked(
        "",
        help="An SQLite file for the cache, which then survives restarts and is shared by processes "
        "(empty: in memory only).",
    )
    cache_max_entries: int = checked(
        100_000, ge=1, help="The most results the cache keeps in memory; the least recently used go first."
    )

    def __post_init__(self) -> None:
        check_fields(self)
        if self.kind not in RETRIEVER_KINDS:
            raise ConfigError(f"kind: unknown kind {self.kind!r}; expected one of {RETRIEVER_KINDS}")
        if self.kind == "pyserini" and not self.index_dir:
            raise ConfigError("index_dir: kind 'pyserini' needs a Lucene index directory or prebuilt name")


def build_retriever(config: RetrieverConfig, corpus: Corpus | None) -> Retriever:
    """The retriever ``config`` describes. ``corpus`` may be None for the pyserini and http kinds."""
    retriever = _build_uncached(config, corpus)
    if config.cache:
        from maopd.envs.retrieval.cache import CachedRetriever

        retriever = CachedRetriever(retriever, config.cache_max_entries, config.cache_path or None)
    return retriever


def _build_uncached(config: RetrieverConfig, corpus: Corpus | None) -> Retriever:
    if config.kind == "http":
        from maopd.envs.retrieval.http_client import HTTPRetriever

        return HTTPRetriever(config.url, timeout_s=config.timeout_s, retries=config.retries)
    if config.kind == "pyserini":
        from maopd.envs.retrieval.pyserini_adapter import PyseriniBM25Retriever

        return PyseriniBM25Retriever(config.index_dir, corpus)
    if corpus is None:
        raise ConfigError(f"retriever.kind: {config.kind!r} needs the corpus; give one, or use kind http or pyserini")
    if config.kind == "bm25":
        from maopd.envs.retrieval.bm25 import BM25Retriever

        return BM25Retriever.load(config.index_dir, corpus) if config.index_dir else BM25Retriever(corpus)
    from maopd.envs.retrieval.dense import DenseRetriever
    from maopd.envs.retrieval.encoder import TextEncoder

    encoder = TextEncoder(config.encoder, config.prefix_style, batch_size=config.encode_batch_size)
    if config.index_dir:
        return DenseRetriever.load(config.index_dir, corpus, encoder)
    return DenseRetriever.build(corpus, encoder, config.index_type)
