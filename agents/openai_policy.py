"""``OpenAIPolicy``: any OpenAI-compatible ``/chat/completions`` endpoint as a ``Policy``.

Use it for any role: a ``vllm serve`` or SGLang server of our own model, or a hosted model for
evaluation. Mixed into a team with ``RoleRouter``, it lets a strong external Leader direct our
trained Searchers, for example.

* **Requests.** One request per turn, with ``n = turn.num_candidates``, the turn's messages as
  they are, and as ``stop`` the closing tags of the role's actions (at most two, so within the
  four that OpenAI accepts). OpenAI-style servers cut the stop string from the text; we put the
  closing tag back (from the server's ``stop_reason`` when it names it, else the last opened
  action tag) so that the environment parses the action.
* **Records.** ``input_tokens`` and ``output_tokens`` come from the response's ``usage`` (the
  prompt is counted once, however many candidates). ``extra`` holds the URL, the model and each
  candidate's ``finish_reason``. No token ids: this policy evaluates, it does not train.
* **Robustness.** At most ``max_concurrency`` requests are in flight. Each attempt has one
  deadline, ``timeout_s``, for the whole request (connecting, sending, reading all of the answer),
  and an answer over ``max_response_bytes`` is refused (``maopd.base.network``). Connection
  errors, missed deadlines, 408/409/429 and 5xx are retried ``max_retries`` times with exponential
  backoff. A dead server, an answer that is not JSON, or JSON that is not a chat completion (no
  ``choices`` list, a choice that is not an object, ``content`` that is neither text nor null) is
  an ``OpenAIPolicyError``, a one-line ``UserError`` that names the URL.
* **API key.** Read from the environment variable named by ``api_key_env`` (never from a config
  file) when requests are sent, and sent only in the ``Authorization`` header. It is never held by
  the policy object (``vars(policy)`` and ``pickle.dumps(policy)`` do not contain it), printed,
  logged or put in records; an endpoint's answer quoted in an error or log goes through
  ``maopd.base.secrets.redact`` (the key as written or JSON-escaped, any ``Bearer`` token,
  ``sk-...`` strings and URL credentials become ``***``). A key is never sent over plain
  ``http://`` to a host that is not loopback (``maopd.base.network.is_loopback_host``: an address
  in ``127.0.0.0/8`` or ``::1``, or the name ``localhost``; never ``*.localhost``, which DNS
  resolves): the policy refuses, unless the config sets ``allow_insecure_key=True``. Without the
  variable, requests go out without a key (a local server needs none).
* **URL.** ``base_url`` may hold a query string (``?api-version=...``): the request goes to
  ``<path>/chat/completions?<query>``. Everywhere the URL is shown (repr, errors, logs, records,
  httpx's own request log) it goes through ``redact_url``: credentials and query values are ``***``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from maopd.base.config import check_fields, checked, field_like
from maopd.base.errors import UserError
from maopd.base.network import Endpoint, is_loopback_host, new_client
from maopd.base.secrets import redact_url
from maopd.envs.actions import ROLE_ACTION_KINDS
from maopd.envs.policy import AgentOutput, AgentTurn, SamplingSettings, token_count

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass
class OpenAIPolicyConfig:
    """Where the endpoint is and how to call it; the sampling defaults are the paper's eval ones."""

    base_url: str = checked(
        help="The endpoint's base URL (http:// or https://); requests go to <base_url>/chat/completions."
    )
    model: str = checked(help="The name of the served model, as the endpoint knows it.")
    api_key_env: str = checked(
        "OPENAI_API_KEY",
        help="The environment variable holding the API key (never a config file); unset, requests go without a key.",
    )
    temperature: float = field_like(SamplingSettings, "temperature")
    top_p: float = field_like(SamplingSettings, "top_p")
    max_tokens: int = field_like(SamplingSettings, "max_new_tokens")
    max_concurrency: int = checked(8, ge=1, help="The most requests in flight at once.")
    timeout_s: float = checked(
        120.0,
        gt=0,
        help="The deadline of one attempt of a request, in seconds: connecting, sending and reading the whole answer.",
    )
    max_response_bytes: int = checked(
        16 * 2**20, ge=1, help="The largest answer accepted, in bytes; a larger one is refused."
    )
    max_retries: int = checked(
        3,
        ge=0,
        help="How many times a request is retried after a connection error, a missed deadline or an answer with "
        "status 408, 409, 429, 500, 502, 503 or 504.",
    )
    backoff_s: float = checked(
        1.0, ge=0, help="The wait before the first retry, in seconds; it doubles with each further retry."
    )
    extra_body: dict[str, Any] = checked(
        default_factory=dict,
        help='Server-specific request fields added to every request, e.g. {"top_k": 20} for vLLM. Never put the '
        "API key here.",
    )
    allow_insecure_key: bool = checked(
        False,
        help="Send the API key over plain http to a host that is not loopback, where it travels readable on the "
        "network.",
    )

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"OpenAIPolicyConfig.base_url must start with http:// or https://, got {self.base_url!r}")
        if not self.model:
            raise ValueError("OpenAIPolicyConfig.model must name the served model")
        check_fields(self)

    @property
    def url(self) -> str:
        parts = urlsplit(self.base_url)
        return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/chat/completions", fragment=""))

    @property
    def public_url(self) -> str:
        """``url`` as shown anywhere: credentials and query values redacted."""
        return redact_url(self.url)

    @property
    def plain_http_to_remote(self) -> bool:
        """Whether a key would travel unencrypted to another machine."""
        parts = urlsplit(self.base_url)
        return parts.scheme == "http" and not is_loopback_host(parts.hostname or "")

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self.to_dict().items())
        return f"OpenAIPolicyConfig({fields})"

    def to_dict(self) -> dict[str, Any]:
        """The config as a dict for dumps: ``base_url`` redacted."""
        return {**vars(self), "base_url": redact_url(self.base_url), "extra_body": dict(self.extra_body)}


