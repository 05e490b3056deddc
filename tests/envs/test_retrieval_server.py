"""Search-R1 protocol: our server and HTTP client, request bounds, batching, dead-server errors; cache; factory."""

import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from maopd.base.config import ConfigError, from_dict
from maopd.envs.retrieval.bm25 import BM25Retriever
from maopd.envs.retrieval.cache import CachedRetriever
from maopd.envs.retrieval.corpus import Corpus, Document
from maopd.envs.retrieval.factory import RetrieverConfig, build_retriever
from maopd.envs.retrieval.http_client import HTTPRetriever, RetrievalServerError
from maopd.envs.retrieval.server import BackgroundServer, ServerLimits, create_app

DOCS = [
    Document("paris", "Paris", "Paris is the capital and largest city of France."),
    Document("berlin", "Berlin", "Berlin is the capital of Germany, on the river Spree."),
    Document("tokyo", "Tokyo", "Tokyo is the capital of Japan and its most populous city."),
    Document("nile", "Nile", "The Nile is a major river in northeastern Africa."),
]


@pytest.fixture(scope="module")
def bm25():
    return BM25Retriever(Corpus(DOCS))


@pytest.fixture(scope="module")
def server(bm25):
    with BackgroundServer(create_app(bm25, ServerLimits(max_queries=8, max_k=5, max_body_bytes=4096))) as running:
        yield running


def test_response_json_is_search_r1s_exactly(server, bm25):
    request = {"queries": ["capital of Japan", "river"], "topk": 2, "return_scores": True}
    body = httpx.post(f"{server.url}/retrieve", json=request, timeout=10).json()
    assert set(body) == {"result"} and len(body["result"]) == 2
    first = body["result"][0][0]
    assert set(first) == {"document", "score"}
    assert first["document"] == {
        "id": "tokyo",
        "contents": '"Tokyo"\nTokyo is the capital of Japan and its most populous city.',
    }
    expected = bm25.search(request["queries"], 2)
    assert [[item["score"] for item in row] for row in body["result"]] == [[p.score for p in r] for r in expected]

    bare = httpx.post(f"{server.url}/retrieve", json={**request, "return_scores": False}, timeout=10).json()
    assert bare["result"][0][0] == first["document"]
    default_k = httpx.post(f"{server.url}/retrieve", json={"queries": ["capital city"]}, timeout=10).json()
    assert len(default_k["result"][0]) == 3  # Search-R1's topk=None means the server default


def test_client_matches_in_process_results(server, bm25):
    client = HTTPRetriever(server.url, timeout_s=10)
    queries = ["capital of Germany", "largest city of France", "zzz unknown"]
    assert client.search(queries, 3) == bm25.search(queries, 3)
    assert (client.name, client.fingerprint) == ("http:bm25s", bm25.fingerprint)


