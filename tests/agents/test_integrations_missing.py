"""The core install works without the adapters' packages: ``maopd.agents.integrations`` and the TRL
classes import none of them, and the OpenEnv and GEM adapters say in one line which extra to
install. Each check runs in a fresh interpreter, with the package hidden (``sys.modules[name] = None``)."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )


@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [("openenv_server", "openenv", "openenv"), ("gem_env", "gem", "gem")],
)
def test_a_missing_package_names_the_extra_to_install(module, package, extra):
    done = run(f"import sys; sys.modules[{package!r}] = None; import maopd.agents.integrations.{module}")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ModuleNotFoundError: maopd.agents.integrations.{module} needs"), last
    assert f"pip install -e '.[{extra}]'" in last


def test_the_core_and_the_trl_classes_import_no_optional_package():
    code = (
        "import sys\n"
        "for name in ('trl', 'datasets', 'openenv', 'gem', 'fastmcp'): sys.modules[name] = None\n"
        "import maopd.agents.integrations, maopd.agents.integrations.role_session\n"
        "from maopd.agents.integrations.trl_env import question_dataset, trl_environment\n"
        "env = trl_environment('solver', split='test')()\n"
        "print(env.reset(question_index=0).splitlines()[-1])\n"
        "print(env.answer('x'), env.get_reward())\n"
        "question_dataset('single', split='test')\n"
    )
    done = run(code)
    assert done.stdout.splitlines()[0].startswith("Question: ") and "Your call is over. 0.0" in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: question_dataset needs `datasets`") and ".[trl]" in last, last


@pytest.mark.skipif(importlib.util.find_spec("gem") is None, reason="gem is not installed")
def test_importing_the_gem_adapter_leaves_the_root_logger_as_it_was():
    done = run(
        "import logging; import maopd.agents.integrations.gem_env; "
        "print(logging.getLogger().handlers, logging.getLogger().level)"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"[] {logging.WARNING}"
