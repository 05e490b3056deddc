"""The retrieval server under abuse, on 127.0.0.1 with bounded loops (docs/reliability.md).

Latency figures under load are measured by benchmarks/server_abuse.py, not here.
"""

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest

from maopd.base.secrets import redact_url
from maopd.envs.retrieval.bm25 import BM25Retriever
from maopd.envs.retrieval.corpus import Corpus, Document
from maopd.envs.retrieval.http_client import HTTPRetriever, RetrievalServerError
from maopd.envs.retrieval.server import BackgroundServer, ServerLimits, create_app

DOCS = [Document(str(i), f"Title {i}", f"Passage {i} about topic {i % 7} and city {i % 5}.") for i in range(50)]
LIMITS = ServerLimits(max_body_bytes=100_000, max_queries=16, max_k=10, read_timeout_s=1.0, max_concurrency=256)


@pytest.fixture(scope="module")
def bm25():
    return BM25Retriever(Corpus(DOCS))


@pytest.fixture(scope="module")
def server(bm25):
    with BackgroundServer(create_app(bm25, LIMITS), limits=LIMITS) as running:
        yield running


async def _flood(url: str, count: int) -> list[int]:
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one(i):
            try:
                response = await client.post(f"{url}/retrieve", json={"queries": [f"topic {i % 7}"], "topk": 3})
                return response.status_code
            except httpx.HTTPError as exc:  # a refused connection is a clear answer too, but count it
                return type(exc).__name__

        return await asyncio.gather(*(one(i) for i in range(count)))


@pytest.mark.slow
def test_a_thousand_concurrent_requests_complete_or_get_a_clear_503(bm25):
    limits = ServerLimits(max_concurrency=256)  # default read timeout: a loaded loop is slow, not abusive
    with BackgroundServer(create_app(bm25, limits), limits=limits) as server:
        start = time.perf_counter()
        statuses = asyncio.run(_flood(server.url, 1000))
        elapsed = time.perf_counter() - start
        after = httpx.post(f"{server.url}/retrieve", json={"queries": ["topic 1"]}, timeout=10).status_code
    assert set(statuses) <= {200, 429, 503}, sorted(set(map(str, statuses)))
    assert statuses.count(200) >= 100
    assert elapsed < 120  # generous: the figures are in benchmarks/results/server_abuse/server_abuse.md
    assert after == 200


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"x" * 200_000, 413, "100000 bytes"),
        (json.dumps({"queries": ["a"] * 17}).encode(), 413, "limit is 16"),
        (json.dumps({"queries": ["a"], "topk": 10**9}).encode(), 422, "topk"),
        (json.dumps({"queries": ["a"], "topk": 10**400}).encode(), 422, "topk"),
        (json.dumps({"queries": ["a"], "topk": 2.5}).encode(), 422, "topk"),
        (b"{not json", 400, "JSON"),
        (b"\xff\xfe\x00garbage", 400, "JSON"),
        (b"[" * 40_000 + b"]" * 40_000, 400, "JSON"),
        (b'{"queries": [' + b'{"a":' * 10_000 + b"1" + b"}" * 10_000 + b"]}", 400, "JSON"),
        (b"[]", 422, "JSON object"),
        (b"", 400, "JSON"),
        (json.dumps({"queries": [None]}).encode(), 422, "list of strings"),
    ],
    ids=[
        "oversize",
        "too-many-queries",
        "huge-k",
        "astronomical-k",
        "float-k",
        "invalid-json",
        "not-utf8",
        "deep-list",
        "deep-object",
        "not-an-object",
        "empty",
        "null-query",
    ],
)
def test_abusive_bodies_get_a_clear_4xx(server, body, status, message):
    response = httpx.post(
        f"{server.url}/retrieve", content=body, headers={"content-type": "application/json"}, timeout=10
    )
    assert response.status_code == status, response.text[:200]
    assert message in response.json()["detail"]


def test_chunked_oversize_upload_is_answered_at_the_limit(bm25):
    """No content-length: the server answers 413 once the limit is passed, not after the upload.
    Under the default read deadline: this upload is paced, and the module server's 1 s deadline
    for slow clients could answer 408 first on a loaded machine."""
    limits = ServerLimits(max_body_bytes=LIMITS.max_body_bytes)
    with BackgroundServer(create_app(bm25, limits), limits=limits) as server:
        _assert_chunked_oversize_is_413(server.url)


