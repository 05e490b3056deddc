"""Dense retrieval: E5/MiniLM encoding, faiss index types, save/load, resumable index builds."""

import json

import numpy as np
import pytest

from maopd.base.errors import UserError
from maopd.envs.retrieval.corpus import Corpus, CorpusError, Document
from maopd.envs.retrieval.dense import (
    DenseIndexMeta,
    DenseIndexMismatch,
    DenseRetriever,
    make_faiss_index,
    save_dense_index,
)
from maopd.envs.retrieval.encoder import TextEncoder, minilm_path, prefixes_for
from maopd.envs.retrieval.index_build import build_dense_index

DOCS = [
    Document("paris", "Paris", "Paris is the capital and largest city of France."),
    Document("berlin", "Berlin", "Berlin is the capital of Germany, on the river Spree."),
    Document("tokyo", "Tokyo", "Tokyo is the capital of Japan and its most populous city."),
    Document("nile", "Nile", "The Nile is a major river in northeastern Africa."),
    Document("python", "Python (language)", "Python is a programming language created by Guido van Rossum."),
]


@pytest.fixture(scope="module")
def minilm():
    return TextEncoder("minilm", batch_size=2)


@pytest.mark.slow
def test_minilm_matches_sentence_transformers(minilm):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference = sentence_transformers.SentenceTransformer(str(minilm_path()), device="cpu", local_files_only=True)
    texts = ["Who directed Free Guy?", "Berlin is the capital of Germany, on the river Spree.", "a"]
    ours = minilm.encode_passages(texts)
    theirs = reference.encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_batching_does_not_change_embeddings(minilm):
    texts = [d.text for d in DOCS]
    one_batch = TextEncoder("minilm", batch_size=len(texts)).encode_passages(texts)
    np.testing.assert_allclose(minilm.encode_passages(texts), one_batch, atol=1e-5)


def test_e5_prefixes(tmp_path):
    assert prefixes_for("/models/intfloat/e5-base-v2", "auto") == ("query: ", "passage: ")
    assert prefixes_for("minilm", "auto") == ("", "")
    assert prefixes_for("minilm", "e5") == ("query: ", "passage: ")
    assert prefixes_for("/models/e5-base-v2", "none") == ("", "")
    with pytest.raises(ValueError, match="prefix style"):
        prefixes_for("minilm", "bge")


def test_e5_encoder_prepends_prefixes(tmp_path):
    from transformers import BertConfig, BertModel

    model_dir = tmp_path / "tiny-e5"
    BertModel(
        BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)
    ).save_pretrained(model_dir)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (model_dir / name).write_bytes((minilm_path() / name).read_bytes())
    encoder = TextEncoder(str(model_dir))
    assert (encoder.query_prefix, encoder.passage_prefix) == ("query: ", "passage: ")
    raw = encoder._encode(["query: capital of France", "passage: capital of France"], show_progress=False)
    np.testing.assert_allclose(encoder.encode_queries(["capital of France"])[0], raw[0], atol=1e-6)
    np.testing.assert_allclose(encoder.encode_passages(["capital of France"])[0], raw[1], atol=1e-6)
    assert not np.allclose(raw[0], raw[1])


def test_missing_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloaded"):
        TextEncoder(str(tmp_path / "intfloat-e5-base-v2"))


@pytest.mark.slow
@pytest.mark.parametrize("index_type", ["flat", "hnsw"])
def test_dense_retrieval_finds_the_right_document(minilm, index_type):
    retriever = DenseRetriever.build(Corpus(DOCS), minilm, index_type)
    results = retriever.search(["What is the capital of Japan?", "Who created Python?"], k=2)
    assert [r[0].id for r in results] == ["tokyo", "python"]
    assert all(len(r) == 2 for r in results)


