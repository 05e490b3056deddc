"""Calling other servers: requests bounded in time and size, and which hosts are this machine.

httpx's ``timeout`` bounds each network operation, not the request: a server that sends a byte
before every read timeout holds a request for as long as it likes, and nothing bounds the size of
what it sends. ``Endpoint.call`` bounds both, for every client of the project (``OpenAIPolicy``,
the ``http`` retriever):

* one **deadline** per attempt, ``deadline_s``, for all of it: connecting, sending, and reading
  the headers and the whole body;
* at most ``max_bytes`` of (decoded) body: a larger ``Content-Length`` is refused before the body
  is read, and a body that grows past the limit is dropped there;
* connection errors, a missed deadline and the statuses in ``retry_statuses`` are retried
  ``retries`` times with exponential backoff (each retry logged at INFO); any other failure is an
  error at once;
* every failure, a dead server and an answer that is not JSON included, is ``error`` (a
  ``UserError`` of the caller's) with a one-line message that names the URL through
  ``redact_url`` and quotes the server's answer through ``redact``; httpx's own request log shows
  URLs redacted too.

``LoopThread`` runs those calls for synchronous code. ``is_loopback_host`` says which hosts a
secret may be sent to over plain http.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from maopd.base.secrets import redact, redact_url

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)
T = TypeVar("T")

PREVIEW_CHARS = 300  # of a server's answer quoted in an error


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a URL's hostname) is this machine: an address in 127.0.0.0/8 or ``::1``
    (IPv4-mapped too), or the name ``localhost`` exactly, which resolvers answer from the hosts
    file (RFC 6761) rather than ask DNS. Any other name, ``*.localhost`` included, is resolved
    through DNS and may lead elsewhere, so it is not loopback."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


class _Attempt(Exception):
    """One attempt went wrong in a way that may be retried; the message says how, without the URL."""


class _TooLarge(Exception):
    """The answer is larger than the limit; the message says how large."""


class _RedactHttpxUrls(logging.Filter):
    """httpx logs every request's full URL at INFO; show it redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        import httpx

        if isinstance(record.args, tuple):
            record.args = tuple(redact_url(str(a)) if isinstance(a, httpx.URL) else a for a in record.args)
        return True


_HTTPX_FILTER = _RedactHttpxUrls()


def new_client(max_connections: int | None = None, **options: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for ``Endpoint.call``, with httpx's request log redacted."""
    import httpx

    logging.getLogger("httpx").addFilter(_HTTPX_FILTER)  # idempotent: one filter object
    return httpx.AsyncClient(limits=httpx.Limits(max_connections=max_connections), **options)


@dataclass
class Endpoint:
    """One URL of a JSON server and how to call it (see the module docstring)."""

    url: str
    deadline_s: float
    max_bytes: int
    error: type[Exception]
    retries: int = 0
    backoff_s: float = 0.0
    retry_statuses: Collection[int] = ()
    status_hints: Mapping[int, str] = field(default_factory=dict)  # added to that status's error
    gave_up_hint: str = ""  # added to the error after the last attempt

    @property
    def shown(self) -> str:
        """The URL as errors and logs show it."""
        return redact_url(self.url)

    async def call(
        self, client: httpx.AsyncClient, method: str = "POST", body: Any = None, secrets: tuple[str | None, ...] = ()
    ) -> Any:
        """The decoded JSON of a 200 answer; ``error`` for anything else (after retries where they help)."""
        for attempt in range(self.retries + 1):
            try:
                status, data = await self._attempt(client, method, body, secrets)
            except _Attempt as exc:
                problem = str(exc)
            except _TooLarge as exc:
                raise self.error(f"{self.shown} {exc}; the limit guards against a runaway server") from None
            else:
                if status == 200:
                    return self._decoded(data, secrets)
                problem = f"HTTP {status}: {_preview(data, secrets)}"
                if status not in self.retry_statuses:
                    raise self.error(f"{self.shown} failed with {problem}{self.status_hints.get(status, '')}")
            if attempt == self.retries:
                break
            delay = self.backoff_s * 2**attempt
            # INFO, not WARNING: a retry that succeeds is routine, and one that fails ends in the error
            logger.info("%s: %s; retry %d/%d in %.1f s", self.shown, problem, attempt + 1, self.retries, delay)
            await asyncio.sleep(delay)
        raise self.error(
            f"{self.shown} failed after {self.retries + 1} attempts; last error: {problem}{self.gave_up_hint}"
        )

    async def _attempt(
        self, client: httpx.AsyncClient, method: str, body: Any, secrets: tuple[str | None, ...]
    ) -> tuple[int, bytes]:
        import httpx

        try:
            return await asyncio.wait_for(self._exchange(client, method, body), self.deadline_s)
        except asyncio.TimeoutError:
            raise _Attempt(f"Timeout: no complete answer within the {self.deadline_s:g} s deadline") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise _Attempt(f"{type(exc).__name__}: {' '.join(redact(str(exc), *secrets).split())}") from None

    async def _exchange(self, client: httpx.AsyncClient, method: str, body: Any) -> tuple[int, bytes]:
        async with client.stream(method, self.url, json=body) as response:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                raise _TooLarge(f"announced an answer of {int(declared)} bytes, over the {self.max_bytes}-byte limit")
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > self.max_bytes:
                    raise _TooLarge(f"sent an answer of more than the {self.max_bytes}-byte limit")
            return response.status_code, bytes(data)

    def _decoded(self, data: bytes, secrets: tuple[str | None, ...]) -> Any:
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            raise self.error(
                f"{self.shown} answered 200 with a body that is not JSON: {_preview(data, secrets)!r}"
            ) from None


def _preview(data: bytes, secrets: tuple[str | None, ...]) -> str:
    """The start of a server's answer, redacted, on one line."""
    text = redact(data[: PREVIEW_CHARS * 4].decode("utf-8", "replace"), *secrets)
    return " ".join(text.split())[:PREVIEW_CHARS]


class LoopThread:
    """An event loop on a daemon thread, so that synchronous code can await ``Endpoint.call`` with
    a client kept open between calls. It starts on first use in each process: a forked child, which
    inherits no threads, starts its own."""

    def __init__(self, make_client: Callable[[], httpx.AsyncClient]):
        self._make_client = make_client
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx.AsyncClient | None = None

    def run(self, call: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
        """``call(client)`` run on the loop; its result or its exception."""
        loop, client = self._started()
        return asyncio.run_coroutine_threadsafe(call(client), loop).result()

    def _started(self) -> tuple[asyncio.AbstractEventLoop, httpx.AsyncClient]:
        with self._lock:
            if self._pid != os.getpid():
                self._loop = asyncio.new_event_loop()
                self._client = self._make_client()
                self._thread = threading.Thread(target=self._loop.run_forever, name="maopd-http", daemon=True)
                self._thread.start()
                self._pid = os.getpid()
            return self._loop, self._client

    def close(self) -> None:
        with self._lock:
            if self._pid != os.getpid():
                return
            loop, thread, client = self._loop, self._thread, self._client
            self._pid = self._loop = self._thread = self._client = None
        asyncio.run_coroutine_threadsafe(client.aclose(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
