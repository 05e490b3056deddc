"""Without Ray, the RLlib integration says how to install it (README's setup leaves it out)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_missing_ray_names_the_install_command():
    code = "import sys; sys.modules['ray'] = None; import maopd.training.rllib.train_ppo"
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: maopd.training.rllib needs Ray RLlib"), last
    assert "pip install -e '.[rllib]'" in last