@pytest.mark.slow
def test_ivfpq_compresses_and_still_finds_near_duplicates():
    import faiss

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((3000, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    compressed = make_faiss_index(vectors, "ivfpq")
    flat = make_faiss_index(vectors, "flat")
    assert len(faiss.serialize_index(compressed)) * 4 < len(faiss.serialize_index(flat))
    noisy = vectors[:100] + 0.05 * rng.standard_normal((100, 384)).astype(np.float32)
    _, rows = compressed.search(noisy / np.linalg.norm(noisy, axis=1, keepdims=True), 10)
    assert np.mean([i in row for i, row in enumerate(rows)]) > 0.8
    with pytest.raises(ValueError, match="use 'flat'"):
        make_faiss_index(vectors[:10], "ivfpq")


@pytest.mark.slow
def test_flat_scores_are_cosine_similarities(minilm):
    retriever = DenseRetriever.build(Corpus(DOCS), minilm)
    [hits] = retriever.search(["river in Africa"], k=5)
    query = minilm.encode_queries(["river in Africa"])[0]
    for hit in hits:
        doc = next(d for d in DOCS if d.id == hit.id)
        passage = minilm.encode_passages([f"{doc.title}\n{doc.text}"])[0]
        assert hit.score == pytest.approx(float(query @ passage), abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@pytest.mark.slow
def test_save_load_roundtrip_and_fingerprint_check(minilm, tmp_path):
    corpus = Corpus(DOCS)
    built = DenseRetriever.build(corpus, minilm)
    built.save(tmp_path / "idx")
    loaded = DenseRetriever.load(tmp_path / "idx", corpus, minilm)
    queries = ["German capital", "programming"]
    assert built.search(queries, 3) == loaded.search(queries, 3)
    with pytest.raises(ValueError, match="fingerprint"):
        DenseRetriever.load(tmp_path / "idx", Corpus(DOCS[:3]), minilm)


def _write_corpus(path, docs):
    path.write_text("".join(json.dumps(d.to_json()) + "\n" for d in docs), encoding="utf-8")


@pytest.mark.slow
def test_index_build_resumes_after_interruption(tmp_path, monkeypatch):
    corpus_path = tmp_path / "corpus.jsonl"
    _write_corpus(corpus_path, DOCS)
    out = tmp_path / "idx"
    calls = {"n": 0}
    real_encode = TextEncoder.encode_passages

    def crash_on_third_chunk(self, texts, show_progress=False):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_encode(self, texts, show_progress)

    monkeypatch.setattr(TextEncoder, "encode_passages", crash_on_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        build_dense_index(corpus_path, out, "minilm", chunk_size=2)
    assert sorted(p.name for p in (out / "chunks").glob("*.npy")) == ["000000.npy", "000001.npy"]
    monkeypatch.setattr(TextEncoder, "encode_passages", real_encode)
    report = build_dense_index(corpus_path, out, "minilm", chunk_size=2)
    assert (report.documents, report.encoded) == (5, 1)  # only the last chunk was encoded again
    assert "docs/s" in report.summary()

    fresh = build_dense_index(corpus_path, tmp_path / "fresh", "minilm", chunk_size=2)
    corpus = Corpus(DOCS)
    queries = ["capital of Japan", "river"]
    resumed_hits = DenseRetriever.load(out, corpus).search(queries, 5)
    fresh_hits = DenseRetriever.load(tmp_path / "fresh", corpus).search(queries, 5)
    assert [[h.id for h in r] for r in resumed_hits] == [[h.id for h in r] for r in fresh_hits]
    assert fresh.encoded == 5


@pytest.mark.slow
def test_index_build_restarts_when_the_corpus_changed(tmp_path):
    corpus_path = tmp_path / "corpus.jsonl"
    _write_corpus(corpus_path, DOCS[:3])
    build_dense_index(corpus_path, tmp_path / "idx", "minilm", chunk_size=2)
    _write_corpus(corpus_path, DOCS)
    report = build_dense_index(corpus_path, tmp_path / "idx", "minilm", chunk_size=2)
    assert report.encoded == 5
    assert DenseRetriever.load(tmp_path / "idx", Corpus(DOCS)).meta.count == 5


def test_index_build_names_the_bad_corpus_line(tmp_path):
    corpus_path = tmp_path / "corpus.jsonl"
    corpus_path.write_text(json.dumps(DOCS[0].to_json()) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"corpus\.jsonl:2"):
        build_dense_index(corpus_path, tmp_path / "idx", "minilm")


class _RecordedEncoder:
    """What ``DenseRetriever.load`` checks of an encoder, without loading a model."""

    def __init__(self, name: str, prefix_style: str, dim: int = 8):
        self.name, self.prefix_style, self.dim = name, prefix_style, dim
        self.query_prefix, self.passage_prefix = prefixes_for(name, prefix_style)


def _saved_index(directory, encoder: str, prefix_style: str):
    corpus = Corpus(DOCS)
    vectors = np.random.default_rng(0).standard_normal((len(DOCS), 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    meta = DenseIndexMeta(encoder, prefix_style, "flat", 8, corpus.fingerprint, len(DOCS))
    save_dense_index(directory, make_faiss_index(vectors, "flat"), [d.id for d in DOCS], meta)
    return corpus


@pytest.mark.parametrize(
    "encoder,prefix_style,dim,named",
    [
        ("/models/e5-base-v2", "none", 8, "prefix_style 'e5'"),
        ("/models/other", "e5", 8, "encoder '/models/e5-base-v2', not '/models/other'"),
        ("/models/e5-base-v2", "e5", 16, "8-dimensional vectors, not 16"),
    ],
)
def test_an_index_is_searched_only_with_the_encoder_and_prefixes_it_records(
    tmp_path, encoder, prefix_style, dim, named
):
    corpus = _saved_index(tmp_path / "idx", "/models/e5-base-v2", "e5")
    # "auto" gives E5's prefixes for this name: the same encoding as recorded
    DenseRetriever.load(tmp_path / "idx", corpus, _RecordedEncoder("/models/e5-base-v2", "auto"))
    with pytest.raises(DenseIndexMismatch, match=named) as refusal:
        DenseRetriever.load(tmp_path / "idx", corpus, _RecordedEncoder(encoder, prefix_style, dim))
    assert "set encoder: /models/e5-base-v2 and prefix_style: e5" in str(refusal.value)
    assert isinstance(refusal.value, UserError)