class OpenAIPolicyError(UserError, RuntimeError):
    """A request to the endpoint failed for good (after retries where retrying made sense), or its
    answer is not a chat completion; the message names the URL."""


class InsecureKeyError(UserError, ValueError):
    """The API key would be sent over plain http to a host that is not loopback."""


def _usage_count(value: Any) -> int | None:
    try:
        return token_count(value)
    except (ValueError, OverflowError):
        return None


_OPEN_TAG = re.compile(r"<([a-z]+)>")


def restore_stop_tag(text: str, finish_reason: str | None, stop_reason: Any, stops: Sequence[str]) -> str:
    """Put back the closing tag that the server's ``stop`` handling cut from ``text``."""
    if finish_reason != "stop" or text.endswith(tuple(stops)):
        return text
    if isinstance(stop_reason, str):
        return text + stop_reason if stop_reason in stops else text
    # No stop_reason (OpenAI's API): the stop was EOS or a closing tag; it was a tag when an
    # action tag is still open at the end of the text.
    opened = [m.group(1) for m in _OPEN_TAG.finditer(text)]
    if opened and f"</{opened[-1]}>" in stops and f"</{opened[-1]}>" not in text[text.rfind(f"<{opened[-1]}>") :]:
        return text + f"</{opened[-1]}>"
    return text


def stops_for(turn: AgentTurn) -> list[str]:
    """The closing tags that end a turn of this role (those of the allowed actions otherwise)."""
    kinds = ROLE_ACTION_KINDS.get(turn.role, turn.allowed)
    return [f"</{kind}>" for kind in kinds]


