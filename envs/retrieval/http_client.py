"""A retriever that asks a Search-R1-compatible server (ours, or an existing Search-R1 one).

Connection failures and 5xx answers are retried a bounded number of times with backoff; each
attempt has a timeout, so a dead server gives an error naming its URL within
``(retries + 1) * timeout`` seconds instead of a hang. 4xx answers are not retried: they carry the
server's reason. Queries are sent in chunks of at most ``max_queries_per_request``.
"""

from __future__ import annotations

import hashlib
import time
from urllib.parse import urlsplit, urlunsplit

from envs.retrieval.base import Passage
from envs.retrieval.protocol import decode_results
from maopd.base.errors import UserError


def redact_url(url: str) -> str:
    """``url`` with credentials hidden, so that they never reach a log, an error or a repr.

    ``user:password@`` becomes ``***@``, every query-string value becomes ``***``
    (``?api_key=X&a=1`` → ``?api_key=***&a=***``) and a fragment is dropped.
    """
    parts = urlsplit(url)
    if "@" in parts.netloc:
        parts = parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2])
    if parts.query:
        names = [item.partition("=")[0] for item in parts.query.split("&") if item]
        parts = parts._replace(query="&".join(f"{name}=***" for name in names))
    return urlunsplit(parts._replace(fragment=""))


class RetrievalServerError(UserError, RuntimeError):
    """The retrieval server could not be reached or refused the request; the message has its URL."""


class HTTPRetriever:
    def __init__(
        self,
        url: str,
        timeout_s: float = 30.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        max_queries_per_request: int = 256,
    ):
        import httpx

        self.url = url.rstrip("/")
        self.public_url = redact_url(self.url)  # what error messages and logs show
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_queries_per_request = max_queries_per_request
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s))
        self.name, self.fingerprint = self._identify()

    def _identify(self) -> tuple[str, str]:
        """Our server reports its retriever and corpus; a Search-R1 server has no /health."""
        import httpx

        try:
            health = self._client.get(f"{self.url}/health", timeout=min(5.0, self._client.timeout.read or 5.0))
            if health.status_code == 200:
                info = health.json()
                return f"http:{info['retriever']}", str(info["fingerprint"])
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        return "http", "url:" + hashlib.sha256(self.url.encode()).hexdigest()[:16]

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        results: list[list[Passage]] = []
        for start in range(0, len(queries), self.max_queries_per_request):
            chunk = list(queries[start : start + self.max_queries_per_request])
            payload = {"queries": chunk, "topk": k, "return_scores": True}
            results.extend(decode_results(self._post(payload), len(chunk)))
        return results

    def _post(self, payload: dict) -> object:
        import httpx

        endpoint, shown = f"{self.url}/retrieve", f"{self.public_url}/retrieve"
        last_error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self._client.post(endpoint, json=payload)
            except httpx.HTTPError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code >= 500:
                last_error = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code >= 400:
                raise RetrievalServerError(
                    f"{shown} rejected the request: HTTP {response.status_code} {response.text[:300]}"
                )
            try:
                return response.json()
            except ValueError:
                raise RetrievalServerError(f"{shown} answered with non-JSON: {response.text[:200]!r}") from None
        raise RetrievalServerError(
            f"retrieval server {shown} failed after {self.retries + 1} attempts ({last_error}); "
            "check that a server is running at that URL (maopd retriever serve starts one)"
        )

    def close(self) -> None:
        self._client.close()
