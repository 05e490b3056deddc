"""A retriever that asks a Search-R1-compatible server (ours, or an existing Search-R1 one).

Requests go through ``maopd.base.network.Endpoint``: each attempt has one deadline, ``timeout_s``,
for the whole request, answers over ``max_response_bytes`` are refused, connection errors, missed
deadlines and 5xx answers are retried a bounded number of times with backoff, and 4xx answers are
not retried (they carry the server's reason). A dead server is an error naming its URL within about
``(retries + 1) * timeout_s`` seconds. An answer that is not Search-R1's format (a score that is
not a finite number included) is a ``RetrievalServerError`` naming the URL too. Queries are sent
in chunks of at most ``max_queries_per_request``.

Credentials: ``user:password`` for a server behind HTTP basic auth come from the environment
variable ``RETRIEVER_AUTH_ENV`` when it is set, else from the URL's own ``user:password@``. A
config records its URL redacted (``***@``), so a run resumed from it, or a seed run of the seeds
runner, needs the variable: a URL whose credentials read ``***`` without it is an error that says so.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any
from urllib.parse import unquote, urlsplit

from maopd.base.errors import UserError
from maopd.base.network import Endpoint, LoopThread, new_client
from maopd.base.secrets import REDACTED, redact, redact_url
from maopd.envs.retrieval.base import Passage
from maopd.envs.retrieval.protocol import ProtocolError, decode_results

RETRIEVER_AUTH_ENV = "MAOPD_RETRIEVER_AUTH"
MAX_RESPONSE_BYTES = 32 * 2**20
HEALTH_DEADLINE_S = 5.0


class RetrievalServerError(UserError, RuntimeError):
    """The retrieval server could not be reached, refused the request, or answered with something
    that is not a result; the message has its URL."""


def _credentials(url: str) -> tuple[str, str] | None:
    """``(user, password)`` for the server at ``url``: ``$RETRIEVER_AUTH_ENV``, else the URL's own."""
    from_environment = os.environ.get(RETRIEVER_AUTH_ENV)
    if from_environment:
        user, _, password = from_environment.partition(":")
        return user, password
    parts = urlsplit(url)
    if parts.username is None:
        return None
    if REDACTED in parts.netloc.rpartition("@")[0]:
        raise RetrievalServerError(
            f"{redact_url(url)}: the URL's credentials were redacted when its config was saved; "
            f"set ${RETRIEVER_AUTH_ENV} to user:password"
        )
    return unquote(parts.username), unquote(parts.password or "")


class HTTPRetriever:
    def __init__(
        self,
        url: str,
        timeout_s: float = 30.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        max_queries_per_request: int = 256,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ):
        credentials = _credentials(url)  # sent as basic auth, which takes precedence over the URL's
        self.url = url.rstrip("/")
        self.public_url = redact_url(self.url)  # what error messages, logs and the fingerprint show
        self.max_queries_per_request = max_queries_per_request
        self._retrieve = Endpoint(
            f"{self.url}/retrieve",
            deadline_s=timeout_s,
            max_bytes=max_response_bytes,
            error=RetrievalServerError,
            retries=retries,
            backoff_s=backoff_s,
            retry_statuses=range(500, 600),
            gave_up_hint="; check that a server is running at that URL (maopd retriever serve starts one)",
        )
        self._health = Endpoint(
            f"{self.url}/health",
            deadline_s=min(HEALTH_DEADLINE_S, timeout_s),
            max_bytes=max_response_bytes,
            error=RetrievalServerError,
        )
        self._loop = LoopThread(lambda: new_client(auth=credentials, timeout=timeout_s))
        self.name, self.fingerprint = self._identify()

    def _identify(self) -> tuple[str, str]:
        """Our server reports its retriever and corpus; a Search-R1 server has no /health, and
        another server's /health, whatever it answers, says nothing of its corpus."""
        try:
            info = self._loop.run(lambda client: self._health.call(client, "GET"))
        except RetrievalServerError:
            info = None
        if isinstance(info, dict) and "retriever" in info and "fingerprint" in info:
            return f"http:{info['retriever']}", str(info["fingerprint"])
        return "http", "url:" + hashlib.sha256(self.public_url.encode()).hexdigest()[:16]

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        results: list[list[Passage]] = []
        for start in range(0, len(queries), self.max_queries_per_request):
            chunk = list(queries[start : start + self.max_queries_per_request])
            payload = {"queries": chunk, "topk": k, "return_scores": True}
            results.extend(self._decoded(self._post(payload), len(chunk)))
        return results

    def _post(self, payload: dict) -> Any:
        return self._loop.run(lambda client: self._retrieve.call(client, body=payload))

    def _decoded(self, answer: Any, rows: int) -> list[list[Passage]]:
        try:
            return decode_results(answer, rows)
        except ProtocolError as exc:
            raise RetrievalServerError(
                f"{self._retrieve.shown} answered with JSON that is not a /retrieve result: {redact(str(exc))}"
            ) from None

    def close(self) -> None:
        self._loop.close()
