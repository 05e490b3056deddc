"""OpenAIPolicy against a local fake OpenAI server: requests, records, stops, retries, errors, key.

The same policy against a real ``vllm serve`` is tested in tests/agents/test_vllm_serve.py.
"""

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from maopd.agents.openai_policy import (
    InsecureKeyError,
    OpenAIPolicy,
    OpenAIPolicyConfig,
    OpenAIPolicyError,
    restore_stop_tag,
)
from maopd.base.errors import UserError
from maopd.base.raw_http import RawServer, http_answer, trickle
from maopd.envs.policy import AgentTurn
from maopd.envs.prompts import system_message, task_message

SECRET = "sk-test-5ecret-never-shown"


class FakeServer:
    """A chat/completions server on 127.0.0.1 whose next answers the test scripts.

    ``script`` is a list of (status, delay_s) consumed one per request; when it is empty the
    server answers 200 at once. Successful answers echo ``n`` choices and usage counts.
    """

    def __init__(self):
        self.script: list[tuple[int, float]] = []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    status, delay = server.script.pop(0) if server.script else (200, 0.0)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                time.sleep(delay)
                with server.lock:
                    server.in_flight -= 1
                payload = server.answer(body) if status == 200 else {"error": {"message": "scripted failure"}}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    @staticmethod
    def answer(body: dict) -> dict:
        task = body["messages"][-1]["content"]
        # The first choice stops at a closing tag (cut, as OpenAI does), the others at EOS.
        choices = [
            {"index": 0, "message": {"role": "assistant", "content": f"<search>{task}"}, "finish_reason": "stop"}
        ]
        choices += [
            {"index": i, "message": {"role": "assistant", "content": f"plain {i}"}, "finish_reason": "stop"}
            for i in range(1, body["n"])
        ]
        return {
            "model": body["model"],
            "choices": choices[::-1],
            "usage": {"prompt_tokens": 11, "completion_tokens": 5 * body["n"]},
        }


@pytest.fixture
def server():
    fake = FakeServer()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()


def config(server, **overrides):
    return OpenAIPolicyConfig(
        **{
            "base_url": server.base_url,
            "model": "fake-model",
            "api_key_env": "MAOPD_TEST_KEY",
            "backoff_s": 0.01,
            "timeout_s": 5.0,
            **overrides,
        }
    )


def turn(task, role="searcher", n=1):
    return AgentTurn(
        agent=f"{role}_0",
        role=role,
        messages=(system_message(role), task_message(task)),
        allowed=("search", "report"),
        num_candidates=n,
    )


def test_requests_and_records(server):
    outputs = OpenAIPolicy(config(server)).act([turn("capital of France", n=3), turn("who wrote Hamlet")])
    first = next(r for r in server.requests if r["n"] == 3)
    assert first["model"] == "fake-model" and first["n"] == 3
    assert first["stop"] == ["</search>", "</report>"]
    assert first["temperature"] == 0.6 and first["top_p"] == 0.95 and first["max_tokens"] == 512
    assert first["messages"][0] == system_message("searcher")
    assert [len(o.texts) for o in outputs] == [3, 1]
    assert outputs[0].texts[0] == "<search>Task: capital of France</search>"
    assert outputs[0].texts[1:] == ["plain 1", "plain 2"]
    assert (outputs[0].input_tokens, outputs[0].output_tokens) == (11, 15)
    assert outputs[0].extra["url"] == server.base_url + "/chat/completions"
    assert outputs[0].extra["finish_reasons"] == ["stop"] * 3


def test_concurrency_is_bounded(server):
    server.script = [(200, 0.2)] * 8
    OpenAIPolicy(config(server, max_concurrency=2)).act([turn(f"t{i}") for i in range(8)])
    assert len(server.requests) == 8
    assert server.max_in_flight == 2


def test_server_errors_are_retried_with_backoff(server):
    server.script = [(503, 0.0), (500, 0.0)]
    outputs = OpenAIPolicy(config(server, max_retries=2)).act([turn("capital of France")])
    assert len(server.requests) == 3 and outputs[0].texts[0].startswith("<search>")


def test_retries_are_bounded_and_the_error_names_the_url(server):
    server.script = [(503, 0.0)] * 5
    with pytest.raises(OpenAIPolicyError, match=r"127\.0\.0\.1.*/chat/completions failed after 3 attempts.*503"):
        OpenAIPolicy(config(server, max_retries=2)).act([turn("x")])
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(server):
    server.script = [(400, 0.0)]
    with pytest.raises(OpenAIPolicyError, match="chat/completions failed with HTTP 400"):
        OpenAIPolicy(config(server)).act([turn("x")])
    assert len(server.requests) == 1