def test_client_reads_a_search_r1_server_without_scores_or_health():
    """An existing Search-R1 server: no /health, bare documents when return_scores is false."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/retrieve")
    def retrieve(request: dict):
        return {"result": [[{"id": "7", "contents": '"Nile"\nThe Nile is a river.'}] for _ in request["queries"]]}

    with BackgroundServer(app) as running:
        client = HTTPRetriever(running.url, timeout_s=5)
        [[passage]] = client.search(["river"], 1)
    assert (passage.id, passage.title, passage.text) == ("7", "Nile", "The Nile is a river.")
    assert client.name == "http" and client.fingerprint.startswith("url:")


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        ({"queries": "not a list"}, 422, "list of strings"),
        ({"queries": ["a"] * 9}, 413, "limit is 8"),
        ({"queries": ["a"], "topk": 0}, 422, "topk"),
        ({"queries": ["a"], "topk": 6}, 422, "topk"),
        ({"queries": ["a"], "return_scores": "yes"}, 422, "return_scores"),
        ({"queries": ["x" * 5000]}, 413, "4096 bytes"),
    ],
)
def test_bad_requests_get_a_clear_4xx(server, payload, status, message):
    response = httpx.post(f"{server.url}/retrieve", json=payload, timeout=10)
    assert response.status_code == status
    assert message in response.json()["detail"]


def test_invalid_json_is_a_400(server):
    response = httpx.post(f"{server.url}/retrieve", content=b"{nope", timeout=10)
    assert response.status_code == 400 and "JSON" in response.json()["detail"]


def test_client_surfaces_4xx_without_retrying(server):
    client = HTTPRetriever(server.url, timeout_s=10, retries=3, backoff_s=5)
    start = time.perf_counter()
    with pytest.raises(RetrievalServerError, match="failed with HTTP 422.*topk"):
        client.search(["a"], 50)
    assert time.perf_counter() - start < 4


def test_client_splits_large_batches(server, bm25):
    client = HTTPRetriever(server.url, timeout_s=10, max_queries_per_request=8)
    queries = [f"capital {i}" for i in range(20)]
    assert client.search(queries, 2) == bm25.search(queries, 2)


def test_health(server, bm25):
    health = httpx.get(f"{server.url}/health", timeout=10).json()
    assert health["status"] == "ok" and health["fingerprint"] == bm25.fingerprint


@pytest.mark.slow
def test_concurrent_requests_are_batched(bm25):
    app = create_app(bm25, ServerLimits(max_wait_ms=50))
    with BackgroundServer(app) as running:
        queries = [f"capital {i}" for i in range(16)]
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda q: HTTPRetriever(running.url, timeout_s=10).search([q], 2), queries))
    assert [a[0] for a in answers] == bm25.search(queries, 2)
    assert app.state.batcher.batches < len(queries)


def test_dead_server_error_names_the_url_quickly():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    client = HTTPRetriever(url, timeout_s=1, retries=2, backoff_s=0.05)
    start = time.perf_counter()
    with pytest.raises(RetrievalServerError, match=f"{url}/retrieve failed after 3 attempts"):
        client.search(["anything"], 3)
    assert time.perf_counter() - start < 5


def test_cache_is_deterministic_and_keyed_by_k(bm25, tmp_path):
    calls = []

    class Counting:
        name, fingerprint = bm25.name, bm25.fingerprint

        def search(self, queries, k):
            calls.append(list(queries))
            return bm25.search(queries, k)

    cached = CachedRetriever(Counting(), path=tmp_path / "cache.sqlite")
    first = cached.search(["capital of France", "river", "capital of France"], 2)
    again = cached.search(["river", "capital of France"], 2)
    assert calls == [["capital of France", "river"]]
    assert again == [first[1], first[0]] and (cached.hits, cached.misses) == (2, 3)
    cached.search(["river"], 3)
    assert calls[-1] == ["river"]
    reopened = CachedRetriever(Counting(), path=tmp_path / "cache.sqlite")
    assert reopened.search(["river"], 2) == [first[1]] and len(calls) == 2


@pytest.mark.slow
def test_factory_builds_every_kind_by_config(server, bm25, tmp_path):
    corpus = Corpus(DOCS)
    query = ["capital of Japan"]
    bm25.save(tmp_path / "bm25")
    configs = [
        {"kind": "bm25"},
        {"kind": "bm25", "index_dir": str(tmp_path / "bm25"), "cache": True},
        {"kind": "dense"},
        {"kind": "http", "url": server.url, "timeout_s": 10},
    ]
    for data in configs:
        retriever = build_retriever(from_dict(RetrieverConfig, data), corpus)
        assert retriever.search(query, 1)[0][0].id == "tokyo", data


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="kind: unknown kind"):
        RetrieverConfig(kind="elastic")
    with pytest.raises(ConfigError, match="index_dir: kind .pyserini."):
        RetrieverConfig(kind="pyserini")
    with pytest.raises(ConfigError, match="timeout_s"):
        from_dict(RetrieverConfig, {"kind": "http", "timeout_s": "soon"})
