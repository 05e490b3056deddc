"""The wheel works on its own: one import root, the configs and the default preset's π_0 inside,
no results; installed into a fresh venv outside the clone, it runs the smoke job and README's
stepping snippet.

The wheel is built from a copy of the tracked files the distribution is made of, so that what it
holds is what a clean clone builds (no stale ``build/``). The fresh venv reaches the test venv's
dependencies through a ``.pth`` line naming their directory: a directory so named is put on the
path, but the ``.pth`` files inside it are not run, so the editable install's finder, which maps
``maopd`` onto this clone, stays out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from maopd.base.config import read_yaml_mapping
from maopd.pipeline.config import load_preset
from maopd.training.base_model import SHIPPED_DIR

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "maopd", "envs", "agents", "training", "configs", "models")
INSTALLED_AS = {"maopd": "maopd", "envs": "maopd/envs", "agents": "maopd/agents", "training": "maopd/training"}


def tracked(*paths: str) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--", *paths], cwd=ROOT, capture_output=True, text=True, check=True)
    return listed.stdout.split()


def readme_snippet() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("\n## Step an environment") :]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in tracked(*SOURCES):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    python = home / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return home


def run_installed(venv: Path, cwd: Path, *command: str, timeout: float = 300) -> str:
    env = {**os.environ, "XDG_CACHE_HOME": str(cwd / "cache"), "PYTHONPATH": ""}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_wheel_holds_one_import_root_the_configs_and_the_default_pi0_and_no_results(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"maopd", "multiagent_opd-0.1.0.dist-info"}
    default_pi0 = load_preset("default").base_model.key()
    shipped = {name.split("/")[2] for name in names if name.startswith("maopd/models/")}
    assert shipped == {f"base-{default_pi0}"}, "the wheel must carry the default preset's π_0 and no other build"
    for name in tracked(f"models/base-{default_pi0}"):
        assert f"maopd/{name}" in names
    assert {f"maopd/{name}" for name in tracked("configs")} <= set(names)
    modules = {f"{INSTALLED_AS[name.split('/')[0]]}/{name.partition('/')[2]}" for name in tracked(*INSTALLED_AS)}
    assert {m for m in modules if m.endswith(".py")} <= set(names)
    assert not [name for name in names if "benchmarks" in name or "results" in name.split("/")]


def test_installed_outside_the_clone_it_runs_the_smoke_job_and_the_readme_snippet(venv, tmp_path):
    python, maopd = str(venv / "bin" / "python"), str(venv / "bin" / "maopd")
    where = run_installed(venv, tmp_path, python, "-c", "import maopd; print(maopd.__file__)").strip()
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(ROOT)
    shipped = run_installed(
        venv,
        tmp_path,
        python,
        "-c",
        "from maopd.pipeline.config import load_preset; from maopd.training.base_model import base_model_dir; "
        "print(base_model_dir(load_preset('default').base_model))",
    ).strip()
    assert Path(shipped).is_relative_to(venv) and (Path(shipped) / "model.safetensors").is_file()
    run_installed(venv, tmp_path, maopd, "train", "--preset", "smoke", f"run_dir={tmp_path / 'smoke'}")
    assert (tmp_path / "smoke" / "eval" / "summary.json").is_file()
    assert run_installed(venv, tmp_path, python, "-c", readme_snippet()).strip()


def test_the_shipped_pi0_is_the_default_presets():
    """pyproject.toml names the build the wheel carries; it must be the default preset's π_0."""
    key = load_preset("default").base_model.key()
    assert f'"base-{key}/*"' in (ROOT / "pyproject.toml").read_text()
    assert (SHIPPED_DIR / f"base-{key}" / "model.safetensors").is_file()
    assert read_yaml_mapping(SHIPPED_DIR / f"base-{key}" / "sft_config.yaml")