def test_timeouts_are_retried_then_reported(server):
    server.script = [(200, 1.0), (200, 1.0)]
    with pytest.raises(OpenAIPolicyError, match=r"failed after 2 attempts.*Timeout"):
        OpenAIPolicy(config(server, timeout_s=0.2, max_retries=1)).act([turn("x")])


def test_unreachable_endpoint_names_the_url():
    with pytest.raises(OpenAIPolicyError, match=r"http://127\.0\.0\.1:9/v1/chat/completions failed after 1 attempts"):
        OpenAIPolicy(OpenAIPolicyConfig(base_url="http://127.0.0.1:9/v1", model="m", max_retries=0)).act([turn("x")])


def test_api_key_is_sent_but_never_shown(server, monkeypatch, caplog):
    monkeypatch.setenv("MAOPD_TEST_KEY", SECRET)
    server.script = [(503, 0.0), (401, 0.0)]
    policy = OpenAIPolicy(config(server, max_retries=1))
    with caplog.at_level(logging.DEBUG), pytest.raises(OpenAIPolicyError) as error:
        policy.act([turn("x")])
    assert server.headers[0]["Authorization"] == f"Bearer {SECRET}"
    assert "MAOPD_TEST_KEY set?" in str(error.value)
    outputs = policy.act([turn("x")])
    shown = [
        repr(policy),
        str(policy),
        repr(policy.config),
        str(error.value),
        caplog.text,
        repr(outputs),
        json.dumps(outputs[0].extra),
    ]
    assert all(SECRET not in text for text in shown)
    assert "api key set via $MAOPD_TEST_KEY" in repr(policy)


def test_without_the_key_no_authorization_header(server, monkeypatch):
    monkeypatch.delenv("MAOPD_TEST_KEY", raising=False)
    OpenAIPolicy(config(server)).act([turn("x")])
    assert "Authorization" not in server.headers[0]


def test_wrong_number_of_choices_is_an_error(server, monkeypatch):
    monkeypatch.setattr(FakeServer, "answer", staticmethod(lambda body: {"choices": []}))
    with pytest.raises(OpenAIPolicyError, match="returned 0 choices for n=1"):
        OpenAIPolicy(config(server)).act([turn("x")])


@pytest.mark.parametrize(
    "field,value",
    [("base_url", "127.0.0.1:8000"), ("max_concurrency", 0), ("max_retries", -1), ("timeout_s", 0.0), ("top_p", 0.0)],
)
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        OpenAIPolicyConfig(**{"base_url": "http://127.0.0.1:1/v1", "model": "m", field: value})


@pytest.mark.parametrize(
    "text,finish,stop_reason,expected",
    [
        ("<search>q", "stop", None, "<search>q</search>"),
        ("<search>q", "stop", "</search>", "<search>q</search>"),
        ("<search>q</search>", "stop", "</search>", "<search>q</search>"),
        ("<search>q", "length", None, "<search>q"),
        ("just text", "stop", None, "just text"),
        ("<search>a</search> then <report>r", "stop", None, "<search>a</search> then <report>r</report>"),
        ("<answer>x", "stop", None, "<answer>x"),  # not a stop of this role
    ],
)
def test_restore_stop_tag(text, finish, stop_reason, expected):
    assert restore_stop_tag(text, finish, stop_reason, ["</search>", "</report>"]) == expected


# --------------------------------------------------------------------------- servers that misbehave

ONE_CHOICE = {"choices": [{"index": 0, "message": {"content": "plain"}, "finish_reason": "stop"}]}


def raw_config(server: RawServer, **overrides) -> OpenAIPolicyConfig:
    settings = {"api_key_env": "MAOPD_TEST_KEY", "max_retries": 0, "backoff_s": 0.0, **overrides}
    return OpenAIPolicyConfig(base_url=f"{server.url}/v1", model="m", **settings)


@pytest.mark.timeout(60)
def test_the_timeout_is_a_deadline_for_the_whole_request():
    """A server that sends its answer a byte every 0.05 s: no single read waits long, the whole
    answer takes seconds, and the 1 s deadline ends it."""
    answer = http_answer({**ONE_CHOICE, "padding": "x" * 200})
    with RawServer(lambda request: trickle(answer), pause_s=0.05, seconds=30) as server:
        start = time.perf_counter()
        with pytest.raises(OpenAIPolicyError, match=r"/v1/chat/completions failed after 1 attempts.*1 s deadline"):
            OpenAIPolicy(raw_config(server, timeout_s=1.0)).act([turn("x")])
        assert time.perf_counter() - start < 3


