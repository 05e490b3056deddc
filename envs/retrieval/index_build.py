"""Build retrieval indexes on disk, resumably, reporting throughput.

Dense builds encode the corpus in fixed-size chunks and write each chunk's embeddings as soon as it
is done (atomically: ``maopd.base.atomic.write_file_atomically``). An interrupted build rerun with the same
arguments skips the chunks already on disk. A ``build.json`` manifest pins the corpus fingerprint
and encoder, so a rerun against a changed corpus or encoder starts over instead of mixing vectors.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from maopd.base.atomic import write_file_atomically, write_text_atomically
from maopd.envs.retrieval.corpus import load_corpus


@dataclass
class BuildReport:
    kind: str
    documents: int
    encoded: int  # documents processed in this run (fewer than ``documents`` after a resume)
    seconds: float
    out: str

    @property
    def docs_per_second(self) -> float:
        return self.encoded / self.seconds if self.seconds > 0 else float("inf")

    def summary(self) -> str:
        return (
            f"{self.kind} index: {self.documents} documents -> {self.out}; "
            f"{self.encoded} processed in {self.seconds:.1f}s ({self.docs_per_second:.1f} docs/s)"
        )


def build_bm25_index(corpus_path: str | Path, out: str | Path) -> BuildReport:
    from maopd.envs.retrieval.bm25 import BM25Retriever

    start = time.perf_counter()
    corpus = load_corpus(corpus_path)
    BM25Retriever(corpus).save(out)
    return BuildReport("bm25", len(corpus), len(corpus), time.perf_counter() - start, str(out))


def build_dense_index(
    corpus_path: str | Path,
    out: str | Path,
    encoder_name: str,
    prefix_style: str = "auto",
    index_type: str = "flat",
    chunk_size: int = 1024,
    batch_size: int = 64,
) -> BuildReport:
    from maopd.envs.retrieval.dense import (
        DenseIndexMeta,
        make_faiss_index,
        passage_text,
        save_dense_index,
    )
    from maopd.envs.retrieval.encoder import TextEncoder

    start = time.perf_counter()
    corpus = load_corpus(corpus_path)  # never empty
    out = Path(out)
    chunk_dir = out / "chunks"
    chunk_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "corpus_fingerprint": corpus.fingerprint,
        "encoder": encoder_name,
        "prefix_style": prefix_style,
        "chunk_size": chunk_size,
    }
    _reset_if_stale(out, chunk_dir, manifest)

    encoder = TextEncoder(encoder_name, prefix_style=prefix_style, batch_size=batch_size)
    starts = list(range(0, len(corpus), chunk_size))
    encoded = 0
    for chunk_no, first in enumerate(tqdm(starts, desc="encoding corpus", unit="chunk")):
        path = chunk_dir / f"{chunk_no:06d}.npy"
        if path.exists():
            continue
        docs = corpus.documents[first : first + chunk_size]
        vectors = encoder.encode_passages([passage_text(d) for d in docs])
        write_file_atomically(path, lambda handle: np.save(handle, vectors))
        encoded += len(docs)

    vectors = np.concatenate([np.load(chunk_dir / f"{n:06d}.npy") for n in range(len(starts))])
    meta = DenseIndexMeta(encoder_name, prefix_style, index_type, encoder.dim, corpus.fingerprint, len(corpus))
    save_dense_index(out, make_faiss_index(vectors, index_type), [d.id for d in corpus.documents], meta)
    return BuildReport(f"dense/{index_type}", len(corpus), encoded, time.perf_counter() - start, str(out))


def _reset_if_stale(out: Path, chunk_dir: Path, manifest: dict) -> None:
    manifest_path = out / "build.json"
    if manifest_path.is_file() and json.loads(manifest_path.read_text(encoding="utf-8")) == manifest:
        return
    for stale in chunk_dir.glob("*.npy"):
        stale.unlink()
    write_text_atomically(manifest_path, json.dumps(manifest, indent=2))