def _assert_chunked_oversize_is_413(url: str) -> None:
    sock = _slow_socket(url, b"POST /retrieve HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"2710\r\n" + b" " * 10_000 + b"\r\n"  # 10,000-byte chunks
    sent, answer = 0, b""
    with sock:
        sock.settimeout(0.05)
        while sent < 100_000_000 and not answer:  # 100 MB if the server never answered
            try:
                sock.sendall(chunk)
                sent += 10_000
                answer = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:  # closed by the server after its answer
                break
    assert b" 413 " in answer.split(b"\r\n")[0]
    assert sent < 10 * LIMITS.max_body_bytes


def test_odd_but_valid_queries_are_answered(server, bm25):
    queries = ["", " ", "\x00", "🔍 東京 \u202e", "<answer>x</answer>", "x" * 2000]
    response = httpx.post(f"{server.url}/retrieve", json={"queries": queries, "topk": 10}, timeout=10)
    assert response.status_code == 200 and len(response.json()["result"]) == len(queries)


def _slow_socket(url: str, payload: bytes) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(payload)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    sock.settimeout(seconds)
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
        return True, data
    except TimeoutError:
        return False, data
    finally:
        sock.close()


@pytest.mark.slow
def test_slow_clients_do_not_pin_the_server_and_are_dropped(server):
    """Slowloris (headers never finished) and slow bodies: other requests are served meanwhile,
    and the slow connections are closed after the read timeout instead of held forever."""
    slow_headers = [_slow_socket(server.url, b"POST /retrieve HTTP/1.1\r\nHost: x\r\n") for _ in range(20)]
    slow_bodies = [
        _slow_socket(server.url, b'POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"queries"')
        for _ in range(20)
    ]
    start = time.perf_counter()
    for _ in range(10):
        assert httpx.post(f"{server.url}/retrieve", json={"queries": ["topic 2"]}, timeout=5).status_code == 200
    assert time.perf_counter() - start < 5
    bound = LIMITS.read_timeout_s + 5
    for sock in slow_bodies:
        closed, data = _closed_within(sock, bound)
        assert closed and b" 408 " in data.split(b"\r\n")[0]
    for sock in slow_headers:
        assert _closed_within(sock, bound)[0]


def test_clients_that_give_up_do_not_break_batching(bm25):
    """Requests abandoned mid-batch (client timeouts) must not kill the batcher for everyone else."""

    class Slow:
        name, fingerprint = bm25.name, bm25.fingerprint

        def search(self, queries, k):
            time.sleep(0.3)
            return bm25.search(queries, k)

    with BackgroundServer(create_app(Slow())) as running:
        for _ in range(5):
            with pytest.raises(httpx.TimeoutException):
                httpx.post(f"{running.url}/retrieve", json={"queries": ["topic 1"]}, timeout=0.05)
        time.sleep(0.5)
        response = httpx.post(f"{running.url}/retrieve", json={"queries": ["topic 1"]}, timeout=10)
    assert response.status_code == 200 and response.json()["result"][0]


def test_retriever_errors_are_a_clear_5xx_and_the_server_survives(bm25):
    class Flaky:
        name, fingerprint = bm25.name, bm25.fingerprint
        fail = threading.Event()

        def search(self, queries, k):
            if self.fail.is_set():
                raise RuntimeError("index shard missing")
            return bm25.search(queries, k)

    flaky = Flaky()
    with BackgroundServer(create_app(flaky)) as running:
        flaky.fail.set()
        assert httpx.post(f"{running.url}/retrieve", json={"queries": ["a"]}, timeout=10).status_code == 500
        flaky.fail.clear()
        assert httpx.post(f"{running.url}/retrieve", json={"queries": ["topic 1"]}, timeout=10).status_code == 200


def test_credentials_in_a_server_url_never_reach_error_messages():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://alice:s3cret-token@127.0.0.1:{port}"
    assert redact_url(url) == f"http://***@127.0.0.1:{port}"
    assert redact_url("http://127.0.0.1:8000/x") == "http://127.0.0.1:8000/x"
    client = HTTPRetriever(url, timeout_s=1, retries=0)
    with pytest.raises(RetrievalServerError) as error:
        client.search(["q"], 1)
    assert "s3cret" not in str(error.value) and "alice" not in str(error.value) and "***@127.0.0.1" in str(error.value)