@pytest.mark.parametrize("announced", [True, False], ids=["content-length", "until-close"])
def test_an_answer_over_the_size_limit_is_refused(announced):
    big = {"choices": [{"index": 0, "message": {"content": "x" * 5000}, "finish_reason": "stop"}]}
    with RawServer(lambda request: [http_answer(big, length=announced)]) as server:
        with pytest.raises(OpenAIPolicyError, match=r"127\.0\.0\.1.*1000-byte limit"):
            OpenAIPolicy(raw_config(server, max_response_bytes=1000)).act([turn("x")])


@pytest.mark.parametrize(
    "body",
    [
        [ONE_CHOICE],
        None,
        "a string",
        {"choices": "x"},
        {"choices": [1]},
        {"choices": [{"message": "text"}]},
        {"choices": [{"message": {"content": 5}}]},
        {"choices": [{"message": {"content": ["a", "b"]}}]},
        {"choices": [{"message": {"content": {"text": "a"}}}]},
        {"choices": [{"index": "0", "message": {"content": "a"}}]},
        {"choices": [{"message": {"content": "a"}, "finish_reason": ["stop"]}]},
        b"not json",
        b"[" * 100_000,
    ],
)
def test_a_malformed_answer_is_a_one_line_error_naming_the_url(body):
    with RawServer(lambda request: [http_answer(body)]) as server:
        with pytest.raises(OpenAIPolicyError) as error:
            OpenAIPolicy(raw_config(server)).act([turn("x")])
    message = str(error.value)
    assert isinstance(error.value, UserError) and "\n" not in message
    assert message.startswith(f"{server.url}/v1/chat/completions ")


def test_null_content_and_a_malformed_usage_are_read_as_empty_and_unknown():
    body = {"choices": [{"message": {"content": None}, "finish_reason": "stop"}], "usage": [1], "model": {"x": 1}}
    with RawServer(lambda request: [http_answer(body)]) as server:
        [output] = OpenAIPolicy(raw_config(server)).act([turn("x")])
    assert output.texts == [""] and output.input_tokens is None and output.extra["model"] == "m"


def test_a_dead_server_is_a_one_line_user_error():
    with RawServer(lambda request: []) as server:
        url = server.url
    with pytest.raises(OpenAIPolicyError) as error:
        OpenAIPolicy(raw_config(server, max_retries=1)).act([turn("x")])
    assert isinstance(error.value, UserError) and "\n" not in str(error.value)
    assert str(error.value).startswith(f"{url}/v1/chat/completions failed after 2 attempts")


@pytest.mark.parametrize("escape", ["dash", "every character"])
def test_a_key_echoed_json_escaped_is_redacted(monkeypatch, caplog, escape):
    monkeypatch.setenv("MAOPD_TEST_KEY", SECRET)
    if escape == "dash":
        echoed = SECRET.replace("-", "\\u002d")
    else:
        echoed = "".join(f"\\u{ord(c):04x}" for c in SECRET)
    body = '{"error": "invalid key: %s"}' % echoed
    with RawServer(lambda request: [http_answer(body, status=503)]) as server:
        with caplog.at_level(logging.DEBUG), pytest.raises(OpenAIPolicyError) as error:
            OpenAIPolicy(raw_config(server, max_retries=1)).act([turn("x")])
    assert "invalid key" in str(error.value)
    for text in (str(error.value), caplog.text):
        assert echoed not in text and "5ecret" not in text and "never" not in text, text


@pytest.mark.parametrize("host", ["evil.localhost", "localhost.", "127.0.0.1.nip.io", "localhost.example.com"])
def test_a_host_name_that_dns_resolves_is_not_loopback(monkeypatch, host):
    """Only an address (127.0.0.0/8, ::1) or the name localhost itself is this machine."""
    monkeypatch.setenv("MAOPD_TEST_KEY", SECRET)
    config = OpenAIPolicyConfig(base_url=f"http://{host}:8000/v1", model="m", api_key_env="MAOPD_TEST_KEY")
    assert config.plain_http_to_remote
    with pytest.raises(InsecureKeyError, match="allow_insecure_key"):
        OpenAIPolicy(config)
