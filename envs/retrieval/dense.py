"""Dense retrieval: encoder embeddings in a faiss index, searched by inner product.

An index directory holds ``index.faiss``, ``docids.json`` (faiss row -> corpus id) and
``meta.json`` (encoder, prefixes, index type, corpus fingerprint). An index is searched only with
the encoder and prefixes it records: queries encoded otherwise than the passages would retrieve
by a different geometry without any error, so ``DenseRetriever.load`` refuses another encoder, other
prefixes or another dimension (``DenseIndexMismatch``), and without an encoder it loads the
recorded one. Index types:

- ``flat``: exact inner product (what Search-R1 ships as ``e5_Flat.index``);
- ``hnsw``: graph index, approximate, fast on large corpora, no training;
- ``ivfpq``: inverted lists + product quantisation, compressed ~32x, needs training vectors.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from maopd.base.atomic import write_path_atomically, write_text_atomically
from maopd.base.errors import UserError
from maopd.envs.retrieval.base import Passage
from maopd.envs.retrieval.corpus import Corpus, Document
from maopd.envs.retrieval.encoder import TextEncoder, prefixes_for

INDEX_TYPES = ("flat", "hnsw", "ivfpq")
IVFPQ_MIN_VECTORS = 1000


@dataclass
class DenseIndexMeta:
    encoder: str
    prefix_style: str
    index_type: str
    dim: int
    corpus_fingerprint: str
    count: int


class DenseIndexMismatch(UserError, ValueError):
    """A dense index was to be searched with another encoder, other prefixes or another dimension
    than it was built with; the message names each difference and the settings to use."""


def check_encoder(directory: str | Path, meta: DenseIndexMeta, encoder: TextEncoder) -> None:
    """Raise ``DenseIndexMismatch`` unless ``encoder`` encodes queries as the index's passages were."""
    recorded = prefixes_for(meta.encoder, meta.prefix_style)
    differences = []
    if encoder.name != meta.encoder:
        differences.append(f"encoder {meta.encoder!r}, not {encoder.name!r}")
    if (encoder.query_prefix, encoder.passage_prefix) != recorded:
        differences.append(
            f"prefix_style {meta.prefix_style!r} (prefixes {recorded}), not {encoder.prefix_style!r} "
            f"(prefixes {(encoder.query_prefix, encoder.passage_prefix)})"
        )
    if encoder.dim != meta.dim:
        differences.append(f"{meta.dim}-dimensional vectors, not {encoder.dim}")
    if differences:
        raise DenseIndexMismatch(
            f"dense index {directory} was built with {'; '.join(differences)}: set encoder: {meta.encoder} and "
            f"prefix_style: {meta.prefix_style} to search it as it was built, or rebuild the index"
        )


def passage_text(doc: Document) -> str:
    """What the encoder sees for a document: title and text, as Search-R1's ``contents``."""
    return f"{doc.title}\n{doc.text}" if doc.title else doc.text


