"""A result's machine names the SIMD extensions numpy dispatches to, which decide whether another
machine can replay it bit for bit."""

import os
import subprocess
import sys

from maopd.base.machine import machine, simd_extensions


def test_the_machine_names_platform_cpus_python_and_simd():
    described = machine()
    assert set(described) == {"platform", "cpus", "python", "simd"}
    assert described["cpus"] == os.cpu_count()
    assert described["simd"] and all(isinstance(name, str) and name for name in described["simd"])


def test_simd_follows_what_numpy_was_told_to_use():
    """With every dispatched extension disabled (``NPY_DISABLE_CPU_FEATURES``), only the baseline is named."""
    from numpy._core import _multiarray_umath as umath

    baseline = list(umath.__cpu_baseline__)
    dispatched = simd_extensions()[len(baseline) :]
    if not dispatched:  # a CPU with no extension beyond numpy's baseline: nothing to disable
        return
    code = "from maopd.base.machine import simd_extensions; print(' '.join(simd_extensions()))"
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(dispatched)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == baseline
