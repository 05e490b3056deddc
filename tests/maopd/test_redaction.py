"""Secrets never reach a file, a log or an error: ``maopd.base.secrets.redact`` in every form a
secret takes, saved and compared configs, and which hosts count as this machine."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
import yaml

from maopd.base.config import ConfigError
from maopd.base.network import is_loopback_host
from maopd.base.run_dir import CONFIG_FILE, check_resume, write_record
from maopd.base.secrets import redact, redact_strings, redact_url
from maopd.training.config import build_config

KEY = "sk-abcdef0123456789"


BASE64_KEY = "abcdef/0123456789+xyz=="  # a key with characters that percent-encoding changes


@pytest.mark.parametrize(
    "key,text",
    [
        (KEY, f"invalid key {KEY}"),
        (KEY, "invalid key " + KEY.replace("-", "\\u002d")),  # as JSON may escape it
        (KEY, "invalid key " + "".join(f"\\u{ord(c):04x}" for c in KEY)),
        (BASE64_KEY, "invalid key " + quote(BASE64_KEY, safe="")),
        (None, "Authorization: Bearer abcdef0123456789"),
        (None, "see http://user:abcdef0123456789@host:1/v1"),
        (None, "see https://host/v1?api_key=abcdef0123456789&x=1"),
        (None, json.dumps({"echo": "http://user:abcdef0123456789@host/v1"})),
    ],
)
def test_redact_hides_a_secret_in_every_form(key, text):
    shown = redact(text, key)
    assert "abcdef" not in shown and "0123456789" not in shown and "***" in shown, shown


def test_redact_keeps_the_rest_and_is_idempotent():
    text = "http://u:p@h:1/v1?api_key=X&x=1#frag said: no"
    assert redact(text) == "http://***@h:1/v1?api_key=***&x=*** said: no"
    assert redact(redact(text)) == redact(text)
    assert redact_url("http://127.0.0.1:8000/x") == "http://127.0.0.1:8000/x"
    assert redact_url("http://[::1") == "http://***"
    assert redact_strings({"a": ["http://u:p@h", 1, None]}) == {"a": ["http://***@h", 1, None]}


@pytest.mark.parametrize(
    "host,loopback",
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("evil.localhost", False),
        ("localhost.", False),
        ("localhost.example.com", False),
        ("127.0.0.1.nip.io", False),
        ("10.0.0.1", False),
        ("", False),
    ],
)
def test_a_host_is_loopback_only_by_its_address(host, loopback):
    assert is_loopback_host(host) is loopback


def _config(run_dir, url, **overrides):
    return build_config(
        {"stage": "stage1", "run_dir": str(run_dir), "env": {"retriever": {"kind": "http", "url": url}}, **overrides}
    )


def test_a_saved_config_holds_the_url_redacted_and_resume_compares_redacted_forms(tmp_path):
    url = "http://u:TOKEN@127.0.0.1:8000?api_key=QUERYSECRET"
    write_record(_config(tmp_path, url), tmp_path)
    saved = (tmp_path / CONFIG_FILE).read_text()
    assert "TOKEN" not in saved and "QUERYSECRET" not in saved
    assert yaml.safe_load(saved)["env"]["retriever"]["url"] == "http://***@127.0.0.1:8000?api_key=***"
    checkpoint = tmp_path / "checkpoints" / "step_1"
    # the same URL, or the same with another credential, is the same config: the run resumes
    check_resume(_config(tmp_path, url), checkpoint)
    check_resume(_config(tmp_path, url.replace("TOKEN", "TOKEN2")), checkpoint)
    # another server is another config; the refusal names the URLs redacted
    with pytest.raises(ConfigError, match="env.retriever.url") as refusal:
        check_resume(_config(tmp_path, "http://u:TOKEN@127.0.0.1:9000"), checkpoint)
    assert "TOKEN" not in str(refusal.value) and "***@127.0.0.1:9000" in str(refusal.value)
