"""The ``http`` retriever against servers that misbehave: a deadline for the whole request, a
size limit, one-line errors naming the URL for every answer that is not a result, and
credentials from the environment."""

from __future__ import annotations

import base64
import time

import pytest

from maopd.base.errors import UserError
from maopd.base.raw_http import RawServer, http_answer, trickle
from maopd.envs.retrieval.http_client import RETRIEVER_AUTH_ENV, HTTPRetriever, RetrievalServerError

RESULT = {"result": [[{"document": {"id": "1", "contents": '"T"\ntext'}, "score": 0.5}]]}
HEALTH = {"status": "ok", "retriever": "bm25s", "fingerprint": "abc"}


def answers(retrieve: list[bytes], health: object = HEALTH):
    """A server's answers: ``health`` to GET /health, the pieces of ``retrieve`` to POST /retrieve."""
    return lambda request: [http_answer(health)] if request.startswith(b"GET /health") else retrieve


@pytest.mark.timeout(60)
def test_the_timeout_is_a_deadline_for_the_whole_request():
    """An answer sent a byte every 0.05 s: no read waits long, the whole takes seconds."""
    slow = trickle(http_answer({**RESULT, "padding": "x" * 200}))
    with RawServer(answers(slow), pause_s=0.05, seconds=30) as server:
        client = HTTPRetriever(server.url, timeout_s=1.0, retries=0)
        start = time.perf_counter()
        with pytest.raises(RetrievalServerError, match=r"/retrieve failed after 1 attempts.*1 s deadline"):
            client.search(["q"], 1)
        assert time.perf_counter() - start < 3


@pytest.mark.parametrize("announced", [True, False], ids=["content-length", "until-close"])
def test_an_answer_over_the_size_limit_is_refused(announced):
    big = {"result": [[{"document": {"id": "1", "contents": "x" * 5000}, "score": 1.0}]]}
    with RawServer(answers([http_answer(big, length=announced)])) as server:
        client = HTTPRetriever(server.url, retries=0, max_response_bytes=1000)
        with pytest.raises(RetrievalServerError, match=r"/retrieve .*1000-byte limit"):
            client.search(["q"], 1)


@pytest.mark.parametrize("health", [[1, 2], None, "ok", {"status": "ok"}, 5])
def test_a_health_answer_of_another_kind_identifies_the_server_by_url(health):
    with RawServer(answers([http_answer(RESULT)], health)) as server:
        client = HTTPRetriever(server.url, retries=0)
        assert client.name == "http" and client.fingerprint.startswith("url:")
        assert client.search(["q"], 1)[0][0].title == "T"


@pytest.mark.parametrize(
    "body",
    [
        None,
        [1],
        {"result": "x"},
        {"result": [5]},
        {"result": [[5]]},
        {"result": [[{"document": "text"}]]},
        {"result": [[{"document": {"id": "1", "contents": 5}}]]},
        {"result": [[{"document": {"id": "1", "title": ["t"], "text": "x"}}]]},
        {"result": [[{"document": {"id": [1], "contents": "x"}}]]},
        {"result": [[{"document": {"id": "1", "contents": "x"}, "score": "high"}]]},
        {"result": [[{"document": {"id": "1", "contents": "x"}, "score": True}]]},
        {"result": [[{"document": {"id": "1", "contents": "x"}, "score": 10**400}]]},
        b'{"result": [[{"document": {"id": "1", "contents": "x"}, "score": NaN}]]}',
        b'{"result": [[{"document": {"id": "1", "contents": "x"}, "score": -Infinity}]]}',
        b'{"result": [[{"document": {"id": "1", "contents": "x"}, "score": 1e999}]]}',
        b"not json",
    ],
    ids=lambda body: str(body)[-40:],
)
def test_an_answer_that_is_not_a_result_is_a_one_line_error_naming_the_url(body):
    with RawServer(answers([http_answer(body)])) as server:
        client = HTTPRetriever(server.url, retries=0)
        with pytest.raises(RetrievalServerError) as error:
            client.search(["q"], 1)
    message = str(error.value)
    assert isinstance(error.value, UserError) and "\n" not in message
    assert message.startswith(f"{server.url}/retrieve ")


def test_a_non_finite_score_never_reaches_a_passage():
    body = b'{"result": [[{"document": {"id": "1", "contents": "x"}, "score": NaN}]]}'
    with RawServer(answers([http_answer(body)])) as server:
        with pytest.raises(RetrievalServerError, match="score must be a finite number, got 'nan'"):
            HTTPRetriever(server.url, retries=0).search(["q"], 1)


def _basic_auth_server(user: str, password: str) -> RawServer:
    expected = b"authorization: basic " + base64.b64encode(f"{user}:{password}".encode()).lower()

    def answer(request: bytes) -> list[bytes]:
        if expected not in request.lower():
            return [http_answer({"detail": "who are you"}, status=401)]
        return answers([http_answer(RESULT)])(request)

    return RawServer(answer)


def test_credentials_come_from_the_environment_when_the_url_holds_them_redacted(monkeypatch):
    with _basic_auth_server("u", "TOKEN") as server:
        saved = server.url.replace("http://", "http://***@")  # as a saved config holds it
        monkeypatch.delenv(RETRIEVER_AUTH_ENV, raising=False)
        with pytest.raises(RetrievalServerError, match=f"redacted.*set \\${RETRIEVER_AUTH_ENV} to user:password"):
            HTTPRetriever(saved, retries=0)
        typed = server.url.replace("http://", "http://u:TOKEN@")
        assert HTTPRetriever(typed, retries=0).search(["q"], 1)[0][0].title == "T"
        monkeypatch.setenv(RETRIEVER_AUTH_ENV, "u:TOKEN")
        client = HTTPRetriever(saved, retries=0)
        assert client.search(["q"], 1)[0][0].title == "T"
        monkeypatch.setenv(RETRIEVER_AUTH_ENV, "u:wrong")
        with pytest.raises(RetrievalServerError, match="failed with HTTP 401") as error:
            HTTPRetriever(typed, retries=0).search(["q"], 1)
    assert "TOKEN" not in str(error.value) and "wrong" not in str(error.value)
