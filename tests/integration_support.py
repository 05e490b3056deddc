"""What the tests of ``maopd.agents.integrations`` share: importing the optional package they drive.

The packages come with the extras ``trl``, ``openenv`` and ``gem``, which ``bash scripts/setup.sh
--dev`` installs (openenv needs Python >= 3.11, GEM Python < 3.12). Without one the tests that
drive it skip, except in a dev install (the dev extra's ``rliable`` is there) on a Python the
package supports: there a missing package fails, so CI never passes without having run them.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

# module, extra, the Python versions its pinned release installs on
PACKAGES = {
    "trl": ("trl", lambda v: True),
    "openenv": ("openenv", lambda v: v >= (3, 11)),
    "gem": ("gem", lambda v: v < (3, 12)),
}


def require(module: str):
    """``pytest.importorskip(module)``, failing instead of skipping where it should be installed."""
    extra, supported = PACKAGES[module]
    if importlib.util.find_spec(module) is None:
        reason = f"{module} is not installed; install it with `pip install -e '.[{extra}]'` (or setup.sh --dev)"
        if supported(sys.version_info[:2]) and importlib.util.find_spec("rliable") is not None:
            pytest.fail(f"a dev install on this Python should have {module}: {reason}")
        pytest.skip(reason)
    return pytest.importorskip(module)
