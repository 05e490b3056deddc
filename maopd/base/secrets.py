"""Redaction: the one way a secret is hidden before text reaches a log, an error, a record or a file.

``redact(text, *secrets)`` replaces with ``***``:

* each given secret (an API key), as written, percent-encoded, or JSON-escaped (a server that
  echoes a key may write ``sk\\u002d...``: ``\\uXXXX`` escapes are decoded before matching);
* ``Bearer ...`` tokens and ``sk-...`` strings, whoever's they are;
* in every URL (``scheme://...``) in the text, its ``user:password@`` and every query-string value
  (``redact_url``).

``redact_strings(data)`` applies ``redact`` to every string in plain config data: what a saved
config, a config comparison and a logged config are made of. So a URL's credentials never reach
the disk; a process that needs them again (a resumed run, the seeds runner's subprocesses) takes
them from an environment variable (``maopd.envs.retrieval.http_client.RETRIEVER_AUTH_ENV``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

REDACTED = "***"

_BEARER = re.compile(r"(?i)(bearer\s+)[^\s\"',;]+")
_SECRET_LIKE = re.compile(r"\b(sk-)[A-Za-z0-9_\-]{6,}")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]+")
_JSON_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\/")


def redact_url(url: str) -> str:
    """``url`` with credentials hidden: ``user:password@`` becomes ``***@``, every query-string
    value becomes ``***`` (``?api_key=X&a=1`` → ``?api_key=***&a=***``) and a fragment is dropped."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced IPv6 bracket: show no more than the scheme
        return url.partition("://")[0] + "://" + REDACTED
    if "@" in parts.netloc:
        parts = parts._replace(netloc=f"{REDACTED}@" + parts.netloc.rpartition("@")[2])
    if parts.query:
        names = [item.partition("=")[0] for item in parts.query.split("&") if item]
        parts = parts._replace(query="&".join(f"{name}={REDACTED}" for name in names))
    return urlunsplit(parts._replace(fragment=""))


def _unescape_json(text: str) -> str:
    """``\\uXXXX`` and ``\\/`` decoded where they stand for a printable character, so that an
    escaped secret reads as the secret."""

    def decode(match: re.Match) -> str:
        if match.group(1) is None:
            return "/"
        character = chr(int(match.group(1), 16))
        return character if character.isprintable() else match.group(0)

    return _JSON_ESCAPE.sub(decode, text)


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with ``secrets``, Bearer tokens, ``sk-...`` strings and URL credentials as ``***``."""
    text = _unescape_json(text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED).replace(quote(secret, safe=""), REDACTED)
    text = _URL.sub(lambda match: redact_url(match.group(0)), text)
    return _SECRET_LIKE.sub(rf"\1{REDACTED}", _BEARER.sub(rf"\1{REDACTED}", text))


def redact_strings(data: Any) -> Any:
    """Plain data (dicts, lists, scalars) with ``redact`` applied to every string in it."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {key: redact_strings(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_strings(value) for value in data]
    return data
