"""What a result's machine was: enough to tell whether another machine can replay it bit for bit.

numpy and torch choose their kernels by the CPU's SIMD instructions, and their last digits differ
between the kinds (docs/findings.md, "Reproducibility"): a result records the ones numpy dispatches
to beside the platform and the CPU count.
"""

from __future__ import annotations

import os
import platform


def simd_extensions() -> list[str]:
    """The SIMD extensions numpy uses on this CPU, its baseline first, then those it dispatches to
    (what numpy's ``show_runtime`` reports); ``["unknown"]`` where numpy does not say."""
    try:
        from numpy._core import _multiarray_umath as umath  # numpy 2's private runtime report
    except ImportError:
        return ["unknown"]
    features = getattr(umath, "__cpu_features__", {})
    baseline = list(getattr(umath, "__cpu_baseline__", []))
    dispatched = [name for name in getattr(umath, "__cpu_dispatch__", []) if features.get(name)]
    return baseline + dispatched or ["unknown"]


def machine() -> dict[str, object]:
    """The platform, CPU count, Python and SIMD extensions of this machine."""
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "simd": simd_extensions(),
    }
