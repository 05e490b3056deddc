"""Retrievers behind one batched protocol: ``search(queries, k) -> list[list[Passage]]``."""

from maopd.envs.retrieval.base import Passage, Retriever
from maopd.envs.retrieval.corpus import Corpus, CorpusError, Document, load_corpus

__all__ = ["Corpus", "CorpusError", "Document", "Passage", "Retriever", "load_corpus"]
