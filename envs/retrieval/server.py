"""A Search-R1-compatible retrieval server (``POST /retrieve``, ``GET /health``) for any retriever.

Concurrent requests are batched: requests arriving within ``max_wait_ms`` of each other (and with the
same k) go to the retriever as one ``search`` call, which is what makes dense encoders and BM25
efficient. The retriever runs on one worker thread, so retrievers need not be thread-safe.
Requests are bounded (body bytes, queries per request, query length, k); violations get a 4xx
whose ``detail`` says which bound. Abuse is bounded too (docs/reliability.md): bodies are read as a
stream and cut off at the limit, a client must finish its headers and body within
``read_timeout_s`` (else 408 or a closed connection), and beyond ``max_concurrency`` requests in
flight new requests get an immediate 503 (uvicorn refuses connections beyond four times that).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from dataclasses import dataclass

# Module-level on purpose: FastAPI resolves the endpoints' (string) annotations in module globals.
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from maopd.envs.retrieval.base import Passage, Retriever
from maopd.envs.retrieval.protocol import encode_results


@dataclass
class ServerLimits:
    max_body_bytes: int = 1_000_000
    max_queries: int = 512
    max_query_chars: int = 2_000
    max_k: int = 100
    default_k: int = 3
    max_batch_queries: int = 1024
    max_wait_ms: float = 2.0
    read_timeout_s: float = 10.0
    max_concurrency: int = 1024


class _Batcher:
    """Collects concurrent requests and answers them with as few retriever calls as possible."""

    def __init__(self, retriever: Retriever, limits: ServerLimits):
        self.retriever = retriever
        self.limits = limits
        self.queue: asyncio.Queue | None = None
        self.batches = 0

    async def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        if self.queue is None:
            self.queue = asyncio.Queue()
            asyncio.get_running_loop().create_task(self._run())
        future = asyncio.get_running_loop().create_future()
        await self.queue.put((queries, k, future))
        return await future

    async def _run(self) -> None:
        while True:
            pending = [await self.queue.get()]
            size = len(pending[0][0])
            deadline = asyncio.get_running_loop().time() + self.limits.max_wait_ms / 1000
            while size < self.limits.max_batch_queries:
                timeout = deadline - asyncio.get_running_loop().time()
                if timeout <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self.queue.get(), timeout)
                except asyncio.TimeoutError:
                    break
                pending.append(item)
                size += len(item[0])
            for k in sorted({item[1] for item in pending}):
                await self._answer([item for item in pending if item[1] == k], k)

    async def _answer(self, group: list, k: int) -> None:
        queries = [q for item in group for q in item[0]]
        self.batches += 1
        try:
            results = await asyncio.to_thread(self.retriever.search, queries, k)
        except Exception as exc:  # the error goes to every waiting request, the server keeps running
            for _, _, future in group:
                if not future.done():
                    future.set_exception(exc)
            return
        offset = 0
        for item_queries, _, future in group:
            if not future.done():  # cancelled when its client went away
                future.set_result(results[offset : offset + len(item_queries)])
            offset += len(item_queries)


def create_app(retriever: Retriever, limits: ServerLimits | None = None):
    limits = limits or ServerLimits()
    batcher = _Batcher(retriever, limits)
    app = FastAPI(title="MultiAgent-OPD retriever")
    app.state.batcher = batcher
    app.state.in_flight = 0  # only touched on the event loop thread, so no lock

    @app.middleware("http")
    async def bound_body(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limits.max_body_bytes:
            return JSONResponse({"detail": f"request body exceeds {limits.max_body_bytes} bytes"}, status_code=413)
        return await call_next(request)

    @app.get("/health")
    async def health() -> dict:
        return {
            "status": "ok",
            "retriever": retriever.name,
            "fingerprint": retriever.fingerprint,
            "max_queries": limits.max_queries,
            "max_k": limits.max_k,
        }

    @app.post("/retrieve")
    async def retrieve(request: Request) -> dict:
        if app.state.in_flight >= limits.max_concurrency:
            raise HTTPException(
                503,
                f"server busy ({limits.max_concurrency} requests in flight); retry later",
                headers={"Retry-After": "1"},
            )
        app.state.in_flight += 1
        try:
            body = await read_body(request, limits)
            try:
                payload = json.loads(body)
            except (ValueError, RecursionError):  # RecursionError: absurdly nested arrays or objects
                raise HTTPException(400, "request body is not valid JSON") from None
            queries, k, return_scores = validate_request(payload, limits)
            results = await batcher.search(queries, k)
            return encode_results(results, return_scores)
        finally:
            app.state.in_flight -= 1

    return app


async def read_body(request: Request, limits: ServerLimits) -> bytes:
    """The body, read as a stream: cut off past ``max_body_bytes`` (chunked uploads carry no
    content-length) and abandoned after ``read_timeout_s`` (a slow client must not hold a request open)."""
    body = bytearray()

    async def read() -> None:
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > limits.max_body_bytes:
                raise HTTPException(413, f"request body exceeds {limits.max_body_bytes} bytes")

    try:
        await asyncio.wait_for(read(), limits.read_timeout_s)
    except asyncio.TimeoutError:
        raise HTTPException(408, f"request body not received within {limits.read_timeout_s} s") from None
    return bytes(body)


def validate_request(payload: object, limits: ServerLimits) -> tuple[list[str], int, bool]:
    """Check a Search-R1 request; raise a 4xx naming the offending field."""
    if not isinstance(payload, dict):
        raise HTTPException(422, "request must be a JSON object with 'queries'")
    queries = payload.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise HTTPException(422, "'queries' must be a list of strings")
    if len(queries) > limits.max_queries:
        raise HTTPException(413, f"'queries' has {len(queries)} items; the limit is {limits.max_queries}")
    if any(len(q) > limits.max_query_chars for q in queries):
        raise HTTPException(413, f"a query exceeds {limits.max_query_chars} characters")
    k = payload.get("topk")
    k = limits.default_k if k is None else k
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= limits.max_k:
        raise HTTPException(422, f"'topk' must be an integer in [1, {limits.max_k}], got {k!r}")
    return_scores = payload.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise HTTPException(422, f"'return_scores' must be true or false, got {return_scores!r}")
    return queries, k, return_scores


def uvicorn_config(app, limits: ServerLimits | None = None, **options):
    """A uvicorn config that enforces the connection-level limits: at most four times
    ``max_concurrency`` connections (then 503), and ``read_timeout_s`` for a new connection to send
    its request headers."""
    import uvicorn

    limits = limits or ServerLimits()
    return uvicorn.Config(
        app,
        http=_header_timeout_protocol(limits.read_timeout_s),
        limit_concurrency=4 * limits.max_concurrency,
        log_level="warning",
        **options,
    )


def _header_timeout_protocol(timeout_s: float):
    """uvicorn's h11 protocol, plus: a connection that has not sent a request's headers within
    ``timeout_s`` is closed (uvicorn itself would wait forever: the slowloris attack)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.loop.call_later(timeout_s, self._close_if_no_request)

        def _close_if_no_request(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutH11Protocol


class BackgroundServer:
    """Run an app with uvicorn on a background thread (tests, benchmarks). Port 0 = ephemeral."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, limits: ServerLimits | None = None):
        import uvicorn

        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.url = f"http://{host}:{self.socket.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn_config(app, limits))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                return self
            threading.Event().wait(0.01)
        raise RuntimeError(f"retrieval server at {self.url} did not start within 5 s")

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()