class OpenAIPolicy:
    def __init__(self, config: OpenAIPolicyConfig):
        self.config = config
        # The key is looked up here to fail early, and again per batch; the object never keeps it.
        key = self._api_key()
        if key is None:
            logger.info("%s is not set; calling %s without an API key", config.api_key_env, config.public_url)

    def _api_key(self) -> str | None:
        key = os.environ.get(self.config.api_key_env) or None
        if key is not None and self.config.plain_http_to_remote and not self.config.allow_insecure_key:
            raise InsecureKeyError(
                f"refusing to send ${self.config.api_key_env} over plain http to {self.config.public_url}: "
                "use https, a loopback host, or set allow_insecure_key=True"
            )
        return key

    def __repr__(self) -> str:
        key = "set" if os.environ.get(self.config.api_key_env) else "unset"
        return (
            f"OpenAIPolicy(url={self.config.public_url!r}, model={self.config.model!r}, "
            f"api key {key} via ${self.config.api_key_env})"
        )

    __str__ = __repr__

    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        if not turns:
            return []
        return asyncio.run(self._act_all(turns))

    def _endpoint(self) -> Endpoint:
        hint = f" (is ${self.config.api_key_env} set?)"
        return Endpoint(
            self.config.url,
            deadline_s=self.config.timeout_s,
            max_bytes=self.config.max_response_bytes,
            error=OpenAIPolicyError,
            retries=self.config.max_retries,
            backoff_s=self.config.backoff_s,
            retry_statuses=RETRYABLE_STATUS,
            status_hints={401: hint, 403: hint},
        )

    async def _act_all(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        key = self._api_key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        # what a server may echo back besides the key: the password of the URL's user:password@
        secrets = (key, urlsplit(self.config.base_url).password)
        endpoint = self._endpoint()
        semaphore = asyncio.Semaphore(self.config.max_concurrency)
        client = new_client(self.config.max_concurrency, headers=headers, timeout=self.config.timeout_s)
        async with client:
            return list(await asyncio.gather(*(self._act_one(client, endpoint, semaphore, t, secrets) for t in turns)))

    async def _act_one(
        self,
        client: httpx.AsyncClient,
        endpoint: Endpoint,
        semaphore: asyncio.Semaphore,
        turn: AgentTurn,
        secrets: tuple[str | None, ...],
    ) -> AgentOutput:
        stops = stops_for(turn)
        body = {
            **self.config.extra_body,
            "model": self.config.model,
            "messages": [dict(m) for m in turn.messages],
            "n": turn.num_candidates,
            "temperature": self.config.temperature,
            "top_p": self.config.top_p,
            "max_tokens": self.config.max_tokens,
            "stop": stops,
        }
        async with semaphore:
            response = await endpoint.call(client, body=body, secrets=secrets)
        choices = self._choices(response, turn.num_candidates)
        texts = [
            restore_stop_tag(
                (c.get("message") or {}).get("content") or "", c.get("finish_reason"), c.get("stop_reason"), stops
            )
            for c in choices
        ]
        usage = response.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        model = response.get("model")
        return AgentOutput(
            texts=texts,
            # a server's usage is untrusted: an invalid count is unknown (None), never NaN or negative
            input_tokens=_usage_count(usage.get("prompt_tokens")),
            output_tokens=_usage_count(usage.get("completion_tokens")),
            extra={
                "url": self.config.public_url,
                "model": model if isinstance(model, str) else self.config.model,
                "finish_reasons": [c.get("finish_reason") for c in choices],
            },
        )

    def _choices(self, response: Any, n: int) -> list[dict]:
        """The ``n`` choices of a chat completion, in index order; ``OpenAIPolicyError`` naming the
        URL when the answer is not one."""
        shown = self.config.public_url

        def malformed(problem: str) -> OpenAIPolicyError:
            return OpenAIPolicyError(f"{shown} answered with JSON that is not a chat completion: {problem}")

        if not isinstance(response, dict):
            kind = "null" if response is None else type(response).__name__
            raise malformed(f"a {kind}, not an object")
        choices = response.get("choices")
        if not isinstance(choices, list):
            raise malformed("no 'choices' list")
        for number, choice in enumerate(choices):
            if not isinstance(choice, dict):
                raise malformed(f"choice {number} is a {type(choice).__name__}, not an object")
            index = choice.get("index", 0)
            if isinstance(index, bool) or not isinstance(index, int):
                raise malformed(f"choice {number} has index {str(index)[:40]!r}, not an integer")
            message = choice.get("message")
            if message is not None and not isinstance(message, dict):
                raise malformed(f"choice {number}'s message is a {type(message).__name__}, not an object")
            content = (message or {}).get("content")
            if content is not None and not isinstance(content, str):
                raise malformed(f"choice {number}'s content is a {type(content).__name__}, not text or null")
            if not isinstance(choice.get("finish_reason"), (str, type(None))):
                raise malformed(f"choice {number}'s finish_reason is not text or null")
        if len(choices) != n:
            raise OpenAIPolicyError(f"{shown} returned {len(choices)} choices for n={n}")
        return sorted(choices, key=lambda c: c.get("index", 0))
