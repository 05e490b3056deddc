"""Build any retriever from a typed config, so environments choose their retriever by config."""

from __future__ import annotations

from dataclasses import dataclass

from maopd.base.config import ConfigError, check_fields, checked
from maopd.envs.retrieval.base import Retriever
from maopd.envs.retrieval.corpus import Corpus

RETRIEVER_KINDS = ("bm25", "dense", "pyserini", "http")


@dataclass
class RetrieverConfig:
    """``kind`` selects the retriever; the other fields apply to the kinds that use them.

    - bm25: in-process bm25s; ``index_dir`` optionally loads an index from ``maopd index build``.
    - dense: HF ``encoder`` + faiss; ``index_dir`` loads a saved index, else the corpus is encoded now.
    - pyserini: Lucene BM25; ``index_dir`` is a Lucene index directory or a prebuilt index name.
    - http: a Search-R1-compatible server at ``url`` (ours: ``maopd retriever serve``).
    """

    kind: str = "bm25"
    index_dir: str = ""
    encoder: str = "minilm"  # "minilm" = the packaged all-MiniLM-L6-v2, or a local model directory
    prefix_style: str = "auto"  # auto: E5 "query: "/"passage: " prefixes when the encoder name says e5
    index_type: str = "flat"  # flat | hnsw | ivfpq (dense builds only)
    encode_batch_size: int = 64
    url: str = "http://127.0.0.1:8000"
    timeout_s: float = checked(30.0, gt=0)
    retries: int = checked(2, ge=0)
    cache: bool = False
    cache_path: str = ""  # SQLite file: the cache survives restarts and is shared by processes
    cache_max_entries: int = checked(100_000, ge=1)  # results kept in memory (LRU)

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
        raise ValueError(f"retriever.kind: {config.kind!r} needs the corpus")
    if config.kind == "bm25":
        from maopd.envs.retrieval.bm25 import BM25Retriever

        return BM25Retriever.load(config.index_dir, corpus) if config.index_dir else BM25Retriever(corpus)
    from maopd.envs.retrieval.dense import DenseRetriever
    from maopd.envs.retrieval.encoder import TextEncoder

    encoder = TextEncoder(config.encoder, config.prefix_style, batch_size=config.encode_batch_size)
    if config.index_dir:
        return DenseRetriever.load(config.index_dir, corpus, encoder)
    return DenseRetriever.build(corpus, encoder, config.index_type)