def make_faiss_index(vectors: np.ndarray, index_type: str, hnsw_m: int = 32, ivf_lists: int = 0):
    """Build a faiss inner-product index of ``index_type`` over unit-normalised ``vectors``."""
    import faiss

    if index_type not in INDEX_TYPES:
        raise ValueError(f"index type {index_type!r} is not one of {INDEX_TYPES}")
    dim = vectors.shape[1]
    if index_type == "flat":
        index = faiss.IndexFlatIP(dim)
    elif index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = 128
    else:
        if len(vectors) < IVFPQ_MIN_VECTORS:
            raise ValueError(
                f"index type 'ivfpq' needs at least {IVFPQ_MIN_VECTORS} vectors to train its quantisers, "
                f"got {len(vectors)}; use 'flat' for small corpora"
            )
        # Rules of thumb from the faiss wiki: ~sqrt(N) lists, at least 39 training points per list.
        lists = ivf_lists or max(1, min(int(np.sqrt(len(vectors))), len(vectors) // 39))
        subquantizers = next(m for m in (48, 32, 24, 16, 12, 8, 4, 2, 1) if dim % m == 0)
        bits = 8 if len(vectors) >= 256 * 39 else 4
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFPQ(quantizer, dim, lists, subquantizers, bits, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        index.nprobe = min(lists, 16)
    index.add(vectors)
    return index


class DenseRetriever:
    """Search a faiss index of passage embeddings with query embeddings from the same encoder."""

    def __init__(self, encoder: TextEncoder, index, doc_ids: list[str], corpus: Corpus, meta: DenseIndexMeta):
        if index.ntotal != len(doc_ids):
            raise ValueError(f"dense index has {index.ntotal} vectors but {len(doc_ids)} document ids")
        self.encoder = encoder
        self.index = index
        self.doc_ids = doc_ids
        self.corpus = corpus
        self.meta = meta
        self.name = f"dense:{Path(meta.encoder).name}:{meta.index_type}"
        self.fingerprint = meta.corpus_fingerprint

    @classmethod
    def build(
        cls, corpus: Corpus, encoder: TextEncoder, index_type: str = "flat", show_progress: bool = False
    ) -> DenseRetriever:
        if len(corpus) == 0:
            raise ValueError("DenseRetriever needs a non-empty corpus")
        vectors = encoder.encode_passages([passage_text(d) for d in corpus.documents], show_progress)
        meta = DenseIndexMeta(
            encoder.name, encoder.prefix_style, index_type, encoder.dim, corpus.fingerprint, len(corpus)
        )
        return cls(encoder, make_faiss_index(vectors, index_type), [d.id for d in corpus.documents], corpus, meta)

    def save(self, directory: str | Path) -> None:
        save_dense_index(directory, self.index, self.doc_ids, self.meta)

    @classmethod
    def load(cls, directory: str | Path, corpus: Corpus, encoder: TextEncoder | None = None) -> DenseRetriever:
        index, doc_ids, meta = load_dense_index(directory)
        if meta.corpus_fingerprint != corpus.fingerprint:
            raise ValueError(
                f"dense index {directory} was built for corpus {meta.corpus_fingerprint}, "
                f"but the corpus given has fingerprint {corpus.fingerprint}"
            )
        if encoder is None:
            encoder = TextEncoder(meta.encoder, prefix_style=meta.prefix_style)
        check_encoder(directory, meta, encoder)
        return cls(encoder, index, doc_ids, corpus, meta)

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        if not queries:
            return []
        k = max(1, min(k, len(self.doc_ids)))
        scores, rows = self.index.search(self.encoder.encode_queries(list(queries)), k)
        results = []
        for row_ids, row_scores in zip(rows, scores):
            passages = []
            for idx, score in zip(row_ids, row_scores):
                if idx < 0:  # faiss pads with -1 when an approximate index finds fewer than k
                    continue
                doc = self.corpus[self.doc_ids[idx]]
                passages.append(Passage(doc.id, doc.title, doc.text, float(score)))
            results.append(passages)
        return results


def save_dense_index(directory: str | Path, index, doc_ids: list[str], meta: DenseIndexMeta) -> None:
    import faiss

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_path_atomically(directory / "index.faiss", lambda temporary: faiss.write_index(index, str(temporary)))
    write_text_atomically(directory / "docids.json", json.dumps(doc_ids))
    write_text_atomically(directory / "meta.json", json.dumps(asdict(meta), indent=2))


def load_dense_index(directory: str | Path):
    import faiss

    directory = Path(directory)
    missing = [n for n in ("index.faiss", "docids.json", "meta.json") if not (directory / n).is_file()]
    if missing:
        raise FileNotFoundError(f"dense index {directory} is missing {', '.join(missing)}")
    meta = DenseIndexMeta(**json.loads((directory / "meta.json").read_text(encoding="utf-8")))
    doc_ids = json.loads((directory / "docids.json").read_text(encoding="utf-8"))
    return faiss.read_index(str(directory / "index.faiss")), doc_ids, meta
