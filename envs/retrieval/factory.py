"""Build any retriever from a typed config, so environments choose their retriever by config."""

from __future__ import annotations

from dataclasses import dataclass

from envs.retrieval.base import Retriever
from envs.retrieval.corpus import Corpus

RETRIEVER_KINDS = ("bm25",)


@dataclass
class RetrieverConfig:
    """``kind`` selects the retriever; the other fields apply to the kinds that use them."""

    kind: str = "bm25"

    def __post_init__(self) -> None:
        if self.kind not in RETRIEVER_KINDS:
            raise ValueError(f"retriever.kind: unknown kind {self.kind!r}; expected one of {RETRIEVER_KINDS}")


def build_retriever(config: RetrieverConfig, corpus: Corpus) -> Retriever:
    if config.kind == "bm25":
        from envs.retrieval.bm25 import BM25Retriever

        return BM25Retriever(corpus)
    raise ValueError(f"retriever.kind: unknown kind {config.kind!r}")
